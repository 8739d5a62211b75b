"""specpilot's user errors: what the person running specpilot must fix, said in one line.

Raise one of these for a bad config value or argument, a bad or missing input file, or an
engine that would not start. ``specpilot`` (``cli.py``) prints them as ``error: MESSAGE`` plus
``fix: FIX`` and exits 2, without a traceback. Everything else (a ``ValueError`` from a
library, an ``AssertionError``, a ``KeyError`` ...) is a bug and shows its traceback.

    >>> from specpilot.errors import ConfigError, SpecpilotError
    >>> err = ConfigError("phase 'peak': rate must be > 0 requests/s, got 0", fix="set rate: 0.5")
    >>> isinstance(err, SpecpilotError), str(err), err.fix
    (True, "phase 'peak': rate must be > 0 requests/s, got 0", 'set rate: 0.5')
    >>> print(err.describe())
    phase 'peak': rate must be > 0 requests/s, got 0
      fix: set rate: 0.5

The user-input classes also derive from ``ValueError`` (``EngineStartError`` from
``RuntimeError``) so that callers which already catch those (the HTTP server turns a
``ValueError`` from request validation into a 400) keep working while raising sites move
over. This module is a leaf: it imports nothing from specpilot, so every layer may use it.
"""

from __future__ import annotations

__all__ = ["ConfigError", "EngineStartError", "InputFileError", "SpecpilotError"]


class SpecpilotError(Exception):
    """A user error: ``str(err)`` is the message, ``err.fix`` what to do (None: the message says)."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def describe(self) -> str:
        """The message, and the fix on a second line when there is one."""
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"

    def __reduce__(self) -> tuple[object, ...]:  # keep ``fix`` across pickling (subprocesses)
        return (_rebuild, (type(self), self.message, self.fix))


def _rebuild(cls: type[SpecpilotError], message: str, fix: str | None) -> SpecpilotError:
    return cls(message, fix=fix)


class ConfigError(SpecpilotError, ValueError):
    """A bad setting: a workload/pilot/strategy file's value, a command-line option, an API field."""


class InputFileError(SpecpilotError, ValueError):
    """A file that is missing, unreadable or malformed (trace, prompt set, documents, schedule)."""


class EngineStartError(SpecpilotError, RuntimeError):
    """An engine (builtin, llama.cpp, vLLM, SGLang) that failed to load or start."""
