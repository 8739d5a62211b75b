"""What an endpoint given by URL says about itself: version, served models, speculative setup.

Read-only and cheap: a few GETs with the arm's headers and a short timeout each. A GET that
fails leaves its fields unknown and adds a note (the path and the status, never a header or
a response body); once the endpoint does not answer at all, the rest is skipped. Only named
fields are kept from each answer (SGLang's server args hold its ``api_key``: never kept).

What each engine's manifest can and cannot record (the tests replay these answers; paths are
in each project's repository):

========  ===================================  =========================  =====================
engine    GET (source)                         records                    cannot record
========  ===================================  =========================  =====================
every     ``/v1/models`` (vllm/entrypoints/    served ids; ``root`` as    the files' content
          openai/models/serving.py; sglang     the target; max_model_len  (sha256), tokenizer,
          srt/entrypoints/openai/protocol.py;  and llama.cpp's ``meta``   launch flags
          llama.cpp tools/server/server-       in a note
          context.cpp)
vllm      ``/version`` (vllm/entrypoints/      version                    the method and the
          serve/instrumentator/basic.py)                                  draft model: no info
          ``/metrics`` (vllm/v1/spec_decode/   speculation on/off and k   gauge or endpoint
          metrics.py ``SpecDecodingProm``;     (``position`` labels of    has them (the
          vllm/v1/metrics/loggers.py)          ``..._accepted_tokens_     dev-mode-only
                                               per_pos``, 0..k-1);        ``/server_info`` is
                                               ``cache_config_info``'s    not read)
                                               labels in a note
sglang    ``/server_info``, else ``/get_       version, ``model_path``,
          server_info``; ``/model_info``,      every ``speculative_*``
          else ``/get_model_info`` (python/    server arg (algorithm,
          sglang/srt/entrypoints/http_         draft path, num_steps,
          server.py, srt/server_args.py)       eagle_topk, ...);
                                               weight_version in a note
llamacpp  ``/props``; ``/slots`` when          ``build_info``,            in current builds the
          ``/props`` does not say (tools/      ``model_path``, whether    type, draft model and
          server/server-context.cpp:           the slots speculate;       n_max/n_min/p_min
          ``server_slot::to_json``)            older builds' ``/props``   (``speculative.types``
                                               ``speculative.n_max|n_min  is the per-request
                                               |p_min``                   default, "none" even
                                                                          under --spec-type)
builtin   ``/version`` (specpilot.serve.       version, draft (served     the draft's file
          routes)                              name), k, max_k, table
openai    ``/v1/models`` only                  served ids                 version, speculation
========  ===================================  =========================  =====================

No endpoint reports the model files' content (sha256), the tokenizer or the launch flags.

    >>> r = from_models({"data": [{"id": "m", "root": "org/m", "max_model_len": 4096}]})
    >>> [(m.role, m.path) for m in r.models]
    [('served', 'm'), ('target', 'org/m')]
    >>> r.notes
    ("GET /v1/models: 'm' (root org/m, max_model_len 4096)",)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specpilot.backends import prom
from specpilot.backends.protocol import ModelFile

TIMEOUT_S = 3.0  # per GET: the endpoint is up (start() waited for it); a slow one is skipped

CANNOT = {
    "vllm": "vLLM exposes no speculative method or draft model on any endpoint (only whether "
    "speculation is on and k, from /metrics' vllm:spec_decode_* counters): those cannot be "
    "compared between replicas",
    "llamacpp": "llama.cpp reports whether its slots speculate (/slots) but not the speculative "
    "type, draft model or n_max/n_min/p_min in current builds (/props' speculative.types is the "
    "per-request default): those cannot be compared between replicas",
    "openai": "an OpenAI-compatible endpoint reports only the models it serves: its version and "
    "speculative settings cannot be recorded or compared (say the arm's engine when known)",
}
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Reported:
    """What an endpoint said: ``version`` None and ``speculative`` {} where it said nothing;
    ``spec_known``: it said at least whether speculation is on (``speculative["enabled"]``)."""

    version: str | None = None
    models: tuple[ModelFile, ...] = ()
    speculative: dict[str, Any] = field(default_factory=dict)
    spec_known: bool = False
    notes: tuple[str, ...] = ()

    def __add__(self, other: Reported) -> Reported:
        models = tuple(dict.fromkeys((*self.models, *other.models)))  # in order, once each
        return Reported(
            version=other.version or self.version,
            models=models,
            speculative={**self.speculative, **other.speculative},
            spec_known=self.spec_known or other.spec_known,
            notes=(*self.notes, *other.notes),
        )


class Reader:
    """GETs against one endpoint; every failure becomes a note (path and status only)."""

    def __init__(self, endpoint: str, headers: Mapping[str, str], timeout_s: float) -> None:
        self.endpoint, self.headers = endpoint.rstrip("/"), dict(headers)
        self.timeout_s = timeout_s
        self.notes: list[str] = []
        self.down = False  # the endpoint did not answer: the other GETs are skipped

    def text(self, path: str, *, quiet: bool = False) -> str | None:
        """The body of a 200 answer, else None (noted unless ``quiet``)."""
        import httpx

        if self.down:
            return None
        try:
            r = httpx.get(self.endpoint + path, headers=self.headers, timeout=self.timeout_s)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            self.down = True
            self.notes.append(
                f"GET {path}: {type(exc).__name__}: the endpoint did not answer, nothing more "
                "was read from it"
            )
            return None
        except httpx.TimeoutException as exc:
            self.notes.append(f"GET {path}: {type(exc).__name__} after {self.timeout_s:g} s")
            return None
        except httpx.HTTPError as exc:
            self.notes.append(f"GET {path}: {type(exc).__name__}")
            return None
        if r.status_code != 200:
            if not quiet:
                self.notes.append(f"GET {path}: HTTP {r.status_code}")
            return None
        return r.text

    def json(self, *paths: str) -> Any:
        """The first of ``paths`` that answers JSON (newer name first), else None."""
        for i, path in enumerate(paths):
            last = i == len(paths) - 1
            text = self.text(path, quiet=not last)
            if text is None:
                continue
            try:
                return json.loads(text)
            except ValueError:
                self.notes.append(f"GET {path}: the answer is not JSON")
                return None
        return None


def read_reported(
    engine: str,
    endpoint: str,
    headers: Mapping[str, str] | None = None,
    *,
    timeout_s: float = TIMEOUT_S,
) -> Reported:
    """Everything ``endpoint`` says about itself, read as ``engine``'s endpoints (the table
    above); never raises for what the endpoint answers or fails to."""
    r = Reader(endpoint, headers or {}, timeout_s)
    got = from_models(r.json("/v1/models"))
    got = got + READERS.get(engine, _nothing)(r)
    notes = (*r.notes, *got.notes, *((CANNOT[engine],) if engine in CANNOT else ()))
    return Reported(got.version, got.models, got.speculative, got.spec_known, notes)


def _nothing(r: Reader) -> Reported:
    return Reported()


# -- every engine: GET /v1/models ----------------------------------------------------------


def from_models(obj: Any) -> Reported:
    """``GET /v1/models``: a ``served`` entry per model id, the ``root`` it names as the
    ``target``; the rest of each card in a note (llama.cpp's ``meta``: its ``size`` is the
    tensors' bytes, not the file's, so no ``ModelFile.bytes``)."""
    if obj is None:
        return Reported()
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        return Reported(notes=("GET /v1/models: no model list ('data') in the answer",))
    models: list[ModelFile] = []
    notes: list[str] = []
    for card in data:
        if not isinstance(card, dict) or not isinstance(card.get("id"), str):
            continue
        meta = _dict(card.get("meta"))
        models.append(ModelFile("served", card["id"], None, None))
        root = card.get("root")
        if isinstance(root, str) and root and card.get("parent") is None:  # a LoRA's is its own
            models.append(ModelFile("target", root, None, None))
        said = [f"{k} {card[k]}" for k in ("root", "parent", "max_model_len") if card.get(k)]
        said += [
            f"{k} {meta[k]}" for k in ("n_ctx_train", "n_params", "size", "ftype") if k in meta
        ]
        notes.append(f"GET /v1/models: {card['id']!r}" + (f" ({', '.join(said)})" if said else ""))
    return Reported(models=tuple(dict.fromkeys(models)), notes=tuple(notes))


# -- vLLM: GET /version, GET /metrics ------------------------------------------------------

_DRAFTS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts")
_PER_POS = (
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


def vllm_from_metrics(text: str) -> Reported:
    """vLLM's ``/metrics``: speculation on (the ``vllm:spec_decode_*`` counters exist) with
    k = the number of ``position`` labels, or off; ``vllm:cache_config_info``'s labels noted.

    >>> t = 'vllm:spec_decode_num_drafts_total{engine="0"} 0.0\\n' + "".join(
    ...     f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{p}"}} 0.0\\n'
    ...     for p in range(3))
    >>> vllm_from_metrics(t).speculative
    {'enabled': True, 'num_speculative_tokens': 3}
    """
    try:
        samples = prom.parse(text)
    except prom.ExpositionError:
        return Reported(notes=("GET /metrics: not Prometheus text: speculation unknown",))
    if not any(s.name.startswith("vllm:") for s in samples):
        return Reported(notes=("GET /metrics: no vllm: metrics: speculation unknown",))
    spec: dict[str, Any] = {"enabled": any(s.name in _DRAFTS for s in samples)}
    if spec["enabled"]:
        positions = {s.labels.get("position") for s in samples if s.name in _PER_POS}
        spec["num_speculative_tokens"] = len(positions - {None}) or None
    notes = []
    cache = next((s.labels for s in samples if s.name == "vllm:cache_config_info"), None)
    if cache is not None:
        said = ", ".join(
            f"{k}={v}" for k, v in sorted(cache.items()) if k != "engine" and k[:1] != "_"
        )
        notes.append(f"GET /metrics: vllm:cache_config_info {said}")
    return Reported(speculative=spec, spec_known=True, notes=tuple(notes))


def _vllm(r: Reader) -> Reported:
    ver = r.json("/version")
    version = ver.get("version") if isinstance(ver, dict) else None
    text = r.text("/metrics")
    got = vllm_from_metrics(text) if text is not None else Reported()
    return Reported(version=_str(version)) + got


# -- SGLang: GET /server_info (/get_server_info), /model_info (/get_model_info) -------------


def sglang_from_server_info(info: Mapping[str, Any]) -> Reported:
    """SGLang's server info: ``version``, ``model_path`` (target), the draft model path, and
    every ``speculative_*`` server arg (prefix dropped) when an algorithm is set.

    >>> got = sglang_from_server_info({"version": "0.5.2", "model_path": "T",
    ...     "speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "D",
    ...     "speculative_num_steps": 3, "api_key": "never kept"})
    >>> got.version, [(m.role, m.path) for m in got.models], got.speculative["num_steps"]
    ('0.5.2', [('target', 'T'), ('draft', 'D')], 3)
    """
    models = [
        ModelFile(role, info[key], None, None)
        for role, key in (("target", "model_path"), ("draft", "speculative_draft_model_path"))
        if isinstance(info.get(key), str) and info[key]
    ]
    algorithm = info.get("speculative_algorithm")
    spec: dict[str, Any] = {"enabled": algorithm is not None, "algorithm": algorithm}
    if algorithm is not None:
        spec.update(
            (k.removeprefix("speculative_"), v)
            for k, v in sorted(info.items())
            if k.startswith("speculative_") and isinstance(v, _SCALARS)
        )
    notes = []
    if info.get("context_length") is not None:
        notes.append(f"GET /server_info: context_length {info['context_length']}")
    return Reported(_str(info.get("version")), tuple(models), spec, True, tuple(notes))


def _sglang(r: Reader) -> Reported:
    info = r.json("/server_info", "/get_server_info")  # renamed in newer SGLang
    got = sglang_from_server_info(info) if isinstance(info, dict) else Reported()
    model = r.json("/model_info", "/get_model_info")
    if isinstance(model, dict) and model.get("weight_version") is not None:
        got = got + Reported(notes=(f"GET /model_info: weight_version {model['weight_version']}",))
    return got


# -- llama.cpp: GET /props, GET /slots -----------------------------------------------------

_LLAMA_PARAMS = {
    "speculative.n_max": "n_max",
    "speculative.n_min": "n_min",
    "speculative.p_min": "p_min",
}


def llamacpp_from_props(props: Mapping[str, Any]) -> Reported:
    """llama.cpp's ``/props``: ``build_info`` (version), ``model_path`` (target); where the build
    says them (older ones), whether slots speculate and ``speculative.n_max|n_min|p_min``.

    >>> got = llamacpp_from_props({"build_info": "b6000-abc", "model_path": "/m.gguf",
    ...     "default_generation_settings": {"params": {"speculative.types": "none"}}})
    >>> got.version, got.spec_known
    ('b6000-abc', False)
    """
    dgs = _dict(props.get("default_generation_settings"))
    params = _dict(dgs.get("params"))
    spec: dict[str, Any] = {}
    if isinstance(dgs.get("speculative"), bool):
        spec["enabled"] = dgs["speculative"]
    if spec.get("enabled", True):  # settings of a server that does not speculate are moot
        spec.update((ours, params[key]) for key, ours in _LLAMA_PARAMS.items() if key in params)
    path = props.get("model_path")
    models = (ModelFile("target", path, None, None),) if isinstance(path, str) and path else ()
    notes = []
    if "n_ctx" in dgs or "total_slots" in props:
        notes.append(
            f"GET /props: n_ctx {dgs.get('n_ctx')}, total_slots {props.get('total_slots')}"
        )
    return Reported(_str(props.get("build_info")), models, spec, "enabled" in spec, tuple(notes))


def llamacpp_from_slots(slots: Any) -> Reported:
    """llama.cpp's ``/slots``: speculation on when a slot says ``speculative: true`` (only that
    field is read: a slot also holds its last prompt)."""
    flags = (
        [s.get("speculative") for s in slots if isinstance(s, dict)]
        if isinstance(slots, list)
        else []
    )
    flags = [f for f in flags if isinstance(f, bool)]
    if not flags:
        return Reported(notes=("GET /slots: no slot says whether it speculates",))
    return Reported(speculative={"enabled": any(flags)}, spec_known=True)


def _llamacpp(r: Reader) -> Reported:
    props = r.json("/props")
    got = llamacpp_from_props(props) if isinstance(props, dict) else Reported()
    if not got.spec_known:  # current builds: only /slots says it
        slots = r.json("/slots")
        if slots is not None:
            got = got + llamacpp_from_slots(slots)
    return got


# -- the builtin server: GET /version ------------------------------------------------------


def builtin_from_version(v: Mapping[str, Any]) -> Reported:
    """``specpilot serve``'s ``/version``: version, the draft (by served name) and the strategy
    table in force (its change counter left out: replicas switched back and forth are alike).

    >>> builtin_from_version({"version": "0.1.0", "draft": "d", "max_k": 8,
    ...     "strategy": {"default": 3, "models": {}, "tags": {}, "version": 2}}).speculative
    {'enabled': True, 'draft': 'd', 'k': 3, 'max_k': 8, 'models': {}, 'tags': {}}
    """
    table = _dict(v.get("strategy"))
    draft = v.get("draft")
    spec = {
        "enabled": draft is not None,
        "draft": draft,
        "k": table.get("default"),
        "max_k": v.get("max_k"),
        "models": table.get("models"),
        "tags": table.get("tags"),
    }
    models = (ModelFile("draft", draft, None, None),) if isinstance(draft, str) else ()
    return Reported(_str(v.get("version")), models, spec, True)


def _builtin(r: Reader) -> Reported:
    v = r.json("/version")
    return builtin_from_version(v) if isinstance(v, dict) else Reported()


READERS: dict[str, Callable[[Reader], Reported]] = {
    "vllm": _vllm,
    "sglang": _sglang,
    "llamacpp": _llamacpp,
    "builtin": _builtin,
}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int, float)) and str(value) else None
