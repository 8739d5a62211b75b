"""What every engine specpilot starts shares: an endpoint on host:port, /metrics scraped with
the engine's own names (``metrics``), each response's extras read by the engine's own parser
(``parse_extras``), and, for an engine run as ``command()`` in a subprocess (builtin, vLLM,
SGLang), start / stop / kill. A backend module names its two parsers once, on its class.

(Not in ``backends.process``: ``backends.scrape`` imports that module for ``get_text``.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from specpilot.backends.process import ServerProcess, free_port
from specpilot.backends.protocol import START_TIMEOUT_S, BackendError
from specpilot.backends.scrape import MetricsSource, scrape
from specpilot.records import MetricSnapshot, ResponseExtras


class EngineServer:
    """``scrape`` and ``response_extras`` of an engine at ``endpoint`` with process ``pid``."""

    metrics: ClassVar[MetricsSource]
    parse_extras: ClassVar[Callable[..., ResponseExtras]]  # (obj, headers): a staticmethod

    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        return scrape(
            self.metrics,
            self.endpoint,
            pid=self.pid,
            run_id=run_id,
            arm=arm,
            phase=phase,
            label=label,
        )

    def response_extras(
        self, obj: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> ResponseExtras:
        return type(self).parse_extras(obj, headers)


class SubprocessLifecycle(EngineServer):
    """An engine run as ``command()`` in a subprocess on ``host``:``port`` (0: a free port,
    chosen by ``listen()``, which subclasses call from ``__post_init__``)."""

    host: str
    port: int
    env: dict[str, str]  # variables the server gets beyond ours (the placement's devices)
    _server: ServerProcess | None

    def listen(self) -> None:
        self.port = self.port or free_port(self.host)
        self._server = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._server is not None else None

    def command(self) -> list[str]:
        raise NotImplementedError

    def launch_env(self) -> dict[str, str]:
        """The variables the server gets beyond the pilot's own environment."""
        return dict(self.env)

    def start(self, timeout_s: float | None = None) -> None:
        self._server = ServerProcess(self.command(), self.endpoint, env=self.launch_env())
        self._server.start(START_TIMEOUT_S if timeout_s is None else timeout_s)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (failure drills)."""
        if self._server is None:
            raise BackendError("kill(): the engine was not started by this backend")
        self._server.kill()
