"""Subcommands of the ``specpilot`` CLI; each module here defines ``register(subparsers)``."""
