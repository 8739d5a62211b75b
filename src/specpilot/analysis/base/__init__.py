"""The floor every analysis room stands on: every scheduled request as columns
(``requests``), the episode design's records seen by load level (``fold``), what a pilot file
covers (``coverage``), columnar helpers (``columns``) and the small-sample statistics
(``stats``). Imports nothing of the other rooms."""
