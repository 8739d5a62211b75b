"""The credential flags of commands that take an endpoint URL (``specpilot load``, ``specpilot
compat``): ``--api-key-env NAME`` and ``--header 'NAME: VALUE'``, checked as a pilot file's
``headers:`` / ``api_key_env:`` (``pilot.config.credentials``), one definition, one help text.

    >>> header_options(["X-Team: pilots", "X-Api-Key: ${MY_KEY}"], None)
    {'X-Team': 'pilots', 'X-Api-Key': '${MY_KEY}'}
"""

from __future__ import annotations

import argparse

from specpilot.errors import ConfigError


def add_header_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="send Authorization: Bearer $NAME (the key read from the environment variable "
        "NAME; only its name is stored)",
    )
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header sent with every request to the URL (repeatable); ${VAR} in VALUE is read "
        "from the environment (single-quote it); a credential header must use ${VAR}",
    )


def header_options(items: list[str], api_key_env: str | None) -> dict[str, str]:
    """``["X-Team: pilots"]`` -> ``{"X-Team": "pilots"}``, as written (references, not
    values); errors name the option, never a value."""
    from specpilot.pilot.config.credentials import check_headers
    from specpilot.validation import FieldProblem

    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ConfigError(
                "--header: expected 'NAME: VALUE'", fix="e.g. --header 'X-Api-Key: ${MY_KEY}'"
            )
        out[name.strip()] = value.strip()
    try:
        check_headers(out, api_key_env)
    except FieldProblem as exc:
        option = "--api-key-env" if exc.path[:1] == ("api_key_env",) else "--header"
        raise ConfigError(
            f"{option}: {exc.message}",
            fix=f"{exc.fix} (on the command line in single quotes, so the shell leaves "
            "${NAME} to specpilot)",
        ) from None
    return out
