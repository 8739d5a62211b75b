"""Rolling back (R8): the Prometheus alerting rules (``rules``), the drill's metrics
(``drill``) and whether the rolled-back arm serves as the baseline does (``parity``). Stands on
``comparison`` and ``base``."""
