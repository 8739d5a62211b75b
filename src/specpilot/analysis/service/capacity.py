"""Capacity and the draft's memory budget (R4, R5, R6); the crossover load, which reads the
verdict, is the verdict's (``analysis.verdicts.verdict.crossover``).

- A load level (a phase, or a point of a rate sweep) meets the SLOs for an arm and group when
  its on-time fraction (every scheduled request in the denominator) is at least
  ``slo_attainment`` and every percentile condition of the group's SLO held on the cell
  (``LoadCell.slo_checks``; one not evaluated, e.g. ITL without chunk records, does not
  fail it). Capacity = the highest offered rate such that it and every lower level met them.
- Memory budget of a speculative arm: draft weights + the draft's KV + workspace (the rest of
  the extra peak RSS over the baseline), and how many more target sequences that memory would
  hold at the baseline's KV bytes per sequence (the equal-budget arm's justification).
- The concurrency the draft costs (R4): measured where both arms' engines published the
  sequences their KV cache admits as sized at start (``service.fleet.admissible``): the
  baseline's less the candidate's; else inferred from the memory budget (the draft's bytes /
  the KV bytes per sequence: ``sequences_forgone``). ``DraftConcurrency.used`` says which.

    >>> from specpilot.analysis.service.load import LoadCell, Quantiles
    >>> q = Quantiles(10, 10, 1.0, 1.0, 1.0)
    >>> cells = [LoadCell("a", p, "g", r, 10.0, 10, {}, {}, 10, ot, 0, q, q, q)
    ...          for p, r, ot in (("low", 1.0, 1.0), ("peak", 4.0, 0.97), ("burst", 8.0, 0.6))]
    >>> capacity(cells, 0.95)[0].capacity_rps
    4.0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.analysis.service.fleet import Admissible
from specpilot.analysis.service.load import LoadCell
from specpilot.analysis.service.slo import failed
from specpilot.numbers import pct
from specpilot.records import ArmRecord, MetricSnapshot


@dataclass(frozen=True)
class LoadPoint:
    phase: str
    offered_rps: float
    on_time_ratio: float | None
    goodput_rps: float | None
    e2e_p99_s: float | None
    ttft_p99_s: float | None
    scheduled: int
    meets_slo: bool
    slo_failed: tuple[str, ...] = ()  # the percentile conditions that failed here


@dataclass(frozen=True)
class Capacity:
    arm: str
    task_group: str
    points: tuple[LoadPoint, ...]
    capacity_rps: float | None  # None: not even the lowest level met the SLOs
    limited_at: str | None  # the first phase that missed, with why

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def capacity(cells: Sequence[LoadCell], slo_attainment: float) -> list[Capacity]:
    """Per (arm, group) including ``*``, over the load levels with an offered rate."""
    by: dict[tuple[str, str], list[LoadCell]] = {}
    for c in cells:
        if c.offered_rate is not None:
            by.setdefault((c.arm, c.task_group), []).append(c)
    out = []
    for (arm, group), cs in sorted(by.items()):
        pts = tuple(
            LoadPoint(
                c.phase,
                float(c.offered_rate or 0.0),
                c.on_time_ratio,
                c.goodput_rps,
                c.e2e.p99,
                c.ttft.p99,
                c.scheduled,
                (c.on_time_ratio or 0.0) >= slo_attainment and not failed(c.slo_checks),
                tuple(x.text() for x in failed(c.slo_checks)),
            )
            for c in sorted(cs, key=lambda c: (c.offered_rate or 0.0, c.phase))
        )
        cap, limited = None, None
        for p in pts:
            if not p.meets_slo:
                why = (
                    []
                    if (p.on_time_ratio or 0.0) >= slo_attainment
                    else [f"on time {pct(p.on_time_ratio)} < {slo_attainment:.0%}"]
                )
                limited = f"{p.phase} at {p.offered_rps:.3g} req/s: " + "; ".join(
                    why + list(p.slo_failed)
                )
                break
            cap = p.offered_rps
        out.append(Capacity(arm, group, pts, cap, limited))
    return out


@dataclass(frozen=True)
class MemoryBudget:
    candidate_arm: str
    baseline_arm: str
    draft_weight_bytes: int | None
    draft_kv_bytes: int | None
    workspace_bytes: int | None  # extra peak RSS not explained by the draft's weights and KV
    total_bytes: int | None
    baseline_peak_rss_bytes: int | None
    candidate_peak_rss_bytes: int | None
    kv_bytes_per_sequence: float | None
    sequences_forgone: float | None  # target sequences the draft's memory would have held
    notes: tuple[str, ...]
    # the strategy's resource structure (MISSION: other methods' costs never reuse the
    # draft-model estimate): draft_model | ngram (no draft model: lookup tables only) | other
    resource_class: str = "draft_model"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _max(snaps: Sequence[MetricSnapshot], attr: str) -> int | None:
    vals = [getattr(s, attr) for s in snaps if getattr(s, attr) is not None]
    return max(vals) if vals else None


# where each engine's manifest says how many sequences it holds at once (``capacity``)
SLOT_KEYS = ("max_slots", "n_parallel", "max_num_seqs", "max_running_requests")


def slots_in(capacity: Mapping[str, Any]) -> int | None:
    """Sequences an engine holds at once, from its capacity settings (``max_slots``,
    ``n_parallel``, ``max_num_seqs``, ``max_running_requests``); None: none given."""
    for k in SLOT_KEYS:
        v = capacity.get(k)
        if isinstance(v, int | float) and v > 0:
            return int(v)
    return None


def target_slots(arm: ArmRecord | None) -> int | None:
    """Sequences the arm's engine holds at once, from its manifest's ``capacity``."""
    return slots_in(((arm.manifest or {}).get("capacity") or {}) if arm is not None else {})


@dataclass(frozen=True)
class SlotEquivalent:
    """The draft's memory counted in target KV slots (the one definition: the equal-budget
    alternative's extra slots and the report's "sequences forgone" are both this)."""

    draft_bytes: int  # draft weights + draft KV
    per_slot_bytes: float  # target KV per slot: (KV allocated - draft KV) / slots
    slots: float  # draft_bytes / per_slot_bytes


def draft_as_kv_slots(snap: MetricSnapshot, slots: int) -> SlotEquivalent | None:
    """From one snapshot of the arm that holds the draft (None without draft or KV memory).

    >>> from specpilot.records import MetricSnapshot as S
    >>> s = S("r", "spec", "peak", "after", 0, "builtin", {}, kv_allocated_bytes=5_000,
    ...       draft_kv_bytes=1_000, draft_weight_bytes=3_000)
    >>> draft_as_kv_slots(s, 4)
    SlotEquivalent(draft_bytes=4000, per_slot_bytes=1000.0, slots=4.0)
    """
    draft = int(snap.draft_weight_bytes or 0) + int(snap.draft_kv_bytes or 0)
    target_kv = int(snap.kv_allocated_bytes or 0) - int(snap.draft_kv_bytes or 0)
    if not draft or target_kv <= 0 or slots <= 0:
        return None
    per = target_kv / slots
    return SlotEquivalent(draft, per, draft / per)


def _peaks(
    base: Sequence[MetricSnapshot], cand: Sequence[MetricSnapshot], notes: list[str]
) -> tuple[int | None, int | None]:
    """The two arms' peak memory: the GPU's where both report it (and a note says so), else
    the process RSS."""
    b_gpu, c_gpu = _max(base, "gpu_memory_bytes"), _max(cand, "gpu_memory_bytes")
    if b_gpu is not None and c_gpu is not None:
        notes.append("peak memory from the GPU")
        return b_gpu, c_gpu
    return _max(base, "rss_bytes"), _max(cand, "rss_bytes")


def memory_budget(
    snapshots: Sequence[MetricSnapshot],
    arms: Sequence[ArmRecord],
    baseline: str,
    candidate: str,
) -> MemoryBudget:
    """The draft's memory in the candidate arm and what it would buy in target sequences.

    An n-gram (prompt-lookup) strategy has no draft model: no draft weights or draft KV, only
    its lookup structures, so its extra memory is reported as such (``resource_class``),
    never as a draft's."""
    rec = next((a for a in arms if a.arm == candidate), None)
    kind = rec.strategy.kind if rec is not None else "draft"
    resource = {"draft": "draft_model", "ngram": "ngram"}.get(kind, "other")
    base = [s for s in snapshots if s.arm == baseline]
    cand = [s for s in snapshots if s.arm == candidate]
    notes: list[str] = []
    dw, dkv = _max(cand, "draft_weight_bytes"), _max(cand, "draft_kv_bytes")
    b_rss, c_rss = _peaks(base, cand, notes)
    work = None
    if b_rss is not None and c_rss is not None:
        work = max(0, c_rss - b_rss - (dw or 0) - (dkv or 0))
    parts = [x for x in (dw, dkv, work) if x is not None]
    total = sum(parts) if parts else None
    if resource == "ngram":
        dw = dkv = None
        notes.append(
            "n-gram self-speculation: no draft model (no draft weights, no draft KV cache); "
            "the extra memory is its lookup tables and noise, not a draft-model cost"
        )
    elif dw is None:
        notes.append("the engine did not report the draft's weights")
    slots = target_slots(rec)
    with_draft = [s for s in cand if s.draft_weight_bytes]
    eq = draft_as_kv_slots(with_draft[-1], slots) if with_draft and slots else None
    per_seq = eq.per_slot_bytes if eq is not None else None
    if eq is None and resource != "ngram":
        notes.append(
            "KV bytes per sequence unknown (needs the candidate's KV allocation, its draft's "
            "memory and its slot count)"
        )
    if work:
        notes.append(
            f"{work / 2**20:.1f} MiB more peak RSS than the draft's weights and KV explain "
            "(workspace and noise: not counted in slots)"
        )
    return MemoryBudget(
        candidate_arm=candidate,
        baseline_arm=baseline,
        draft_weight_bytes=dw,
        draft_kv_bytes=dkv,
        workspace_bytes=work,
        total_bytes=total,
        baseline_peak_rss_bytes=b_rss,
        candidate_peak_rss_bytes=c_rss,
        kv_bytes_per_sequence=per_seq,
        sequences_forgone=eq.slots if eq is not None else None,
        notes=tuple(notes),
        resource_class=resource,
    )


