"""Running the pilot: the runner (``runner``) and its typed seam (``context``), one arm's
recorded steps (``steps``, ``armrun``), the episode design's execution (``episode_run``) with its
looks (``looks``), the capacity probe (``capacity``), each process's fingerprint
(``fingerprint``), the runs that reach another run's process (``planted``), the drill
(``drill``), the gates and the finish (``gates``, ``finish``), ``specpilot load``'s one-arm
pilot (``one_arm``) and the ETA's plan (``eta_plan``). Stands on ``plan``, ``config`` and
``eta``."""
