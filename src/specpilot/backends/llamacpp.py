"""llama.cpp's HTTP server through the ``xllamacpp`` wheel: plain, with a draft model
(``draft-simple``) or with n-gram speculation, in a subprocess (default) or in-process.

    >>> be = LlamaCppBackend(LlamaCppConfig(model=default_target_path(), spec_type="ngram-mod"))  # doctest: +SKIP
    >>> be.start(); be.endpoint                                               # doctest: +SKIP
    'http://127.0.0.1:41234'
    >>> be.scrape(label="before").metrics["spec_rounds"]                      # doctest: +SKIP

Counting (checked against this build's ``/metrics`` and responses): ``num_drafts_total`` is
verification steps, ``num_draft_tokens_total`` proposed draft tokens,
``num_accepted_tokens_total`` accepted *draft* tokens: the target's own bonus/correction token
is not in it, and llama.cpp's own "acceptance" excludes it. We normalise to committed =
accepted + rounds (DESIGN.md). ``accepted_tokens_per_pos{position}`` is 0-based. Each
response's ``timings`` carries ``draft_n`` / ``draft_n_accepted`` (no round count).
Note that llama.cpp's verification keeps a draft token while the target's own sample equals it;
it is not the Leviathan p/q ratio test.

Its load (``tools/server/server-context.cpp``): ``/metrics`` gauges
``llamacpp:requests_processing`` and ``llamacpp:requests_deferred`` (the queue), and
``llamacpp:kv_cache_usage_ratio`` in builds that have it (this one has not: absent, never 0);
``GET /slots`` (``server_slot::to_json``) one object per slot with ``n_ctx`` and
``is_processing``: the slots are a setting (``-np``), not sized from memory, so a draft costs
memory, never slots. No preemption counter.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specpilot.backends.extras import check_keys, header, seconds, spec_summary
from specpilot.backends.facts import hardware_info, model_file, tokenizer_sha256
from specpilot.backends.llamacpp_metrics import normalise_metrics, normalise_slots
from specpilot.backends.process import ServerProcess, free_port, wait_healthy
from specpilot.backends.protocol import (
    START_TIMEOUT_S,
    BackendError,
    Manifest,
)
from specpilot.backends.scrape import MetricsSource, Scraped
from specpilot.backends.served import EngineServer
from specpilot.errors import ConfigError
from specpilot.records import ResponseExtras

SPEC_TYPES = {
    "draft-simple": "COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE",
    "ngram-simple": "COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE",
    "ngram-mod": "COMMON_SPECULATIVE_TYPE_NGRAM_MOD",
    "ngram-map-k": "COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K",
    "ngram-cache": "COMMON_SPECULATIVE_TYPE_NGRAM_CACHE",
}
INSTALL_HINT = "llama.cpp backend needs xllamacpp: pip install 'specpilot[llamacpp]'"
# specpilot's k (draft_n_max / draft_n_min) in each n-gram type's own settings: llama.cpp's
# ``speculative.draft.n_max`` reaches only draft-model speculation, and ngram-mod's own defaults
# (n_match 24, n_min 48, n_max 64) proposed 54-60 tokens a round in an arm labelled k=3
NGRAM_K: dict[str, dict[str, str]] = {
    "ngram-mod": {"n_max": "k", "n_min": "k_min"},
    "ngram-simple": {"size_m": "k"},
    "ngram-map-k": {"size_m": "k"},
}


@dataclass
class LlamaCppConfig:
    model: str | Path
    draft: str | Path | None = None
    spec_type: str | None = None  # None: "draft-simple" when a draft is given, else plain
    draft_n_max: int = 3  # llama.cpp's default --spec-draft-n-max
    draft_n_min: int = 0
    draft_p_min: float | None = None
    n_ctx: int = 2048  # total, split over n_parallel slots
    n_parallel: int = 1
    threads: int | None = None
    host: str = "127.0.0.1"
    port: int = 0
    alias: str | None = None
    ngram: dict[str, int] = field(default_factory=dict)  # e.g. {"size_n": 3} for ngram-simple
    # Synthetic acceptance (llama.cpp's --spec-synth-rates): the engine accepts drafts at these
    # per-position rates whatever the target says, so the text is invalid by design: an arm
    # that checks the quality gates say no to wrong output. (--spec-synth-len is left out: any
    # value of it made this xllamacpp refuse to start, "Failed to init server".)
    synth_rates: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # CommonParams attribute -> value

    def effective_spec_type(self) -> str | None:
        if self.spec_type is not None:
            if self.spec_type not in SPEC_TYPES:
                raise ConfigError(f"spec_type {self.spec_type!r}: one of {', '.join(SPEC_TYPES)}")
            if self.spec_type == "draft-simple" and self.draft is None:
                raise ConfigError("spec_type draft-simple needs a draft model")
            return self.spec_type
        return "draft-simple" if self.draft is not None else None

    def to_json(self) -> str:
        d = asdict(self)
        d["model"] = str(self.model)
        d["draft"] = str(self.draft) if self.draft is not None else None
        return json.dumps(d)

    def ngram_params(self) -> dict[str, int]:
        """The n-gram type's own settings: k mapped (``NGRAM_K``), then ``ngram`` on top."""
        st = self.effective_spec_type()
        if st is None or st not in NGRAM_K:
            return dict(self.ngram)
        k = {"k": self.draft_n_max, "k_min": max(1, min(self.draft_n_min, self.draft_n_max))}
        return {**{name: k[v] for name, v in NGRAM_K[st].items()}, **self.ngram}

    def flags(self) -> list[str]:
        """The equivalent ``llama-server`` command line (recorded in the manifest)."""
        f = ["llama-server", "-m", str(self.model), "--host", self.host, "--port", str(self.port)]
        f += ["-c", str(self.n_ctx), "-np", str(self.n_parallel), "--metrics"]
        if self.threads:
            f += ["-t", str(self.threads)]
        st = self.effective_spec_type()
        if st is not None:
            f += ["--spec-type", st]
            if self.draft is not None:
                f += ["-md", str(self.draft)]
            f += [
                "--spec-draft-n-max",
                str(self.draft_n_max),
                "--spec-draft-n-min",
                str(self.draft_n_min),
            ]
            if self.draft_p_min is not None:
                f += ["--spec-draft-p-min", str(self.draft_p_min)]
            for k, v in sorted(self.ngram_params().items()):
                # CommonParams.speculative.<type>.<field> is llama-server's --spec-<type>-<field>
                # (e.g. --spec-ngram-mod-n-max, --spec-ngram-simple-size-m)
                f += [f"--spec-{st}-{k.replace('_', '-')}", str(v)]
        if self.synth_rates:
            f += ["--spec-synth-rates", ",".join(f"{r:g}" for r in self.synth_rates)]
        for k, v in sorted(self.extra.items()):
            f += [f"--x-{k}", str(v)]  # CommonParams fields without a flag name here
        return f

    def common_params(self) -> Any:
        """The xllamacpp ``CommonParams`` for this config."""
        try:
            import xllamacpp as xl
        except ImportError as exc:
            raise BackendError(INSTALL_HINT) from exc
        p = xl.CommonParams()
        p.model.path = str(self.model)
        p.hostnames = [self.host]
        p.port = self.port
        p.endpoint_metrics = True
        p.n_ctx = self.n_ctx
        p.n_parallel = self.n_parallel
        if self.threads:
            p.cpuparams.n_threads = self.threads
            p.cpuparams_batch.n_threads = self.threads
        if self.alias:
            p.model_alias = self.alias
        st = self.effective_spec_type()
        if st is not None:
            p.speculative.types = [getattr(xl.common_speculative_type, SPEC_TYPES[st])]
            if self.draft is not None:
                p.speculative.draft.mparams.path = str(self.draft)
            p.speculative.draft.n_max = self.draft_n_max
            p.speculative.draft.n_min = self.draft_n_min
            if self.draft_p_min is not None:
                p.speculative.draft.p_min = self.draft_p_min
            params = self.ngram_params()
            if params:
                if not st.startswith("ngram-") or st == "ngram-cache":
                    raise ConfigError(f"ngram parameters do not apply to spec_type {st!r}")
                sub = getattr(p.speculative, st.replace("-", "_"))
                for k, v in params.items():
                    _set_known(sub, k, v, f"ngram ({st})")
        if self.synth_rates:
            if st is None:
                raise ConfigError(
                    "synth_rates fake a speculative method's acceptance: set a draft or spec_type"
                )
            if not all(0.0 <= r <= 1.0 for r in self.synth_rates):
                raise ConfigError(f"synth_rates {self.synth_rates}: each a rate in [0, 1]")
            p.speculative.synth_rates = [float(r) for r in self.synth_rates]
        for k, v in self.extra.items():
            _set_known(p, k, v, "extra")
        return p

    def effective(self) -> dict[str, Any]:
        """The speculation settings read back from the engine's own ``CommonParams``."""
        p = self.common_params()
        st = self.effective_spec_type()
        out: dict[str, Any] = {"types": [getattr(t, "name", str(t)) for t in p.speculative.types]}
        if st is None:
            return out
        d = p.speculative.draft
        out["draft"] = {"n_max": d.n_max, "n_min": d.n_min}
        if list(p.speculative.synth_rates):
            out["synth"] = {"rates": list(p.speculative.synth_rates)}
        if st.startswith("ngram-") and st != "ngram-cache":
            sub = getattr(p.speculative, st.replace("-", "_"))
            out[st] = {a: getattr(sub, a) for a in dir(sub) if not a.startswith("_")}
        return out


