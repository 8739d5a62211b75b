"""Prompt and length assignment: a phase's arrivals become scheduled requests.

Each arrival draws its group (by the phase's weights), takes the group's next prompt, an output
length from the group's distribution (or the trace's), a sampling seed, and its client stages;
a trace phase that replays input lengths too pads the prompt with English filler towards them.
Each kind of draw has its own seeded stream per phase (:mod:`.seeds`).

A request-log phase replays each logged request (:func:`logged_request`): its group (the
log's, else drawn by the weights), its messages or completions prompt, and the body's
``max_tokens`` (or ``max_completion_tokens``), ``temperature``, ``top_p``, ``seed``, ``stop``
and ``ignore_eos`` where it has them, else the group's (the group is where a replay's defaults
are set). ``model`` is the endpoint's; the other fields of a body are not sent, and are counted
by :func:`unreplayed_fields`. It takes no prompt from the group and runs no client stage: the
log's time is when the request reached the server, after the client's own stages, and its
prompt holds whatever they added.

    >>> factory = RequestFactory(cfg, groups, cycles, seed=7, stages=StagePlanner({}))  # doctest: +SKIP
    >>> requests = factory.phase_requests(arrivals, first_index=0)                   # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specpilot.records import ScheduledRequest
from specpilot.workload.config import WorkloadConfig
from specpilot.workload.groups import TaskGroup
from specpilot.workload.phases import PhaseArrivals
from specpilot.workload.requestlog import LoggedRequest
from specpilot.workload.resolve import PromptCycle
from specpilot.workload.seeds import GROUPS, LENGTHS, SEEDS, STAGES, stream
from specpilot.workload.stages import BM25Index, StagePlanner

CHARS_PER_TOKEN = 4.0  # English filler text; padding is approximate, measured tokens are exact


@dataclass
class _Streams:
    groups: np.random.Generator
    lengths: np.random.Generator
    seeds: np.random.Generator
    stages: np.random.Generator


class RequestFactory:
    """Turns each phase's arrivals into :class:`ScheduledRequest` s (see the module docstring)."""

    def __init__(
        self,
        cfg: WorkloadConfig,
        groups: dict[str, TaskGroup],
        cycles: dict[str, PromptCycle],
        seed: int,
        stages: StagePlanner,
    ) -> None:
        self.cfg, self.groups, self.cycles, self.seed = cfg, groups, cycles, seed
        self.stages = stages
        self._filler: BM25Index | None = None  # the builtin documents, read when first needed

    def phase_requests(self, arr: PhaseArrivals, first_index: int) -> list[ScheduledRequest]:
        key = arr.plan.key
        rngs = _Streams(*(stream(self.seed, key, p) for p in (GROUPS, LENGTHS, SEEDS, STAGES)))
        names = list(arr.plan.weights)
        probs = np.array([arr.plan.weights[n] for n in names], dtype=np.float64)
        chosen = rngs.groups.choice(len(names), size=len(arr.times), p=probs / probs.sum())
        if arr.logged is not None:
            return [
                self._logged(first_index + j, float(t), e, names[int(gi)], arr, rngs)
                for j, (t, e, gi) in enumerate(zip(arr.times, arr.logged, chosen, strict=True))
            ]
        return [
            self._request(first_index + j, j, float(t), names[int(gi)], arr, rngs)
            for j, (t, gi) in enumerate(zip(arr.times, chosen, strict=True))
        ]

    def _logged(
        self, index: int, t: float, e: LoggedRequest, drawn: str, arr: PhaseArrivals, rngs: _Streams
    ) -> ScheduledRequest:
        group = self.groups[e.group or drawn]
        # drawn for every request, used or not: one line's own max_tokens or seed does not
        # move the draws of the lines after it
        length = group.output.sample(rngs.lengths)
        seed = int(rngs.seeds.integers(0, 2**31 - 1))
        return logged_request(e, group, index, round(t, 6), arr.plan.name, length, seed)

    def _request(
        self, index: int, j: int, t: float, gname: str, arr: PhaseArrivals, rngs: _Streams
    ) -> ScheduledRequest:
        group = self.groups[gname]
        prompt = self.cycles[gname].next()
        messages = [dict(m) for m in prompt.messages]
        max_tokens = group.output.sample(rngs.lengths)
        req_seed = int(rngs.seeds.integers(0, 2**31 - 1))  # drawn for every request: stable
        input_target, trace_out = arr.trace_lengths(j)
        ignore_eos = group.output.ignore_eos
        if trace_out is not None and arr.trace is not None:
            max_tokens, ignore_eos = trace_out, arr.trace.ignore_eos
        planned = self.stages.plan(gname, prompt.text, rngs.stages)
        context = planned.context
        if input_target is not None:
            context = [*context, *self._padding(input_target, messages + context, j)]
        if context:
            merged = "\n\n".join(str(c["content"]) for c in context)
            messages = [{"role": "system", "content": merged}, *messages]
        return ScheduledRequest(
            index=index,
            send_t=round(t, 6),
            phase=arr.plan.name,
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
            client_stages=planned.seconds,
            warmup=arr.plan.warmup,
            ignore_eos=ignore_eos,
            input_tokens_target=input_target,
            measured_stages=planned.measured,
        )

    def _padding(self, tokens: int, messages: list[dict], offset: int) -> list[dict[str, str]]:
        """A system message of filler bringing the input to about ``tokens`` (none if there)."""
        have = sum(len(str(m.get("content", ""))) for m in messages)
        pad = int(tokens * CHARS_PER_TOKEN) - have
        if pad <= 0:
            return []
        if self._filler is None:
            self._filler = BM25Index.builtin()
        return [
            {"role": "system", "content": "Background:\n" + filler_text(self._filler, pad, offset)}
        ]


