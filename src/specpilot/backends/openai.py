"""An endpoint we do not run: a managed API, someone else's server (a pilot arm's ``url:``).

Nothing is started or stopped: ``start`` waits until ``/v1/models`` answers. ``engine`` says
what serves it, when the user knows: its ``/metrics`` and per-response parsers then apply
(``openai``, the default: delivery metrics only). An endpoint cannot be restarted, so it cannot
be drilled.

``describe`` records what the endpoint reports about itself (``backends.reported``: its
version, the models it serves, its speculative settings, per engine, with a note for each
thing it could not read) and nothing it does not: ``speculative["known"]`` is False where the
endpoint does not say whether it speculates, and the model files' hashes and launch flags are
never known, so no report may assume them (R8). ``backends.replicas.replica_differences``
compares such manifests across the replicas of one arm.

``headers`` go with every request this backend sends (the health check, ``/metrics``, the GETs
of ``describe``): the arm's credentials. A 401 or 403 at the health check is refused at once
(``CredentialsRefused``), before anything is measured; no message or manifest says a header's
value.

    >>> be = OpenAIBackend("https://api.example.com/v1")
    >>> be.endpoint
    'https://api.example.com'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specpilot.backends.extras import header
from specpilot.backends.facts import hardware_info
from specpilot.backends.protocol import BackendError, Manifest, ModelFile
from specpilot.backends.reported import read_reported
from specpilot.errors import ConfigError
from specpilot.records import MetricSnapshot, ResponseExtras

UNKNOWN = (
    "given by URL: specpilot records what the endpoint reports about itself (the notes below "
    "say what it could not read), never the model files' hashes or launch flags behind it (R8); "
    "it cannot be restarted, so it cannot be drilled"
)
START_WAIT_S = 30.0  # how long ``start`` waits for /v1/models when given no timeout
REFUSED = (401, 403)


class CredentialsRefused(ConfigError):
    """The endpoint answered 401 or 403: the arm's credentials are missing or wrong."""


def refusal(name: str, url: str, status: int, sent: list[str], source: str) -> CredentialsRefused:
    """The error for a 401/403 at the health check: the arm, the URL, the status, the header
    names sent (never their values) and the fix.

    >>> print(refusal("b", "http://h/v1/models", 401, [], "").describe())  # doctest: +ELLIPSIS
    arm 'b': http://h/v1/models answered 401 without credentials: nothing was measured
      fix: give the arm its credentials: api_key_env: NAME (Authorization: Bearer $NAME) or ...
    """
    if not sent:
        return CredentialsRefused(
            f"arm {name!r}: {url} answered {status} without credentials: nothing was measured",
            fix="give the arm its credentials: api_key_env: NAME (Authorization: Bearer $NAME) "
            "or headers: {Header: ${NAME}} in the pilot file (specpilot load: --api-key-env "
            "NAME or --header), with the key exported in $NAME",
        )
    return CredentialsRefused(
        f"arm {name!r}: {url} answered {status} to the credentials sent "
        f"({', '.join(sent)}): nothing was measured",
        fix=f"check the key in {source or 'the environment variables the headers name'}: "
        "the endpoint refused it (wrong, expired, or without access to this model)",
    )


def response_extras(
    obj: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, strict: bool = False
) -> ResponseExtras:
    """Only the response's id: the OpenAI format says nothing about how it was generated."""
    return ResponseExtras(server_request_id=header(headers, "x-request-id") or obj.get("id"))


