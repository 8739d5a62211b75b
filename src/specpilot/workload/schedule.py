"""A phase plan becomes one deterministic schedule: what to send, when, with which limits.

    >>> from specpilot.workload import build_schedule, parse_workload
    >>> cfg = parse_workload({"seed": 3, "groups": {"code": {}, "structured": {}},
    ...     "phases": [{"name": "peak", "duration_s": 20, "arrival": {"kind": "poisson", "rate": 1}}]})
    >>> s = build_schedule(cfg)
    >>> s.to_json() == build_schedule(cfg).to_json()   # same seed: byte-identical
    True
    >>> r = s.requests[0]
    >>> r.phase, r.group in ("code", "structured"), r.max_tokens > 0, r.deadline_s > 0
    ('peak', True, True, True)

Contract with the load generator (``specpilot.loadgen``) and the store:

- ``Schedule.requests`` is a list of :class:`~specpilot.records.ScheduledRequest`, ordered by
  phase (in plan order) then ``send_t``. ``index`` is unique over the whole schedule (0..N-1),
  so ``f"{phase}-{index:06d}"`` is a stable request id across arms and runs.
- ``send_t`` is seconds from the start of the request's phase. Phases run in plan order;
  ``PhaseInfo.start_s`` is the nominal offset of each phase when they run back to back.
- A warm-up phase named ``warmup`` (requests flagged ``warmup=True``) comes first when the
  YAML asks for warm-up requests; analysis excludes them.
- ``client_stages`` maps a stage name to planned seconds (simulated stages) or ``0.0`` (real
  stages measured at send time); ``Schedule.stages`` says which is which; run them with
  :class:`specpilot.workload.stages.StageRunner`.
- ``ignore_eos`` / ``input_tokens_target`` are set by trace-replay phases only.
- ``seed`` is set for sampled groups (temperature > 0) so every arm samples with the same
  per-request seed; greedy groups leave it ``None``.

Determinism: every random choice comes from a ``numpy`` generator seeded from
``SeedSequence([seed, phase, purpose])``; prompts of a group are taken in a seeded shuffled
cycle (every prompt is used before any repeats). ``to_json()`` is canonical (sorted keys,
times rounded to microseconds), so the same config and seed give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specpilot.errors import ConfigError, InputFileError
from specpilot.records import ScheduledRequest
from specpilot.workload.arrivals import ArrivalProcess, Constant, Gamma, Poisson, Steps, TraceReplay
from specpilot.workload.config import (
    BM25StageModel,
    GroupModel,
    PhaseModel,
    TraceArrival,
    WorkloadConfig,
    load_workload,
    parse_workload,
)
from specpilot.workload.groups import (
    SLO,
    LengthSpec,
    Prompt,
    Sampling,
    TaskGroup,
    import_prompts,
    load_group,
)
from specpilot.workload.stages import BM25Index, context_message, load_index, sample_duration
from specpilot.workload.trace import Trace, find_windows, load_trace

SCHEDULE_VERSION = 1
_ARRIVALS, _GROUPS, _LENGTHS, _SEEDS, _STAGES, _PROMPTS = range(6)
CHARS_PER_TOKEN = 4.0  # English filler text; padding is approximate, measured tokens are exact


@dataclass(frozen=True)
class PhaseInfo:
    name: str
    start_s: float
    duration_s: float
    requests: int
    arrival: dict[str, Any]
    groups: dict[str, float]
    warmup: bool = False
    window: dict[str, Any] | None = None  # trace replay: the window found in the trace

    @property
    def offered_rate(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0


@dataclass
class Schedule:
    """The deterministic schedule every arm replays (see the module docstring)."""

    name: str
    seed: int
    config_sha256: str
    phases: list[PhaseInfo]
    groups: dict[str, dict[str, Any]]
    stages: dict[str, dict[str, Any]]
    requests: list[ScheduledRequest]
    version: int = SCHEDULE_VERSION
    base_dir: str | None = field(default=None, compare=False)  # resolves stage paths; not in JSON

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[ScheduledRequest]:
        return iter(self.requests)

    @property
    def phase_names(self) -> list[str]:
        return [p.name for p in self.phases]

    def phase(self, name: str) -> list[ScheduledRequest]:
        if name not in self.phase_names:
            raise ConfigError(
                f"no phase {name!r} in the schedule (phases: {', '.join(self.phase_names)})"
            )
        return [r for r in self.requests if r.phase == name]

    def select(
        self, phases: Sequence[str] | None = None, *, warmup: bool = True
    ) -> list[ScheduledRequest]:
        """Requests of the named phases (all when None), with or without warm-up requests."""
        for n in phases or ():
            self.phase(n)
        keep = set(phases) if phases else set(self.phase_names)
        if warmup and phases:
            keep.add("warmup")
        return [r for r in self.requests if r.phase in keep and (warmup or not r.warmup)]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "seed": self.seed, "requests": len(self.requests)}
        out["phases"] = [
            {
                "name": p.name,
                "duration_s": p.duration_s,
                "requests": p.requests,
                "offered_rate": round(p.offered_rate, 4),
                "arrival": p.arrival.get("kind"),
            }
            for p in self.phases
        ]
        counts: dict[str, int] = {}
        for r in self.requests:
            counts[r.group] = counts.get(r.group, 0) + 1
        out["by_group"] = dict(sorted(counts.items()))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "name": self.name,
            "seed": self.seed,
            "config_sha256": self.config_sha256,
            "phases": [asdict(p) for p in self.phases],
            "groups": self.groups,
            "stages": self.stages,
            "requests": [r.to_dict() for r in self.requests],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False, indent=indent)

    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any], base_dir: str | None = None) -> Schedule:
        if d.get("version") != SCHEDULE_VERSION:
            raise InputFileError(
                f"schedule version {d.get('version')!r}: this specpilot reads {SCHEDULE_VERSION}",
                fix="rebuild it with `specpilot schedule WORKLOAD.yaml --out FILE`",
            )
        return cls(
            name=d["name"],
            seed=d["seed"],
            config_sha256=d["config_sha256"],
            phases=[PhaseInfo(**p) for p in d["phases"]],
            groups=d["groups"],
            stages=d["stages"],
            requests=[ScheduledRequest(**r) for r in d["requests"]],
            base_dir=base_dir,
        )

    @classmethod
    def from_json(cls, text: str, base_dir: str | None = None) -> Schedule:
        return cls.from_dict(json.loads(text), base_dir)

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        p = Path(path)
        return cls.from_json(p.read_text("utf-8"), base_dir=str(p.parent))


# -- building -------------------------------------------------------------------------


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def _stable(name: str) -> int:
    return zlib.crc32(name.encode("utf-8"))


def _resolve(path: str, base_dir: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else base_dir / p


def resolve_group(name: str, g: GroupModel, base_dir: Path) -> TaskGroup:
    """A configured group: the built-in one (or an import) with the YAML's overrides."""
    if g.source is not None:
        src = g.source
        prompts = import_prompts(
            _resolve(src.path, base_dir),
            src.format,
            name,
            categories=src.categories,
            limit=src.limit,
        )
        assert g.output is not None and g.slo is not None  # the config validator enforces it
        base = TaskGroup(
            name=name,
            description=g.description or f"{src.format} prompts from {Path(src.path).name}",
            prompts=tuple(prompts),
            output=LengthSpec(**g.output.model_dump()),
            sampling=Sampling(),
            slo=SLO(**g.slo.model_dump()),
        )
    else:
        base = load_group(name)
    return TaskGroup(
        name=name,
        description=g.description or base.description,
        prompts=base.prompts,
        output=LengthSpec(**g.output.model_dump()) if g.output else base.output,
        sampling=(
            Sampling(g.sampling.temperature, g.sampling.top_p, tuple(g.sampling.stop))
            if g.sampling
            else base.sampling
        ),
        slo=SLO(**g.slo.model_dump()) if g.slo else base.slo,
        input_tokens=base.input_tokens,
        quality_checks=base.quality_checks,
    )


