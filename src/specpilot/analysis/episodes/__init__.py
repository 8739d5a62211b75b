"""How one cell's effect is estimated, with engine processes and episodes as the units: the
cell's test (``celltest``) dispatches to the design's estimator, in place (``inplace``), in one
pool (``onepool``) or in two pools (``estimate``, its variance components by moments in
``components``); ``power`` plans the episodes a pilot needs under the same rules, and
``sequential`` holds the looks that stop a decided level early. Stands on ``base``."""