@dataclass(frozen=True)
class DraftConcurrency:
    """The concurrency a candidate's draft costs against its baseline (module docstring)."""

    baseline_arm: str
    candidate_arm: str
    baseline_sequences: float | None  # as the engine sized its KV cache (kv_cache only)
    candidate_sequences: float | None
    measured: float | None  # baseline - candidate
    inferred: float | None  # MemoryBudget.sequences_forgone
    used: str | None  # "measured" | "inferred" | None: neither known
    sequences: float | None  # the figure used
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _not_measured(b: Admissible | None, c: Admissible | None) -> str | None:
    """Why the two arms' started capacities do not give the draft's cost (None: they do)."""
    for a in (b, c):
        if a is None or a.sequences is None:
            return "an arm's engine does not publish its admissible concurrency"
        if a.sized_by != "kv_cache":
            return f"{a.arm}'s slots are a setting (a draft costs it memory, never slots)"
    assert b is not None and c is not None
    if set(b.endpoints) & set(c.endpoints):
        return (
            f"{b.arm} ran on {c.arm}'s own processes (speculation switched off in place), "
            "whose KV cache was sized with the draft loaded"
        )
    if b.context_tokens and c.context_tokens and b.context_tokens != c.context_tokens:
        return (
            f"the arms admit sequences of different contexts ({b.context_tokens:g} and "
            f"{c.context_tokens:g} tokens): not comparable"
        )
    return None