class _PromptCycle:
    """A group's prompts in a seeded shuffled order, restarted (reshuffled) when used up."""

    def __init__(self, prompts: Sequence[Prompt], seed: int, group: str) -> None:
        if not prompts:
            raise ConfigError(
                f"group {group!r} has no prompts in the selected split",
                fix="pick another split (train, dev, eval, all) or give the group prompts",
            )
        self.prompts = list(prompts)
        self.rng = _rng(seed, _PROMPTS, _stable(group))
        self.order: list[int] = []

    def next(self) -> Prompt:
        if not self.order:
            self.order = [int(i) for i in self.rng.permutation(len(self.prompts))]
        return self.prompts[self.order.pop(0)]


def _arrival(
    p: PhaseModel, seed: int, base_dir: Path, traces: dict[Path, Trace]
) -> tuple[ArrivalProcess, float, dict[str, Any] | None]:
    a = p.arrival
    if a.kind == "constant":
        assert p.duration_s is not None
        return Constant(a.rate), p.duration_s, None
    if a.kind == "poisson":
        assert p.duration_s is not None
        return Poisson(a.rate, seed), p.duration_s, None
    if a.kind == "gamma":
        assert p.duration_s is not None
        return Gamma(a.rate, a.cv, seed), p.duration_s, None
    if a.kind == "steps":
        st = Steps([(s.duration_s, s.rate) for s in a.steps], a.step_kind, a.cv, seed)
        return st, p.duration_s or st.total_s, None
    assert isinstance(a, TraceArrival)
    path = _resolve(a.path, base_dir)
    if path not in traces:
        traces[path] = load_trace(path)
    tr = traces[path]
    window_info: dict[str, Any] | None = None
    if a.window == "all":
        window = None
    elif isinstance(a.window, tuple):
        window = (float(a.window[0]), float(a.window[1]))
        if not window[0] < window[1]:
            raise ConfigError(f"phase {p.name!r}: window start must be before its end")
    else:
        found = find_windows(tr, a.window_s, a.burst_s, a.context_s)
        if a.window not in found:
            raise ConfigError(
                f"phase {p.name!r}: no {a.window} window found in {tr.source}",
                fix="a shorter burst_s or context_s, or window: peak",
            )
        w = found[a.window]
        window, window_info = (w.start_s, w.end_s), w.to_dict()
    replay = TraceReplay(
        tr,
        time_scale=a.time_scale,
        length_scale=a.length_scale,
        target_rate=a.target_rate,
        max_input_tokens=a.max_input_tokens,
        max_output_tokens=a.max_output_tokens,
        window=window,
    )
    dur = replay.duration_s if p.duration_s is None else min(p.duration_s, replay.duration_s)
    return replay, dur, window_info


