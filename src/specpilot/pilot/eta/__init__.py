"""What the pilot shows while it runs: the ETA's pure estimator (``remaining``) and the live
progress line (``progress``). Imports nothing of the other rooms."""