def _kv(a: Admissible | None) -> float | None:
    return a.sequences if a is not None and a.sized_by == "kv_cache" else None


def draft_concurrency(
    admitted: Sequence[Admissible],
    memory: Sequence[MemoryBudget],
    pairs: Sequence[tuple[str, str]],
) -> list[DraftConcurrency]:
    """Per (baseline, candidate): measured from the two arms' started KV capacity where both
    are sized from memory at the same context on processes of their own, else
    ``sequences_forgone`` (inferred), else unknown; ``text`` says which and why.

        >>> from specpilot.analysis.service.fleet import Admissible as A
        >>> arms = [A("plain", "vllm", 22.75, "kv_cache", 1024.0, 23296.0, 1, ""),
        ...         A("draft", "vllm", 20.0, "kv_cache", 1024.0, 20480.0, 1, "")]
        >>> d = draft_concurrency(arms, [], [("plain", "draft")])[0]
        >>> d.used, d.sequences
        ('measured', 2.75)
    """
    by = {a.arm: a for a in admitted}
    forgone = {m.candidate_arm: m.sequences_forgone for m in memory}
    out = []
    for base, cand in pairs:
        b, c = by.get(base), by.get(cand)
        bs, cs, inferred = _kv(b), _kv(c), forgone.get(cand)
        why = _not_measured(b, c)
        if why is None and bs is not None and cs is not None:
            cost = bs - cs
            text = (
                f"measured: {cand} admits {cs:.4g} sequences against {base}'s {bs:.4g}, as "
                f"each engine sized its KV cache at start: the draft costs {cost:.3g} "
                f"concurrent sequences ({cost / bs:.0%})"
            )
            out.append(DraftConcurrency(base, cand, bs, cs, cost, inferred, "measured", cost, text))
        elif inferred is not None:
            text = (
                f"inferred: {why}; the draft's memory at the baseline's KV bytes per sequence "
                f"would hold {inferred:.3g} target sequences"
            )
            out.append(
                DraftConcurrency(base, cand, bs, cs, None, inferred, "inferred", inferred, text)
            )
        else:
            text = f"unknown: {why}, and the memory budget cannot infer it"
            out.append(DraftConcurrency(base, cand, bs, cs, None, None, None, None, text))
    return out
