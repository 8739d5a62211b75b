"""specpilot: decide, with measurements, whether speculative decoding is worth switching on."""

import os
from pathlib import Path

__version__ = "0.1.0"
__all__ = ["__version__", "cache_root"]


def cache_root() -> Path:
    """Where every cache lives (calibrations, tokenizers, exported models, vLLM's venv):
    ``$SPECPILOT_CACHE``, else ``$XDG_CACHE_HOME/specpilot`` (``~/.cache/specpilot``)."""
    if os.environ.get("SPECPILOT_CACHE"):
        return Path(os.environ["SPECPILOT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specpilot"