def _source(g: GroupModel) -> dict[str, Any] | str:
    return g.source.model_dump(mode="json") if g.source is not None else "builtin"


def _filler_text(index: BM25Index, chars: int, offset: int) -> str:
    """Deterministic English filler of about ``chars`` characters for input-length padding."""
    docs = [d for d in index.docs if d.text.isascii()] or index.docs
    parts, n, i = [], 0, offset
    while n < chars:
        d = docs[i % len(docs)]
        parts.append(d.text)
        n += len(d.text) + 1
        i += 1
    return " ".join(parts)[:chars]


def build_schedule(
    config: WorkloadConfig | dict[str, Any] | str | Path,
    *,
    seed: int | None = None,
    base_dir: str | Path | None = None,
) -> Schedule:
    """Build the schedule of a workload (a config, a dict, or a YAML path).

    ``seed`` overrides the config's seed; ``base_dir`` resolves relative paths (default: the
    YAML's directory, or the current directory for a config object).
    """
    if isinstance(config, (str, Path)):
        base = Path(base_dir) if base_dir is not None else Path(config).resolve().parent
        cfg = load_workload(config)
    else:
        cfg = config if isinstance(config, WorkloadConfig) else parse_workload(config)
        base = Path(base_dir) if base_dir is not None else Path.cwd()
    seed = cfg.seed if seed is None else seed

    groups = {name: resolve_group(name, g, base) for name, g in cfg.groups.items()}
    cycles = {
        name: _PromptCycle(groups[name].split(cfg.groups[name].split), seed, name)
        for name in groups
    }
    stage_specs: dict[str, dict[str, Any]] = {
        n: s.model_dump(mode="json") for n, s in cfg.stages.items()
    }
    indexes = {
        n: load_index(s.docs, base) for n, s in cfg.stages.items() if isinstance(s, BM25StageModel)
    }
    filler_index = BM25Index.builtin()
    traces: dict[Path, Trace] = {}

    requests: list[ScheduledRequest] = []
    phases: list[PhaseInfo] = []
    plan: list[tuple[PhaseModel | None, int]] = []
    if cfg.warmup.requests:
        plan.append((None, 0))
    plan.extend((p, i + 1) for i, p in enumerate(cfg.phases))
    start = 0.0
    for p, key in plan:
        weights = (p.groups if p is not None else None) or {
            n: g.weight for n, g in cfg.groups.items()
        }
        names = [n for n, w in weights.items() if w > 0]
        probs = np.array([weights[n] for n in names], dtype=np.float64)
        probs /= probs.sum()
        arrival_seed = int(np.random.SeedSequence([seed, key, _ARRIVALS]).generate_state(1)[0])
        lengths: tuple[np.ndarray, np.ndarray] | None = None
        trace_cfg: TraceArrival | None = None
        window_info = None
        if p is None:
            n_warm = cfg.warmup.requests
            proc: ArrivalProcess = Constant(cfg.warmup.rate)
            duration = n_warm / cfg.warmup.rate
            times = proc.times(duration)[:n_warm]
            name, warm = "warmup", True
        else:
            proc, duration, window_info = _arrival(p, arrival_seed, base, traces)
            if isinstance(proc, TraceReplay):
                assert isinstance(p.arrival, TraceArrival)
                trace_cfg = p.arrival
                times, ins, outs = proc.events(duration)
                lengths = (ins, outs)
            else:
                times = proc.times(duration)
            name, warm = p.name, False
        g_rng = _rng(seed, key, _GROUPS)
        l_rng = _rng(seed, key, _LENGTHS)
        s_rng = _rng(seed, key, _SEEDS)
        st_rng = _rng(seed, key, _STAGES)
        chosen = g_rng.choice(len(names), size=len(times), p=probs)
        first = len(requests)
        for j, (t, gi) in enumerate(zip(times, chosen, strict=True)):
            gname = names[int(gi)]
            group = groups[gname]
            prompt = cycles[gname].next()
            messages = [dict(m) for m in prompt.messages]
            max_tokens = group.output.sample(l_rng)
            req_seed = int(s_rng.integers(0, 2**31 - 1))  # drawn for every request: stable streams
            ignore_eos, input_target = False, None
            if lengths is not None and trace_cfg is not None:
                if trace_cfg.use_lengths in ("output", "both"):
                    max_tokens = int(lengths[1][j])
                    ignore_eos = trace_cfg.ignore_eos
                if trace_cfg.use_lengths == "both":
                    input_target = int(lengths[0][j])
            stages: dict[str, float] = {}
            context: list[dict[str, Any]] = []
            for sname, st in cfg.stages.items():
                u = float(st_rng.random())  # drawn for every stage: stable streams
                if (st.groups is not None and gname not in st.groups) or u >= st.probability:
                    continue
                if isinstance(st, BM25StageModel):
                    hits = indexes[sname].search(prompt.text, st.top_k)
                    if hits:
                        context.append(context_message(indexes[sname], hits))
                    stages[sname] = 0.0
                else:
                    stages[sname] = sample_duration(stage_specs[sname], st_rng)
            if input_target is not None:
                have = sum(len(str(m.get("content", ""))) for m in messages + context)
                pad = int(input_target * CHARS_PER_TOKEN) - have
                if pad > 0:
                    context.append(
                        {
                            "role": "system",
                            "content": "Background:\n" + _filler_text(filler_index, pad, j),
                        }
                    )
            if context:
                merged = "\n\n".join(str(c["content"]) for c in context)
                messages = [{"role": "system", "content": merged}, *messages]
            requests.append(
                ScheduledRequest(
                    index=len(requests),
                    send_t=round(float(t), 6),
                    phase=name,
                    group=gname,
                    prompt_id=prompt.id,
                    messages=messages,
                    max_tokens=max_tokens,
                    temperature=group.sampling.temperature,
                    top_p=group.sampling.top_p,
                    seed=None if group.sampling.greedy else req_seed,
                    stop=list(group.sampling.stop),
                    deadline_s=group.slo.deadline_s,
                    ttft_slo_s=group.slo.ttft_s,
                    client_stages=stages,
                    warmup=warm,
                    ignore_eos=ignore_eos,
                    input_tokens_target=input_target,
                )
            )
        phases.append(
            PhaseInfo(
                name=name,
                start_s=round(start, 6),
                duration_s=round(float(duration), 6),
                requests=len(requests) - first,
                arrival=proc.describe(),
                groups={n: float(weights[n]) for n in names},
                warmup=warm,
                window=window_info,
            )
        )
        start += float(duration)

    group_info = {
        n: {
            "description": g.description,
            "split": cfg.groups[n].split,
            "prompts": len(cycles[n].prompts),
            "output": asdict(g.output),
            "sampling": {**asdict(g.sampling), "stop": list(g.sampling.stop)},
            "slo": asdict(g.slo),
            "quality_checks": list(g.quality_checks),
            "source": _source(cfg.groups[n]),
        }
        for n, g in groups.items()
    }
    return Schedule(
        name=cfg.name,
        seed=seed,
        config_sha256=cfg.sha256(),
        phases=phases,
        groups=group_info,
        stages=stage_specs,
        requests=requests,
        base_dir=str(base),
    )
