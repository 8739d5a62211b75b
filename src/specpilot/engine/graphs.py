"""Decode and verify forwards at fixed shapes: buckets, static buffers and CUDA graphs.

On a GPU a 135M-parameter step is launch-bound (issue 13 measured 17-20 ms per eager step on an
H200 at every batch size): hundreds of small kernels, each launched from Python. A CUDA graph
replays a captured step with one launch. Graphs need fixed shapes and no host reads, so a step
is padded to a *bucket*: batch rows to a power of two (at most the engine's slots), new tokens
exact (1..9: plain, draft steps, verify of k <= 8), and attention to a length bucket (a power of
two >= 128, at most the cache). Pad rows write position ``max_seq_len``, the cache's scratch
column, and their outputs are dropped; the model's ``attn_len`` argument keeps ``forward`` free
of host reads. Prefills (many tokens, last position only) run eagerly.

``StepRunner`` modes: ``dynamic`` (the model as is: exact lengths; the CPU default), ``static``
(bucketed and padded like the graphs, run eagerly: what tests use on a CPU to check the
padding), ``graphs`` (static + capture/replay; CUDA only).

    >>> batch_bucket(3, 8), batch_bucket(9, 12), length_bucket(130, 2048), length_bucket(5, 100)
    (4, 12, 256, 101)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specpilot.engine.model import Transformer

MODES = ("dynamic", "static", "graphs")
MAX_GRAPH_TOKENS = 9  # verify of k = 8 drafts


def batch_bucket(n: int, max_batch: int) -> int:
    """Smallest power of two >= n, capped at ``max_batch`` (itself always a bucket)."""
    b = 1
    while b < n:
        b *= 2
    return min(b, max_batch)


def length_bucket(n: int, max_seq_len: int, floor: int = 128) -> int:
    """Cache columns to attend for a longest position + 1 of ``n``: a power of two >= floor,
    capped at ``max_seq_len + 1`` (the whole cache, scratch column included)."""
    s = floor
    while s < n:
        s *= 2
    return min(s, max_seq_len + 1)


@dataclass
class _Static:
    tokens: torch.Tensor  # (Bb, T)
    pos: torch.Tensor  # (Bb, T)
    slots: torch.Tensor  # (Bb,)


class StepRunner:
    """Runs ``model``'s cached forward for the engine in one of ``MODES``."""

    def __init__(self, model: Transformer, max_batch: int, mode: str = "dynamic") -> None:
        if mode not in MODES:
            raise ValueError(f"step mode must be one of {MODES}, got {mode!r}")
        dev = model.embed.weight.device
        if mode == "graphs" and dev.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device (use mode 'static')")
        self.model, self.max_batch, self.mode, self.device = model, max_batch, mode, dev
        self._static: dict[tuple[int, int], _Static] = {}
        self._graphs: dict[tuple[int, int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool: Any = None  # the graphs share one memory pool
        self.captures = 0

    def __call__(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor,
        slots: torch.Tensor,
        last: torch.Tensor | None = None,
        max_pos: int | None = None,
    ) -> torch.Tensor:
        """Same contract as ``Transformer.forward``; ``max_pos`` (the longest real position,
        known on the host) picks the length bucket without reading ``pos``.

        In ``graphs`` mode the result is a view of the graph's output buffer: use it before the
        next call with the same shape.
        """
        b, t = tokens.shape
        if self.mode == "dynamic" or last is not None or t > MAX_GRAPH_TOKENS or max_pos is None:
            return self.model(tokens, pos, slots, last)
        bb = batch_bucket(b, self.max_batch)
        s = length_bucket(max_pos + 1, self.model.max_seq_len)
        buf = self._buffers(bb, t)
        buf.tokens[:b].copy_(tokens)
        buf.pos.fill_(self.model.max_seq_len)  # pad rows: the scratch column
        buf.pos[:b].copy_(pos)
        buf.slots.zero_()
        buf.slots[:b].copy_(slots)
        if self.mode == "static":
            return self.model(buf.tokens, buf.pos, buf.slots, None, s)[:b]
        graph, out = self._graph(bb, t, s, buf)
        graph.replay()
        return out[:b]

    def _buffers(self, bb: int, t: int) -> _Static:
        key = (bb, t)
        if key not in self._static:
            z = torch.zeros((bb, t), dtype=torch.long, device=self.device)
            self._static[key] = _Static(
                z, z.clone(), torch.zeros(bb, dtype=torch.long, device=self.device)
            )
        return self._static[key]

    def _graph(
        self, bb: int, t: int, s: int, buf: _Static
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        key = (bb, t, s)
        if key in self._graphs:
            return self._graphs[key]
        # capture with the scratch column only: warm-up and capture write no real cache entry
        saved = buf.tokens.clone(), buf.pos.clone(), buf.slots.clone()
        buf.pos.fill_(self.model.max_seq_len)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # cuBLAS/cuDNN workspaces are allocated outside the graph
                self.model(buf.tokens, buf.pos, buf.slots, None, s)
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = self.model(buf.tokens, buf.pos, buf.slots, None, s)
        self._graphs[key] = (graph, out)
        self.captures += 1
        buf.tokens.copy_(saved[0])
        buf.pos.copy_(saved[1])
        buf.slots.copy_(saved[2])
        return graph, out
