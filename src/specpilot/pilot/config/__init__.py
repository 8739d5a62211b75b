"""What a pilot file says, checked before anything runs: the file's model (``file``: arms,
workload, episodes, quality, drill, report), each engine's options (``options``), the rules
across arms (``armrules``), the model files they name (``files``), an arm's credentials
(``credentials``) and what sizes the load levels beyond the file (``sizing``: ``--budget``,
``--episodes``, the short-level refusal). Stands on ``pilot.design``."""
