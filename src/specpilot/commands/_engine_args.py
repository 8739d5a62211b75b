"""The reference engine's format, device and calibration flags, shared by ``specpilot serve``
and ``specpilot generate`` (one definition, one help text)."""

from __future__ import annotations

import argparse


def add_engine_format_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dtype",
        default="auto",
        help="weight format: auto (measured at load, cached) | fp32 (exact greedy identity) | "
        "bf16 | int8-bf16 | int8-fp32 | q4-bf16; a pilot passes the format its first arm chose "
        "to every arm",
    )
    p.add_argument("--device", default="cpu", help="cpu | cuda[:N]")
    p.add_argument(
        "--calibration",
        choices=["auto", "force", "skip"],
        default=None,
        help="load-time calibration: auto (use the cache), force (measure again), skip "
        "(default: $SPECPILOT_CALIBRATION, else auto)",
    )