# the fields of a logged body a replay sends (``model`` is replaced by the endpoint's)
REPLAYED_FIELDS = frozenset(
    {
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "ignore_eos",
        "model",
    }
)


def logged_request(
    e: LoggedRequest, group: TaskGroup, index: int, t: float, phase: str, length: int, seed: int
) -> ScheduledRequest:
    """A logged request as scheduled (see the module docstring): ``length`` and ``seed`` are
    the group's draws, taken where the body has no ``max_tokens`` or, sampled, no ``seed``."""
    body = e.body
    temperature = _number(body.get("temperature"), group.sampling.temperature)
    top_p = _number(body.get("top_p"), group.sampling.top_p)
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else None
    logged_seed = body.get("seed")
    ignore_eos = body.get("ignore_eos")
    return ScheduledRequest(
        index=index,
        send_t=t,
        phase=phase,
        group=group.name,
        prompt_id=f"log-{e.body_sha256[:16]}",
        messages=[dict(m) for m in body["messages"]] if e.api == "chat" else [],
        max_tokens=e.max_tokens if e.max_tokens is not None else length,
        temperature=temperature,
        top_p=top_p,
        seed=logged_seed if type(logged_seed) is int else (seed if temperature > 0 else None),
        stop=[str(x) for x in stops] if stops is not None else list(group.sampling.stop),
        deadline_s=group.slo.deadline_s,
        ttft_slo_s=group.slo.ttft_s,
        # the group's ignore_eos belongs to its lengths: it holds where the length is drawn
        ignore_eos=ignore_eos
        if isinstance(ignore_eos, bool)
        else (e.max_tokens is None and group.output.ignore_eos),
        api=e.api,
        prompt=body["prompt"] if e.api == "completions" else None,
        body_sha256=e.body_sha256,
    )


def _number(value: Any, default: float) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else default


def unreplayed_fields(entries: Iterable[LoggedRequest]) -> dict[str, int]:
    """Field name -> how many logged bodies had it and were replayed without it (tools,
    response_format, n, ...): names and counts, never a value."""
    counts = Counter(k for e in entries for k in e.body if k not in REPLAYED_FIELDS)
    return dict(sorted(counts.items()))


def filler_text(index: BM25Index, chars: int, offset: int) -> str:
    """Deterministic English filler of about ``chars`` characters for input-length padding."""
    docs = [d for d in index.docs if d.text.isascii()] or index.docs
    parts, n, i = [], 0, offset
    while n < chars:
        d = docs[i % len(docs)]
        parts.append(d.text)
        n += len(d.text) + 1
        i += 1
    return " ".join(parts)[:chars]
