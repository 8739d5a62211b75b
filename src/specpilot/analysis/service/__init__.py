"""What the service does under load (R4-R6): load cells with every scheduled request counted
(``load``), capacity and the draft's memory budget (``capacity``), cost at equal quality and
deadline (``cost``), where a task's time goes (``e2e``), stage timings from real traces
(``traces``) and what each level means on this machine (``utilization``). Stands on
``base``."""
