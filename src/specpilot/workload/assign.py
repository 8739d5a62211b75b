"""Prompt and length assignment: a phase's arrivals become scheduled requests.

Each arrival draws its group (by the phase's weights), takes the group's next prompt, an output
length from the group's distribution (or the trace's), a sampling seed, and its client stages;
a trace phase that replays input lengths too pads the prompt with English filler towards them.
Each kind of draw has its own seeded stream per phase (:mod:`.seeds`).

    >>> factory = RequestFactory(cfg, groups, cycles, seed=7, stages=StagePlanner({}))  # doctest: +SKIP
    >>> requests = factory.phase_requests(arrivals, first_index=0)                   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specpilot.records import ScheduledRequest
from specpilot.workload.config import WorkloadConfig
from specpilot.workload.groups import TaskGroup
from specpilot.workload.phases import PhaseArrivals
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
        return [
            self._request(first_index + j, j, float(t), names[int(gi)], arr, rngs)
            for j, (t, gi) in enumerate(zip(arr.times, chosen, strict=True))
        ]

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
