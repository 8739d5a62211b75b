"""specpilot: decide, with measurements, whether speculative decoding is worth switching on."""

__version__ = "0.1.0"
__all__ = ["__version__"]