def _set_known(obj: Any, name: str, value: Any, where: str) -> None:
    """Set an engine field, refusing a name the installed engine does not have."""
    valid = sorted(a for a in dir(obj) if not a.startswith("_") and not callable(getattr(obj, a)))
    if name not in valid:
        import difflib

        close = difflib.get_close_matches(name.split(".")[-1], valid, n=5, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        shown = ", ".join(valid) if len(valid) <= 12 else ", ".join(valid[:12]) + ", ..."
        raise ConfigError(
            f"{where}: {name!r} is not a setting of the installed llama.cpp "
            f"({type(obj).__name__}): {hint}valid: {shown} ({len(valid)} in all)"
        )
    setattr(obj, name, value)


TIMING_KEYS = (
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
)


def parse_metrics(texts: Mapping[str, str]) -> Scraped:
    """llama.cpp's /metrics (counters, the queue) and /slots when it answers (memory comes from
    the process table)."""
    out = normalise_metrics(texts["/metrics"])
    if "/slots" in texts:
        out.update(normalise_slots(texts["/slots"]))
    return Scraped(out)


METRICS = MetricsSource("llamacpp", ("/metrics", "/slots"), parse_metrics, ("/metrics", "/slots"))


def response_extras(
    obj: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, strict: bool = False
) -> ResponseExtras:
    """A response's ``timings`` -> prefill/decode seconds and ``RequestRecord.spec``.

    ``draft_n`` / ``draft_n_accepted`` give proposed and accepted drafts but no step count, so
    the summary's ``rounds`` (and committed) stay None: counters give them per phase.
    """
    out = ResponseExtras(server_request_id=header(headers, "x-request-id") or obj.get("id"))
    t = obj.get("timings")
    if not isinstance(t, Mapping):
        return out
    unknown = check_keys(t, TIMING_KEYS, "llamacpp timings", strict)
    out.prefill_s = seconds(t.get("prompt_ms"))
    out.decode_s = seconds(t.get("predicted_ms"))
    if "draft_n" in t:
        out.spec = spec_summary(
            "llamacpp",
            "timings",
            proposed=t.get("draft_n"),
            accepted=t.get("draft_n_accepted"),
            rounds=None,
            raw=t,
            unknown=unknown,
        )
    return out


class LlamaCppBackend(EngineServer):
    """llama.cpp's server. ``mode="subprocess"`` (default) can be killed like a real server;
    ``mode="inprocess"`` serves from this process (quick, but shares its GIL-free threads)."""

    name = "llamacpp"
    metrics = METRICS
    parse_extras = staticmethod(response_extras)

    def __init__(
        self, cfg: LlamaCppConfig, mode: str = "subprocess", env: Mapping[str, str] | None = None
    ) -> None:
        if mode not in ("subprocess", "inprocess"):
            raise ConfigError("mode: subprocess | inprocess")
        if env and mode != "subprocess":  # this process's devices are already chosen
            raise ConfigError("env (the placement's devices) needs mode: subprocess")
        self.env = dict(env or {})
        cfg.effective_spec_type()  # validate early
        self.cfg = cfg
        self.cfg.port = cfg.port or free_port(cfg.host)
        self.mode = mode
        self._server: ServerProcess | None = None
        self._inproc: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.cfg.host}:{self.cfg.port}"

    @property
    def pid(self) -> int | None:
        return (
            self._server.pid
            if self._server is not None
            else (os.getpid() if self._inproc else None)
        )

    def start(self, timeout_s: float | None = None) -> None:
        timeout_s = START_TIMEOUT_S if timeout_s is None else timeout_s
        if self.mode == "subprocess":
            argv = [sys.executable, "-m", "specpilot.backends.llamacpp_child", self.cfg.to_json()]
            self._server = ServerProcess(argv, self.endpoint, env=self.env)
            self._server.start(timeout_s)
        else:
            import xllamacpp as xl

            self._inproc = xl.Server(self.cfg.common_params())
            wait_healthy(self.endpoint + "/health", timeout_s)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._inproc is not None:
            self._inproc = None  # the destructor stops the server's loop and joins it

    def kill(self) -> None:
        """SIGKILL the server process (subprocess mode), as a crash would."""
        if self._server is None:
            raise BackendError("kill() needs mode='subprocess'")
        self._server.kill()

    def version(self) -> str:
        try:
            import xllamacpp as xl

            build = xl.BUILD_INFO
            return f"xllamacpp {xl.__version__} (llama.cpp build {build.get('build_number')}, commit {build.get('commit')})"
        except ImportError:
            return "xllamacpp not installed"

    def describe(self) -> Manifest:
        c = self.cfg
        spec: dict[str, Any] = {"type": c.effective_spec_type()}
        if spec["type"] is not None:
            spec.update(n_max=c.draft_n_max, n_min=c.draft_n_min, p_min=c.draft_p_min)
            spec["method_class"] = "draft_model" if spec["type"] == "draft-simple" else "ngram"
            with contextlib.suppress(BackendError):  # no xllamacpp: the configured values stand
                spec["effective"] = c.effective()
        models = tuple(
            m for m in (model_file("target", c.model), model_file("draft", c.draft)) if m
        )
        notes = [
            "llama.cpp accepts a draft token while the target's own sample equals it (not p/q ratio)"
        ]
        tok_t = tokenizer_sha256(c.model)
        if c.draft is not None and tokenizer_sha256(c.draft) != tok_t:
            notes.append("draft tokenizer differs from the target's")
        return Manifest(
            engine="llamacpp",
            engine_version=self.version(),
            endpoint=self.endpoint,
            models=models,
            tokenizer_sha256=tok_t,
            launch=tuple(c.flags()),
            speculative=spec,
            hardware=hardware_info(),
            notes=tuple(notes),
        )

    def __enter__(self) -> LlamaCppBackend:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
