"""An arm's credentials: the headers sent with every request to an endpoint given by URL.

A pilot file writes them as references to environment variables, read when the arm runs::

    - name: hosted
      role: speculative
      engine: openai
      url: https://api.example.com/v1
      api_key_env: OPENAI_API_KEY       # Authorization: Bearer $OPENAI_API_KEY
      headers: {OpenAI-Organization: "${OPENAI_ORG}", X-Team: pilots}

What is stored (the pilot file's config, the pilot record) is the file as written, references
and all; the arm's manifest records the names of the headers sent (``headers_sent``), never a
value. A credential header (``Authorization``, a name with ``key``, ``token``, ``secret``,
``cookie`` ...) must take its value from a variable: a key written into the file would be
stored with every copy of the pilot file and its report. Other headers may be literal.

    >>> resolve("a", {"X-Team": "pilots"}, "K", {"K": "k-1"})
    {'X-Team': 'pilots', 'Authorization': 'Bearer k-1'}
    >>> resolve("a", {}, "K", {})
    Traceback (most recent call last):
    ...
    specpilot.errors.ConfigError: arm 'a': header Authorization needs $K, which is not set
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Protocol

from specpilot.errors import ConfigError
from specpilot.validation import FieldProblem

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
REF = re.compile(r"\$\{([^}]*)\}")
FIELD_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP field name (RFC 9110 token)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# a header whose name says it carries a credential: its value must come from the environment
SECRET_WORDS = ("auth", "key", "token", "secret", "password", "cookie", "session", "signature")
BEARER = "Authorization"


class Credentialed(Protocol):
    """An arm with credentials (``pilot.config.arms.ArmBase``, ``pilot.plan.arms.ArmPlan``)."""

    @property
    def name(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def api_key_env(self) -> str | None: ...


def is_credential(name: str) -> bool:
    """Whether a header name says it carries a credential.

    >>> [is_credential(n) for n in ("Authorization", "x-api-key", "X-Team", "api-key")]
    [True, True, False, True]
    """
    low = name.lower()
    return any(w in low for w in SECRET_WORDS)


def check_headers(headers: Mapping[str, str], api_key_env: str | None) -> None:
    """Raise a ``FieldProblem`` (its path relative to the arm) for the first bad entry; no
    message shows a value."""
    if api_key_env is not None and not re.match(ENV_NAME, api_key_env):
        raise FieldProblem(
            "api_key_env is not an environment variable name",
            fix="write the variable's name (e.g. OPENAI_API_KEY), not its value",
            path=("api_key_env",),
        )
    if api_key_env is not None and any(n.lower() == BEARER.lower() for n in headers):
        raise FieldProblem(
            "api_key_env and headers.Authorization both set the Authorization header",
            fix="keep one: api_key_env: NAME is headers: {Authorization: 'Bearer ${NAME}'}",
            path=("api_key_env",),
        )
    for name, value in headers.items():
        at = ("headers", name)
        if not FIELD_NAME.match(name):
            raise FieldProblem(
                f"header name {name!r} is not a valid HTTP header name",
                fix="use letters, digits and '-' (e.g. X-Api-Key)",
                path=at,
            )
        refs = REF.findall(value)
        if any(not re.match(ENV_NAME, r) for r in refs):
            raise FieldProblem(
                f"header {name}: a ${{...}} reference that is not an environment variable name",
                fix="write ${NAME} with letters, digits and '_' (not starting with a digit)",
                path=at,
            )
        if CONTROL.search(value):
            raise FieldProblem(
                f"header {name}: the value holds a line break or control character",
                fix="write the value on one line",
                path=at,
            )
        if is_credential(name) and not refs:
            raise FieldProblem(
                f"header {name} is written literally: a credential there would be "
                "stored with the pilot (its DuckDB file, its report)",
                fix=f'put it in an environment variable and write {name}: "${{NAME}}" '
                '(e.g. "Bearer ${API_KEY}"), or api_key_env: NAME for a bearer token',
                path=at,
            )


def wanted(headers: Mapping[str, str], api_key_env: str | None) -> dict[str, str]:
    """The headers as written, ``api_key_env`` spelled out as its Authorization header."""
    out = dict(headers)
    if api_key_env:
        out[BEARER] = f"Bearer ${{{api_key_env}}}"
    return out


def resolve(
    arm: str,
    headers: Mapping[str, str],
    api_key_env: str | None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers to send, each ``${VAR}`` replaced by the variable's value; an unset (or
    empty) variable is a ``ConfigError`` naming the arm, the header and the variable."""
    env = os.environ if environ is None else environ
    out = {}
    for name, value in wanted(headers, api_key_env).items():

        def value_of(m: re.Match[str], name: str = name) -> str:
            var = m.group(1)
            got = env.get(var, "")
            if not got:
                raise ConfigError(
                    f"arm {arm!r}: header {name} needs ${var}, which is not set",
                    fix=f"export {var}=... before the run (the value is read from the "
                    "environment, never from the file)",
                )
            if CONTROL.search(got):
                raise ConfigError(
                    f"arm {arm!r}: ${var} (header {name}) holds a line break or control "
                    "character, which no HTTP header may carry",
                    fix=f"export {var} without the trailing newline (e.g. $(cat key | tr -d '\\n'))",
                )
            return got

        out[name] = REF.sub(value_of, value)
    return out


def names(headers: Mapping[str, str], api_key_env: str | None) -> list[str]:
    """The header names sent (what a manifest records), sorted.

    >>> names({"X-Team": "p"}, "K")
    ['Authorization', 'X-Team']
    """
    return sorted(wanted(headers, api_key_env))


def source(headers: Mapping[str, str], api_key_env: str | None) -> str:
    """Where the values come from, for an error's fix: ``$A, $B`` (never a value).

    >>> source({"X-Key": "${B}"}, "A")
    '$B, $A'
    """
    refs = [r for v in wanted(headers, api_key_env).values() for r in REF.findall(v)]
    return ", ".join(f"${r}" for r in dict.fromkeys(refs))


def arm_headers(arm: Credentialed) -> dict[str, str]:
    """An arm's (``pilot.config.file``'s arm model) headers, resolved from the environment now."""
    return resolve(arm.name, arm.headers, arm.api_key_env)
