"""What every route shares: the server's config, engine, scheduler, metrics and strategy switch.

``ServerState`` owns the lifecycle (install the engine, or load it in a thread and answer 503
until then; stop the scheduler) and the two checks every generation request makes first:
is the engine ready, and which served model does the request name.

    >>> state = ServerState(ServerConfig(model_name="m"), engine=engine, loader=None)  # doctest: +SKIP
    >>> state.start()                                                                 # doctest: +SKIP
    >>> engine, scheduler = state.check_ready()  # 503 while loading/draining  # doctest: +SKIP
    >>> state.served_model(None)  # omitted: the served model, 'm'             # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request

from specpilot.engine.generate import Engine
from specpilot.engine.scheduler import Scheduler, SchedulerConfig
from specpilot.errors import ConfigError
from specpilot.serve.body import MAX_JSON_DEPTH, MAX_JSON_VALUES
from specpilot.serve.metrics import ServerMetrics
from specpilot.serve.protocol import APIError
from specpilot.serve.strategy import StrategySwitch

log = logging.getLogger("specpilot.serve")
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


@dataclass
class ServerConfig:
    model_name: str = "specpilot"
    aliases: tuple[str, ...] = ()
    draft_name: str | None = None  # None: no draft loaded, only k = 0
    default_k: int = 0
    max_k: int = 16
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    admin_token: str | None = None  # None: admin endpoints refuse (403)
    api_key: str | None = None  # set: /v1 answers only Bearer <api_key> (serve.apikey)
    admin_hosts: frozenset[str] = LOOPBACK
    admin_trust_proxy: bool = False  # accept /admin requests that carry proxy headers
    strategy_file: Path | None = None
    spec_metrics: str = "off"  # server-wide default: off | summary | detailed
    default_temperature: float = 1.0  # OpenAI's default
    # a request body larger than this is refused (413) before it is read whole: a 20 MB chat
    # prompt used to hold the event loop for 22 s in templating before its 400
    max_body_bytes: int = 4 << 20
    # nesting and value count past which a body is refused before it is parsed (serve.body)
    max_json_depth: int = MAX_JSON_DEPTH
    max_json_values: int = MAX_JSON_VALUES
    # prompt text (characters) per context token allowed into templating and tokenising; a
    # token is rarely under 1 character, so more characters than this x the context cannot fit
    max_prompt_chars_per_token: int = 8


class ServerState:
    """State shared by the handlers (``app.state.server``); see the module docstring."""

    def __init__(
        self, cfg: ServerConfig, engine: Engine | None, loader: Callable[[], Engine] | None
    ):
        if engine is None and loader is None:
            raise TypeError("create_app needs an engine or a loader")
        self.cfg = cfg
        self.engine: Engine | None = None
        self.scheduler: Scheduler | None = None
        self.tokenizer: Any = None
        self.metrics = ServerMetrics(cfg.model_name)
        self.switch = StrategySwitch(
            cfg.default_k,
            has_draft=cfg.draft_name is not None,
            draft_name=cfg.draft_name,
            max_k=cfg.max_k,
        )
        if cfg.strategy_file is not None:
            self.switch.load_file(cfg.strategy_file)
        self.metrics.strategy(self.switch.table.flat())
        self.models = (cfg.model_name, *cfg.aliases)
        self.load_error: str | None = None
        self.draining = False
        self._pending_engine, self._loader = engine, loader
        self.started_t = time.time()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._pending_engine is not None:
            self._install(self._pending_engine)
        else:
            threading.Thread(target=self._load, name="specpilot-loader", daemon=True).start()

    def _load(self) -> None:
        assert self._loader is not None
        try:
            self._install(self._loader())
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("engine failed to load: %s", self.load_error)

    def _install(self, engine: Engine) -> None:
        if (engine.draft is None) != (self.cfg.draft_name is None):
            raise ConfigError(
                "ServerConfig.draft_name must be set exactly when the engine has a draft"
            )
        if engine.tokenizer is None:
            raise ConfigError("the engine needs a tokenizer to serve text")
        sched = Scheduler(engine, self.cfg.scheduler, observer=self.metrics)
        sched.start()
        self.tokenizer, self.scheduler = engine.tokenizer, sched
        self.engine = engine  # last: readiness is "engine is not None"

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop(timeout=10.0, cancel=True)

    # ------------------------------------------------------------------ checks
    @property
    def ready(self) -> bool:
        return self.engine is not None and self.scheduler is not None and self.scheduler.alive

    def check_ready(self) -> tuple[Engine, Scheduler]:
        if self.load_error is not None:
            raise APIError(
                503,
                f"the engine failed to load: {self.load_error}",
                type="server_error",
                code="engine_error",
            )
        if self.engine is None or self.scheduler is None:
            raise APIError(
                503,
                "the model is loading",
                type="server_error",
                code="loading",
                headers={"Retry-After": "5"},
            )
        if self.draining or not self.scheduler.accepting:
            raise APIError(
                503,
                "the server is draining",
                type="server_error",
                code="draining",
                headers={"Retry-After": "5"},
            )
        return self.engine, self.scheduler

    def served_model(self, name: str | None) -> str:
        """The served name a request asked for; omitted (None or "") is the model itself (vLLM)."""
        if not name:
            return self.cfg.model_name
        if name not in self.models:
            raise APIError(
                404,
                f"The model `{name}` does not exist. Served: {list(self.models)}",
                param="model",
                code="model_not_found",
            )
        return name


def server_state(request: Request) -> ServerState:
    """FastAPI dependency: the app's :class:`ServerState`."""
    state: ServerState = request.app.state.server
    return state


State = Annotated[ServerState, Depends(server_state)]  # a route's ``state: State`` parameter
