"""One decode round's device work: the draft phase, the verify forward, the accept rule.

Called by ``Engine.step`` (which does the host bookkeeping around them). Greedy rows never leave
the device until ``accept``'s single host read: the draft's argmax feeds its next step as a
tensor, the verify input is assembled on the device, and the longest-prefix match is one batched
op (``sampling.greedy_accept_batch``). Sampling rows use their request's generator, row by row.

    >>> props, qs = propose(engine, live, ks)                   # doctest: +SKIP
    >>> outcome, drafted = accept(engine, live, ks, props, qs, verify(engine, live, ks, props))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from specpilot.engine.graphs import StepRunner
from specpilot.engine.model import Transformer
from specpilot.engine.requests import RequestState
from specpilot.engine.sampling import greedy_accept_batch, sample, speculative_accept, warp

Row = tuple[int, list[int], int]  # (slot, new tokens, position of the first)


class Engine(Protocol):
    """What a round needs of ``engine.generate.Engine`` (named here, so the two modules do not
    import each other)."""

    device: torch.device
    target: Transformer
    draft: Transformer | None
    runners: dict[int, StepRunner]

    def device_tensor(self, values: list[Any]) -> torch.Tensor: ...

    def pack_rows(
        self, rows: Sequence[Row]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]: ...

    def forward_rows(
        self, model: Transformer, rows: Sequence[Row], last_only: bool = False
    ) -> torch.Tensor: ...


def propose(
    engine: Engine, live: list[RequestState], ks: list[int]
) -> tuple[torch.Tensor, dict[int, list[torch.Tensor]]]:
    """Draft phase: (B, max k) proposals on the device; warped q per sampling row."""
    kmax = max(ks, default=0)
    props = torch.zeros((len(live), kmax), dtype=torch.long, device=engine.device)
    qs: dict[int, list[torch.Tensor]] = {}
    spec = [j for j, k in enumerate(ks) if k > 0]
    for i in range(kmax):
        act = [j for j in spec if ks[j] > i]
        assert engine.draft is not None
        if i == 0:  # committed tokens the draft has not seen (1, or 2 after all-accept)
            rows = [
                (live[j].slot, live[j].tokens[live[j].draft_len :], live[j].draft_len) for j in act
            ]
            logits = engine.forward_rows(engine.draft, rows)  # (A, 1 or 2, V)
            ends = [len(t) - 1 for _, t, _ in rows]
            if max(ends) == 0:
                last = logits[:, 0]
            else:  # each row's last real token
                where = engine.device_tensor(ends)
                last = logits.gather(1, where[:, None, None].expand(-1, 1, logits.shape[-1]))[:, 0]
        else:
            idx = engine.device_tensor(act)
            tokens = props.index_select(0, idx)[:, i - 1 : i]  # the previous proposals
            pos = engine.device_tensor([[live[j].target_len + i] for j in act])
            slots = engine.device_tensor([live[j].slot for j in act])
            top = max(live[j].target_len + i for j in act)
            last = engine.runners[id(engine.draft)](tokens, pos, slots, None, top)[:, 0]
        tok = last.argmax(-1)  # greedy rows: one op for the batch, stays on the device
        for a, j in enumerate(act):
            r = live[j]
            if not r.params.greedy:
                q = warp(last[a], r.params)
                qs.setdefault(j, []).append(q)
                tok[a] = sample(q, r.generator)
        if len(act) == len(live):
            props[:, i] = tok
        else:
            props[engine.device_tensor(act), i] = tok
    return props, qs


def verify(
    engine: Engine, live: list[RequestState], ks: list[int], props: torch.Tensor
) -> torch.Tensor:
    """The target scores [last committed, d1..dk] for every row in one forward: (B, W, V)."""
    rows = [(r.slot, [r.tokens[-1]] + [0] * k, r.target_len) for r, k in zip(live, ks, strict=True)]
    tokens, pos, slots, max_pos = engine.pack_rows(rows)
    if props.shape[1]:
        tokens[:, 1:] = props  # straight from the device; cells past a row's k are pads
    return engine.runners[id(engine.target)](tokens, pos, slots, None, max_pos)


def accept(
    engine: Engine,
    live: list[RequestState],
    ks: list[int],
    props: torch.Tensor,
    qs: dict[int, list[torch.Tensor]],
    logits: torch.Tensor,
) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """-> ((accepted, next token) per row, proposals per row), read to the host once."""
    acc, nxt = greedy_accept_batch(props, logits.argmax(-1), engine.device_tensor(ks))
    host = torch.cat([acc[:, None], nxt[:, None], props], dim=1).tolist()
    out: list[tuple[int, int]] = []
    for j, r in enumerate(live):
        k = ks[j]
        if r.params.greedy:
            out.append((host[j][0], host[j][1]))
        elif k == 0:
            out.append((0, int(sample(warp(logits[j, 0], r.params), r.generator))))
        else:
            p = warp(logits[j, : k + 1], r.params)
            q = torch.stack(qs[j])
            out.append(speculative_accept(props[j, :k], q, p, r.generator))
    return out, [h[2:] for h in host]


class Clock:
    """Marks the draft/verify boundaries of a round: host time on a CPU; CUDA events on a GPU,
    read only after the round's one host read (no synchronisation inside the step)."""

    def __init__(self, device: torch.device) -> None:
        self.t0 = time.perf_counter()
        self.cuda = device.type == "cuda"
        self._marks: list[Any] = []
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._marks.append(ev)
        else:
            self._marks.append(time.perf_counter())

    def spans(self) -> tuple[float, float]:
        """(draft s, verify s)."""
        if self.cuda:
            a, b = self._marks
            return self._start.elapsed_time(a) / 1e3, a.elapsed_time(b) / 1e3
        a, b = self._marks
        return a - self.t0, b - a
