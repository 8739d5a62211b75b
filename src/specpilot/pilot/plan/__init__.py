"""What the runner decides before it runs: each arm's strategy and frozen settings
(``arms``), its runs (``runplans``), the files it needs (``assets``), the backend that starts
it (``engines``), the noise this machine has shown (``noise``) and the levels fitted to the
budget (``fit``). Stands on ``config``."""
