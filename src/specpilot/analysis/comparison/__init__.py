"""Two arms compared cell by cell: the requests paired and each cell measured on its pairs
(``pairs``), the paired comparison and its multiplicity plan (``paired``), its descriptive
bootstrap intervals (``resample``), the A/A control (``aa``) and which phases shared the machine
unevenly (``contention``). Stands on ``episodes`` and ``base``."""
