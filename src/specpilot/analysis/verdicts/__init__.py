"""The verdict (R8) and what it rests on: the group and service verdicts with their rules
(``decision``, ``verdict``), the load window where speculation pays (``window``), what an
undecided verdict lacks (``undecided``), whether the planted effect was found (``planted``),
the planner's prediction against what was achieved (``predicted``), the quality gates
(``quality``) and the group x metric matrix the report draws (``matrix``). The top room: it
stands on every other."""
