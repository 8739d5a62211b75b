"""Why a candidate is as fast as it is (R2): rounds and their per-request aggregates
(``rounds``, ``round_summary``), the verify-cost curve (``verify_cost``), the Leviathan
expectation beside the measured speed-up (``leviathan``), the choice of k (``tune_k``) and
acceptance from an engine's own counters (``counters``). Stands on ``base``."""
