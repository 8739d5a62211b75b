"""A compact Llama-family transformer with a fixed KV cache indexed by position.

The cache is preallocated per *slot* (one slot per running request): ``(slots, n_kv, L + 1, hd)``.
A forward pass takes, for each row of the batch, the slot it owns and the absolute position of
every new token. Keys/values are written at those positions, and each query attends to the
cache entries at positions ``<= its own position`` of its own slot. Rejecting speculative
tokens therefore needs no deletion: the request's length moves back and the stale entries are
overwritten by the next write before any query can see them (a query at position p only sees
positions <= p, all of which were written by real tokens in this or an earlier pass).

Padding scheme for batches of unequal length: rows are right-padded to the longest row with
pad tokens whose position is ``L`` (a scratch column past the context limit). Real queries
never attend column ``L`` (their positions are < L), and pad outputs are discarded.

    >>> cfg = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64)
    >>> m = Transformer(cfg, max_seq_len=32, max_slots=2)
    >>> logits = m(torch.tensor([[1, 2, 3]]), torch.tensor([[0, 1, 2]]), torch.tensor([0]))
    >>> tuple(logits.shape)
    (1, 3, 64)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    context_length: int = 2048
    tie_embeddings: bool = True

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # fused kernel; for bf16 input it accumulates in fp32 (opmath) like the HF reference
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (length, head_dim) in the Hugging Face "rotate_half" layout."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(length, dtype=torch.float64), inv)  # (length, hd/2)
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (..., hd), e.g. (B, T, heads, hd) with cos/sin (B, T, 1, hd), or (B, nh, T, hd) with (1, 1, T, hd)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


class KVCache(nn.Module):
    """Preallocated keys/values for every slot; one extra scratch column for padding."""

    k: torch.Tensor
    v: torch.Tensor

    def __init__(self, slots: int, n_kv: int, length: int, hd: int, dtype: torch.dtype) -> None:
        super().__init__()
        shape = (slots, n_kv, length + 1, hd)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype), persistent=False)

    def update(
        self,
        slots: torch.Tensor,
        pos: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        run: tuple[int, int] | None = None,
    ) -> None:
        """slots: (B,), pos: (B, T), k/v: (B, T, n_kv, hd). ``run`` = (slot, first position)
        when the batch is one row of consecutive positions: a plain slice copy, no scatter."""
        if run is not None:
            s, p0 = run
            t = pos.shape[1]
            self.k[s, :, p0 : p0 + t] = k[0].transpose(0, 1)  # (n_kv, T, hd)
            self.v[s, :, p0 : p0 + t] = v[0].transpose(0, 1)
            return
        b_idx = slots[:, None].expand_as(pos)
        self.k[b_idx, :, pos] = k  # the indexed view is (B, T, n_kv, hd)
        self.v[b_idx, :, pos] = v

    def view(self, rows: slice | torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values of the batch's slots for positions [0, length): a view for a ``slice`` of
        contiguous slots, else a gather of just those columns (no host sync)."""
        if isinstance(rows, slice):
            return self.k[rows, :, :length], self.v[rows, :, :length]
        return self.k[:, :, :length].index_select(0, rows), self.v[:, :, :length].index_select(
            0, rows
        )


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        hd = cfg.head_dim
        self.n_heads, self.n_kv, self.hd = cfg.n_heads, cfg.n_kv_heads, hd
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo: nn.Module = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        self.cache: KVCache | None = None
        self.wqkv: torch.Tensor | None = None  # set by fuse(): one matmul instead of three
        # set by a quantized weight format (engine.formats): q/k/v in one packed projection
        self.packed_qkv: nn.Module | None = None

    def fuse(self) -> None:
        """Store q/k/v weights in one tensor; wq/wk/wv become views of it (no extra memory)."""
        if self.packed_qkv is not None or (
            self.wqkv is not None and self.wq.weight.data_ptr() == self.wqkv.data_ptr()
        ):
            return
        fused = torch.cat([self.wq.weight, self.wk.weight, self.wv.weight]).detach().contiguous()
        nq, nk = self.wq.weight.shape[0], self.wk.weight.shape[0]
        rg = self.wq.weight.requires_grad
        self.wq.weight = nn.Parameter(fused[:nq], requires_grad=rg)
        self.wk.weight = nn.Parameter(fused[nq : nq + nk], requires_grad=rg)
        self.wv.weight = nn.Parameter(fused[nq + nk :], requires_grad=rg)
        self.wqkv = fused

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, dim) -> (B, T, (nh + 2 nkv) hd): the q, k and v projections side by side."""
        if self.packed_qkv is not None:
            out: torch.Tensor = self.packed_qkv(x)
            return out
        if self.wqkv is not None and self.wq.weight.data_ptr() == self.wqkv.data_ptr():
            return F.linear(x, self.wqkv)
        return torch.cat([self.wq(x), self.wk(x), self.wv(x)], dim=-1)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor | None,
        attn_len: int,
        rows: slice | torch.Tensor,
        run: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """cos/sin: (B, T, 1, hd); mask: (B, 1, g*T, S) for the query heads folded per KV head
        (g = nh / nkv, see below); rows, run: where the batch's keys live (``KVCache``)."""
        bsz, t, _ = x.shape  # (B, T, dim)
        nh, nkv, hd = self.n_heads, self.n_kv, self.hd
        qkv = self._qkv(x)
        # rotary embedding on q and k in one call: (B, T, nh + nkv, hd)
        qk = apply_rope(qkv[..., : (nh + nkv) * hd].view(bsz, t, nh + nkv, hd), cos, sin)
        v = qkv[..., (nh + nkv) * hd :].view(bsz, t, nkv, hd)
        assert self.cache is not None, "call Transformer.setup_cache() first"
        self.cache.update(slots, pos, qk[:, :, nh:], v, run)
        q = qk[:, :, :nh].transpose(1, 2)  # (B, nh, T, hd)
        keys, values = self.cache.view(rows, attn_len)  # (B, nkv, S, hd)
        # grouped-query attention with the g query heads of a KV head folded into the query
        # length: (B, nkv, g*T, hd) against (B, nkv, S, hd). Same arithmetic per row as SDPA's
        # enable_gqa, but one plain SDPA, which is much faster on CPU in bf16: the target step
        # went from 21.9 to 17.4 ms (benchmarks/engine_speed.py). g = 1 without GQA.
        g = self.n_heads // self.n_kv
        qf = q.reshape(bsz, self.n_kv, g * t, self.hd)
        y = F.scaled_dot_product_attention(qf, keys, values, attn_mask=mask)  # (B, nkv, g*T, hd)
        y = y.view(bsz, self.n_heads, t, self.hd)
        return self.wo(y.transpose(1, 2).reshape(bsz, t, self.n_heads * self.hd))

    def forward_train(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Cache-free causal self-attention over the whole sequence (for training)."""
        bsz, t, _ = x.shape  # (B, T, dim); cos/sin: (1, 1, T, hd)
        if self.packed_qkv is not None:  # a packed bf16 model (engine.formats): no autograd
            nq, nk = self.n_heads * self.hd, self.n_kv * self.hd
            q_, k_, v_ = self.packed_qkv(x).split([nq, nk, nk], dim=-1)
        else:
            q_, k_, v_ = self.wq(x), self.wk(x), self.wv(x)
        q = q_.reshape(bsz, t, self.n_heads, self.hd).transpose(1, 2)  # (B, nh, T, hd)
        k = k_.reshape(bsz, t, self.n_kv, self.hd).transpose(1, 2)  # (B, nkv, T, hd)
        v = v_.reshape(bsz, t, self.n_kv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv != self.n_heads:
            rep = self.n_heads // self.n_kv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hd)
        return self.wo(y.transpose(1, 2).reshape(bsz, t, self.n_heads * self.hd))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_down: nn.Module = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)
        self.w_gate_up: torch.Tensor | None = None
        self.packed_gate_up: nn.Module | None = None  # set by a quantized weight format

    def fuse(self) -> None:
        """gate and up projections in one tensor (views keep the module layout)."""
        if self.packed_gate_up is not None or (
            self.w_gate_up is not None
            and self.w_gate.weight.data_ptr() == self.w_gate_up.data_ptr()
        ):
            return
        fused = torch.cat([self.w_gate.weight, self.w_up.weight]).detach().contiguous()
        n, rg = self.w_gate.weight.shape[0], self.w_gate.weight.requires_grad
        self.w_gate.weight = nn.Parameter(fused[:n], requires_grad=rg)
        self.w_up.weight = nn.Parameter(fused[n:], requires_grad=rg)
        self.w_gate_up = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed_gate_up is not None:
            gate, up = self.packed_gate_up(x).chunk(2, dim=-1)
            return self.w_down(F.silu(gate) * up)
        fused = self.w_gate_up
        if fused is not None and self.w_gate.weight.data_ptr() == fused.data_ptr():
            gate, up = F.linear(x, fused).chunk(2, dim=-1)
            return self.w_down(F.silu(gate) * up)
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x: torch.Tensor, *args: object) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), *args)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, cfg: LlamaConfig, max_seq_len: int | None = None, max_slots: int = 1):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self.weight_format = "fp32"  # set by engine.formats.apply_format; others are inference-only
        self.max_seq_len = 0
        self.max_slots = 0
        if max_seq_len is not None:
            self.setup_cache(max_seq_len, max_slots)

    def setup_cache(self, max_seq_len: int, max_slots: int) -> None:
        """(Re)allocate the KV cache: ``max_slots`` requests of up to ``max_seq_len`` tokens.

        Also fuses q/k/v and gate/up weights for inference (views: no extra memory).
        """
        with torch.no_grad():
            for layer in self.blocks():
                layer.attn.fuse()
                layer.ffn.fuse()
        dtype, device = self.embed.weight.dtype, self.embed.weight.device
        for layer in self.blocks():
            layer.attn.cache = KVCache(
                max_slots, self.cfg.n_kv_heads, max_seq_len, self.cfg.head_dim, dtype
            ).to(device)
        cos, sin = rope_tables(self.cfg.head_dim, max_seq_len + 1, self.cfg.rope_theta)
        self.register_buffer("rope_cos", cos.to(device, dtype), persistent=False)
        self.register_buffer("rope_sin", sin.to(device, dtype), persistent=False)
        self.max_seq_len, self.max_slots = max_seq_len, max_slots

    def blocks(self) -> list[Block]:
        """The layers, typed (iterating an nn.ModuleList gives plain Modules to mypy)."""
        return cast(list[Block], list(self.layers))

    def kv_bytes_per_token(self) -> int:
        elem = self.embed.weight.element_size()
        return 2 * self.cfg.n_layers * self.cfg.n_kv_heads * self.cfg.head_dim * elem

    def kv_bytes_allocated(self) -> int:
        total = 0
        for layer in self.blocks():
            c = layer.attn.cache
            if c is not None:
                total += c.k.numel() * c.k.element_size() + c.v.numel() * c.v.element_size()
        return total

    def weight_bytes(self, exclude: nn.Module | None = None) -> int:
        """Bytes of parameters, each counted once; ``exclude``'s (shared) tensors not at all."""
        seen: set[int] = {id(p) for p in exclude.parameters()} if exclude is not None else set()
        total = 0
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel() * p.element_size()
        return total

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        pos: torch.Tensor,
        slots: torch.Tensor,
        last: torch.Tensor | None = None,
        attn_len: int | None = None,
    ) -> torch.Tensor:
        """tokens, pos: (B, T) int64; slots: (B,). Pads have pos == max_seq_len.

        Returns logits (B, T, V), or (B, 1, V) at index ``last[b]`` of each row when ``last``
        is given (a prefill needs only its last position: the head is a third of the FLOPs).
        ``attn_len``: attend over this many cache columns, a static size at least the longest
        real position + 1 (CUDA graphs): then nothing here reads a tensor on the host. Default:
        exactly that length, read from ``pos``.
        """
        if self.max_seq_len == 0:
            raise RuntimeError("call setup_cache() before forward()")
        rows: slice | torch.Tensor = slots
        run: tuple[int, int] | None = None
        if attn_len is None:  # eager: a few small host reads, once per forward
            real = pos < self.max_seq_len
            attn_len = int(pos[real].max()) + 1 if bool(real.any()) else 1
            first, n = int(slots[0]), slots.numel()
            if n == 1 or bool((slots == torch.arange(first, first + n, device=slots.device)).all()):
                rows = slice(first, first + n)
            p0, t = int(pos[0, 0]), pos.shape[1]
            if n == 1 and torch.equal(pos[0], torch.arange(p0, p0 + t, device=pos.device)):
                run = (first, p0)  # one row of consecutive positions: slice writes
        # (B, 1, T, S): a query at position p sees columns 0..p of its own slot; repeated for the
        # g query heads folded into each KV head's query length (Attention.forward).
        mask: torch.Tensor | None = None
        if run is None or pos.shape[1] > 1:  # one token of one row sees every column: no mask
            cols = torch.arange(attn_len, device=pos.device)
            mask = (cols[None, None, :] <= pos[:, :, None])[:, None]
            g = self.cfg.n_heads // self.cfg.n_kv_heads
            if g > 1:
                mask = mask.repeat(1, 1, g, 1)
        cos = self.rope_cos[pos][:, :, None]  # (B, T, 1, hd)
        sin = self.rope_sin[pos][:, :, None]
        x = self.embed(tokens)  # (B, T, dim)
        for layer in self.layers:
            x = layer(x, cos, sin, slots, pos, mask, attn_len, rows, run)
        if last is not None:
            x = x[torch.arange(x.shape[0]), last][:, None]  # (B, 1, dim)
        logits: torch.Tensor = self.lm_head(self.norm(x))
        return logits.float()

    def hidden_train(self, tokens: torch.Tensor) -> torch.Tensor:
        """Training path: no KV cache, no inference_mode, causal attention from position 0.

        tokens: (B, T) -> final-norm hidden states (B, T, dim), autograd-enabled. The cached
        ``forward`` is untouched; both compute the same function (tested). A bf16 model whose
        weights ``engine.formats`` packed runs it without autograd (screening, not training).
        """
        if self.weight_format not in ("fp32", "bf16"):
            raise RuntimeError(
                f"a {self.weight_format} model is inference-only; train in fp32/bf16"
            )
        t = tokens.shape[1]
        cos, sin = rope_tables(self.cfg.head_dim, t, self.cfg.rope_theta)
        dtype, device = self.embed.weight.dtype, self.embed.weight.device
        cos = cos.to(device, dtype)[None, None]  # (1, 1, T, hd)
        sin = sin.to(device, dtype)[None, None]
        x = self.embed(tokens)  # (B, T, dim)
        for layer in self.layers:
            blk = cast(Block, layer)
            x = x + blk.attn.forward_train(blk.attn_norm(x), cos, sin)
            x = x + blk.ffn(blk.ffn_norm(x))
        out: torch.Tensor = self.norm(x)
        return out

    def forward_train(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> logits (B, T, V) without the cache (see ``hidden_train``)."""
        logits: torch.Tensor = self.lm_head(self.hidden_train(tokens))
        return logits