@dataclass
class OpenAIBackend:
    url: str
    model: str = "default"
    engine: str = "openai"  # what serves the URL, when known: picks the parsers
    unknown: tuple[str, ...] = ()  # frozen fields the pilot config could not tell
    name: str = ""
    # sent with every request (credentials); repr=False: a repr never shows a value
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    source: str = ""  # where the headers' values come from ("$OPENAI_API_KEY"), for a fix

    def __post_init__(self) -> None:
        self.name = self.name or self.engine

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/").removesuffix("/v1")

    def start(self, timeout_s: float | None = None) -> None:
        """Nothing to start: wait until the endpoint answers ``/v1/models`` (any answer but a
        server error: a server without a model list is up all the same); a 401 or 403 is
        refused at once (``CredentialsRefused``)."""
        import httpx

        deadline = time.monotonic() + (timeout_s or START_WAIT_S)
        last = ""
        while time.monotonic() < deadline:
            try:
                status = self._models()
                if status < 500:
                    return
                last = f"HTTP {status}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.5)
        raise BackendError(f"{self.name}: {self.endpoint} does not answer ({last})")

    def check_credentials(self) -> None:
        """One request to ``/v1/models`` now: a 401 or 403 is refused (``CredentialsRefused``);
        an endpoint that does not answer yet is ``start``'s to wait for."""
        import httpx

        try:
            self._models()
        except httpx.HTTPError:
            return

    def _models(self) -> int:
        """``/v1/models``' status with the arm's headers; a 401 or 403 raises its refusal."""
        import httpx

        url = self.endpoint + "/v1/models"
        status = httpx.get(url, headers=dict(self.headers), timeout=5.0).status_code
        if status in REFUSED:
            raise refusal(self.name, url, status, sorted(self.headers), self.source)
        return status

    def stop(self) -> None:
        """Nothing to stop."""

    def kill(self) -> None:
        raise BackendError(f"{self.endpoint} is not run by specpilot: it cannot be killed")

    def describe(self) -> Manifest:
        """What the endpoint reports now (a few GETs with the arm's headers; a failed one is a
        note, never an error): version, served models, speculative settings."""
        got = read_reported(self.engine, self.endpoint, self.headers)
        spec = {
            **got.speculative,
            "known": got.spec_known,
            "model": self.model,
            "unknown": list(self.unknown),
        }
        hide = _secrets(self.headers)
        return Manifest(
            engine=self.engine if self.engine != "openai" else "openai-compatible (unknown)",
            engine_version=hide(got.version or "unknown"),
            endpoint=self.endpoint,
            models=tuple(ModelFile(m.role, hide(m.path), m.sha256, m.bytes) for m in got.models),
            tokenizer_sha256=None,
            launch=(),
            speculative=_hidden(spec, hide),
            hardware={"client": hardware_info(), "server": "unknown"},
            notes=tuple(hide(n) for n in (UNKNOWN, *got.notes)),
            started_by_specpilot=False,
        )

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        """The engine's own /metrics when its parser is known (``openai``: nothing to read)."""
        from specpilot.backends import scrape_endpoint

        return scrape_endpoint(
            self.engine, self.endpoint, run_id, arm, phase, label, headers=self.headers
        )

    def response_extras(
        self, obj: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> ResponseExtras:
        from specpilot.backends import response_extras_for

        return response_extras_for(self.engine)(obj, headers)


def _secrets(headers: Mapping[str, str]) -> Callable[[str], str]:
    """A text with every header value (and a ``Bearer KEY``'s KEY) as ``***``: an endpoint that
    echoes a credential into what it reports still leaves none in the manifest.

    >>> _secrets({"Authorization": "Bearer k-123"})("key k-123")
    'key ***'
    """
    values = {v for v in headers.values() if v}
    values |= {v.partition(" ")[2].strip() for v in values if " " in v}
    ordered = sorted((v for v in values if len(v) >= 4), key=len, reverse=True)

    def hide(text: str) -> str:
        for value in ordered:
            text = text.replace(value, "***")
        return text

    return hide


def _hidden(value: Any, hide: Callable[[str], str]) -> Any:
    """``value`` with ``hide`` applied to every string in it, keys and values."""
    if isinstance(value, str):
        return hide(value)
    if isinstance(value, dict):
        return {hide(str(k)): _hidden(v, hide) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hidden(v, hide) for v in value]
    return value
