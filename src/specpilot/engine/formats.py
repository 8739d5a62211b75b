"""Weight formats: how a model's matrices are stored and which dtype its activations use.

| name        | weights                                   | activations | kernel                               |
|-------------|-------------------------------------------|-------------|--------------------------------------|
| `fp32`      | float32                                   | float32     | `F.linear` (MKL / oneDNN)            |
| `bf16`      | bfloat16, prepacked for oneDNN (*)        | bfloat16    | `mkldnn._linear_pointwise` (*)       |
| `int8-bf16` | int8, one scale per output row            | bfloat16    | `torch._weight_int8pack_mm`          |
| `int8-fp32` | int8, one scale per output row            | float32     | `torch._weight_int8pack_mm`          |
| `q4-bf16`   | 4-bit groups of 32 with scale and minimum | bfloat16    | `torch._weight_int4pack_mm_for_cpu`  |

(*) Where oneDNN has native bf16 kernels on this CPU (AVX-512 BF16 / AMX:
``bf16_packing_available``), each projection's weight is reordered once into oneDNN's blocked
layout (``PackedLinear``) instead of at every call, as ``F.linear`` does with a plain bf16
weight: same kernel, same result (tested); a 135M target step at one thread 54 -> 39 ms on the
AVX-512 BF16 machine (``benchmarks/step_ab.py``). Elsewhere (an AVX2 CPU emulates bf16) ``bf16`` keeps ``nn.Linear``.

The head of the bf16-activation quantised formats is the GGUF's Q8_0 layout (groups of 32 with
one scale), run exactly as two 4-bit planes by the same int4 kernel (``Q8Linear``);
``int8-fp32`` keeps a per-row int8 head (the int4 kernel is slow with fp32 activations).

`q4` is the GGUF's own Q4_1 block layout: a group of 32 weights is ``d * q + m`` with
``q`` in 0..15; PyTorch's int4 kernel computes ``(q - 8) * scale + zero``, so ``scale = d`` and
``zero = m + 8 d`` run the file's blocks as they are. The blocks are recovered from the
dequantised weights with llama.cpp's Q4_1 rule (``m = min``, ``d = (max - min) / 15``), which
gives back the file's ``q``, ``d`` and ``m`` for a Q4_1 tensor (tested); other tensors (the Q8_0
embedding, a draft's trained layers) are quantised by the same rule. Only the scales and minima
are rounded to bf16 (the kernel's activation dtype). A ``q4-fp32`` variant was tried: the
kernel's float32 path is a slow reference loop here (20-100x the bf16 one), so it is not offered.

Both int kernels cost time linear in the rows multiplied (matrix-vector kernels): they pay at
1-4 rows (plain decoding, short verifies) against a flat bf16 GEMM, not at a prefill. From 32
rows on, ``Int8Linear`` casts its int8 weight to the activation dtype for the float GEMM, and
``Q4Linear`` does the same with an int8 copy of its blocks (it cannot unpack the kernel's
CPU-specific layout cheaply): q4 then holds 1.5 bytes per weight. The int kernels are CPU kernels; on CUDA only fp32 and bf16 are offered. Norms, the embedding
gather, rotary tables and attention run in the activation dtype; logits are returned in fp32.

    >>> fmt = parse_format("int8-bf16")
    >>> fmt.weights, fmt.act_dtype
    ('int8', torch.bfloat16)
    >>> model = apply_format(model_fp32, fmt)                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from specpilot.engine.draft_format import RestrictedHead
from specpilot.engine.model import Transformer

Q4_GROUP = 32
# Rows from which Int8Linear dequantises and uses the float GEMM (crossover measured on the
# AVX-512 BF16 machine, 1 thread: 3072x576 at 32 rows 1.2 ms vs 1.9 ms for the int8 kernel).
DEQUANT_ROWS = 32


@dataclass(frozen=True)
class WeightFormat:
    name: str
    weights: str  # "fp32" | "bf16" | "int8" | "q4"
    act_dtype: torch.dtype

    @property
    def quantized(self) -> bool:
        return self.weights in ("int8", "q4")


FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("fp32", "fp32", torch.float32),
        WeightFormat("bf16", "bf16", torch.bfloat16),
        WeightFormat("int8-bf16", "int8", torch.bfloat16),
        WeightFormat("int8-fp32", "int8", torch.float32),
        WeightFormat("q4-bf16", "q4", torch.bfloat16),
    )
}
ALIASES = {"float32": "fp32", "bfloat16": "bf16", "int8": "int8-bf16", "q4": "q4-bf16"}


def parse_format(name: str) -> WeightFormat:
    """A format by name or alias (``float32``, ``bfloat16``, ``int8``, ``q4``)."""
    key = ALIASES.get(name, name)
    if key not in FORMATS:
        have = ", ".join([*FORMATS, "auto"])
        raise ValueError(f"--dtype must be one of {have} (or {', '.join(ALIASES)}), got {name!r}")
    return FORMATS[key]


def unavailable_reason(fmt: WeightFormat, device: torch.device | str = "cpu") -> str | None:
    """Why ``fmt`` cannot run on ``device`` (None when it can)."""
    dev = torch.device(device)
    if fmt.quantized and dev.type != "cpu":
        return f"{fmt.name}: the int8/int4 weight-only kernels used here are CPU kernels"
    op = {"int8": "_weight_int8pack_mm", "q4": "_weight_int4pack_mm_for_cpu"}.get(fmt.weights)
    if op is not None and not hasattr(torch.ops.aten, op):
        return f"{fmt.name}: this torch ({torch.__version__}) has no aten::{op}"
    return None


# ---------------------------------------------------------------------------- quantisers
def int8_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: w (N, K) -> (q int8 (N, K), scale float32 (N,)), w ~ q * scale."""
    w = w.detach().float()
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def q4_1_quantize(
    w: torch.Tensor, group: int = Q4_GROUP
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """llama.cpp's Q4_1 rule: w (N, K) -> (q int32 (N, K) in 0..15, d (N, K/g), m (N, K/g)).

    Within each group of ``group`` weights: m = min, d = (max - min) / 15, q = round((w - m) / d),
    so w ~ d * q + m.
    """
    n, k = w.shape
    if k % group:
        raise ValueError(f"q4 needs an input width divisible by {group}, got {k}")
    wg = w.detach().float().reshape(n, k // group, group)
    m = wg.amin(dim=-1)
    d = (wg.amax(dim=-1) - m) / 15.0
    safe = torch.where(d > 0, d, torch.ones_like(d))
    q = torch.round((wg - m[..., None]) / safe[..., None]).clamp(0, 15).to(torch.int32)
    return q.reshape(n, k), d, m


# ---------------------------------------------------------------------------- modules
class Int8Linear(nn.Module):
    """y = x @ (q * scale).T with int8 ``q``: weight-only quantisation (activations stay float).

    The int8 kernel's cost grows linearly with the rows of ``x`` (it is a matrix-vector kernel);
    from ``DEQUANT_ROWS`` rows on (a prefill) ``q`` is cast to the activation dtype (exact) and
    multiplied by the float GEMM, the scale applied to the output: 2-5x faster at 64-128 rows.
    """

    def __init__(self, weight: torch.Tensor, act_dtype: torch.dtype) -> None:
        super().__init__()
        q, scale = int8_quantize(weight)
        self.out_features, self.in_features = q.shape
        self.qweight = nn.Parameter(q, requires_grad=False)
        self.scales = nn.Parameter(scale.to(act_dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # (M, K)
        if flat.shape[0] >= DEQUANT_ROWS:
            # |q| <= 127 is exact in bf16; the scale applies to the output, as in the kernel
            return F.linear(x, self.qweight.to(flat.dtype)) * self.scales.to(flat.dtype)
        if not flat.is_contiguous():
            flat = flat.contiguous()
        y = torch._weight_int8pack_mm(flat, self.qweight, self.scales)  # (M, N)
        return y.reshape(*x.shape[:-1], self.out_features)


class Q4Linear(nn.Module):
    """y = x @ W.T with W in Q4_1 blocks of 32, run by PyTorch's packed int4 CPU kernel.

    From ``DEQUANT_ROWS`` rows on (a prefill) an int8 copy of the same blocks' values runs
    through ``Int8Linear``'s dequantising GEMM: the int4 kernel's cost is linear in rows (a
    128-token prefill took 4x bf16's) and its packed layout is CPU-specific, so it cannot be
    unpacked cheaply. The copy costs 1 byte per weight (1.5 in all, bf16 is 2); its rounding
    is under a tenth of a Q4 step.
    """

    def __init__(self, weight: torch.Tensor, act_dtype: torch.dtype) -> None:
        super().__init__()
        q, d, m = q4_1_quantize(weight)
        self.out_features, self.in_features = q.shape
        packed = torch._convert_weight_to_int4pack_for_cpu(q, 8)  # (N, K/2) uint8
        # (K/g, N, 2): the kernel's (scale, zero) with w = (q - 8) * scale + zero
        sz = torch.stack([d, m + 8.0 * d], dim=-1).transpose(0, 1).contiguous()
        self.qweight = nn.Parameter(packed, requires_grad=False)
        self.scales_zeros = nn.Parameter(sz.to(act_dtype), requires_grad=False)
        blocks = q.reshape(*d.shape, Q4_GROUP).float() * d[..., None] + m[..., None]
        self.prefill = Int8Linear(blocks.reshape(q.shape), act_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if flat.shape[0] >= DEQUANT_ROWS:
            out: torch.Tensor = self.prefill(x)
            return out
        if not flat.is_contiguous():
            flat = flat.contiguous()
        y = torch._weight_int4pack_mm_for_cpu(flat, self.qweight, Q4_GROUP, self.scales_zeros)
        return y.reshape(*x.shape[:-1], self.out_features)


def q8_0_quantize(w: torch.Tensor, group: int = Q4_GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's Q8_0 rule: w (N, K) -> (q int32 (N, K) in -127..127, d (N, K/g)), w ~ d * q,
    d = max |w| / 127 within each group of 32."""
    n, k = w.shape
    if k % group:
        raise ValueError(f"q8 needs an input width divisible by {group}, got {k}")
    wg = w.detach().float().reshape(n, k // group, group)
    d = wg.abs().amax(dim=-1) / 127.0
    safe = torch.where(d > 0, d, torch.ones_like(d))
    q = torch.round(wg / safe[..., None]).clamp(-127, 127).to(torch.int32)
    return q.reshape(n, k), d


class Q8Linear(nn.Module):
    """y = x @ W.T with W in Q8_0 blocks (``w = d * q``, one scale per 32) reproduced exactly.

    PyTorch has no group-wise int8 kernel, so ``u = q + 128`` is split into its high and low
    nibbles and the int4 kernel runs once per nibble plane: ``(hi - 8) * 16d + 0`` plus
    ``(lo - 8) * d + 8d`` is ``d * (16 hi + lo - 128) = d * q``. Same bytes as int8 (1 per
    weight). The GGUF stores SmolLM2's tied embedding/head this way; a per-row int8 head lost
    3% top-1 agreement with fp32.
    """

    def __init__(self, weight: torch.Tensor, act_dtype: torch.dtype) -> None:
        super().__init__()
        q, d = q8_0_quantize(weight)
        self.out_features, self.in_features = q.shape
        u = q + 128  # 1..255
        hi = torch._convert_weight_to_int4pack_for_cpu((u >> 4).contiguous(), 8)
        lo = torch._convert_weight_to_int4pack_for_cpu((u & 15).contiguous(), 8)
        zero = torch.zeros_like(d)
        sz_hi = torch.stack([16.0 * d, zero], dim=-1).transpose(0, 1).contiguous()
        sz_lo = torch.stack([d, 8.0 * d], dim=-1).transpose(0, 1).contiguous()
        self.qweight_hi = nn.Parameter(hi, requires_grad=False)
        self.qweight_lo = nn.Parameter(lo, requires_grad=False)
        self.scales_hi = nn.Parameter(sz_hi.to(act_dtype), requires_grad=False)
        self.scales_lo = nn.Parameter(sz_lo.to(act_dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if not flat.is_contiguous():
            flat = flat.contiguous()
        mm = torch._weight_int4pack_mm_for_cpu
        y = mm(flat, self.qweight_hi, Q4_GROUP, self.scales_hi)
        y = y + mm(flat, self.qweight_lo, Q4_GROUP, self.scales_lo)
        return y.reshape(*x.shape[:-1], self.out_features)


def bf16_packing_available(device: torch.device | str = "cpu") -> bool:
    """Whether bf16 weights can be prepacked for oneDNN here (a CPU with native bf16 kernels)."""
    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    try:
        return bool(ops._is_mkldnn_bf16_supported()) and hasattr(ops, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


class PackedLinear(nn.Module):
    """y = x @ W.T with a bf16 ``W`` reordered once into oneDNN's blocked layout.

    ``F.linear`` on a plain bf16 weight reorders it for the AMX / AVX-512 BF16 kernel at every
    call; here that happens once, at load (the layout hint is one row: decode steps). The
    packed tensor is opaque (no storage, no deepcopy): inference only, like the int formats.
    """

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        w = weight.detach().to(torch.bfloat16).contiguous()
        self.out_features, self.in_features = w.shape
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        self.packed = nn.Parameter(packed, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
        return y


def _freed(like: torch.Tensor) -> nn.Parameter:
    """An empty stand-in for a float weight now held by a packed module."""
    return nn.Parameter(torch.empty(0, dtype=like.dtype, device=like.device), requires_grad=False)


# ---------------------------------------------------------------------------- conversion
def apply_format(
    model: Transformer,
    fmt: WeightFormat,
    memo: dict[int, tuple[torch.Tensor, nn.Module]] | None = None,
) -> Transformer:
    """Convert ``model`` in place (and return it); call before ``Engine`` sets up caches.

    Quantised formats, and bf16 where oneDNN packs it (``PackedLinear``), replace every layer
    projection (fused q/k/v, output, fused gate/up, down) with a packed module made from the
    current float weights and free the float copies; the quantised head
    is ``Q8Linear`` with bf16 activations (the GGUF stores the tied embedding as Q8_0; 4-bit
    groups of it lost top-1 agreement 0.88 against fp32, per-row int8 0.97) and a per-row
    ``Int8Linear`` with fp32 ones (the int4 kernel's fp32 path is a slow reference loop); the
    embedding gather stays in the activation dtype. ``memo`` (id of a source weight -> packed
    module) lets a draft reuse the packed head it shares with its target.
    """
    reason = unavailable_reason(fmt, model.embed.weight.device)
    if reason is not None:
        raise ValueError(reason)
    memo = {} if memo is None else memo
    device = model.embed.weight.device
    if fmt.quantized or (fmt.weights == "bf16" and bf16_packing_available(device)):
        make, head_make = _packers(fmt)
        with torch.no_grad():
            _pack_blocks(model, make)
            _pack_head(model, head_make, memo)
    model.to(fmt.act_dtype)  # floats only: packed int weights keep their dtype
    model.weight_format = fmt.name
    return model


def _packers(
    fmt: WeightFormat,
) -> tuple[Callable[[torch.Tensor], nn.Module], Callable[[torch.Tensor], nn.Module]]:
    """The modules a float weight becomes under ``fmt``: (layer projections, head)."""
    if fmt.weights == "bf16":
        return PackedLinear, PackedLinear
    kind = Int8Linear if fmt.weights == "int8" else Q4Linear
    head_kind = Q8Linear if fmt.act_dtype == torch.bfloat16 else Int8Linear
    return partial(kind, act_dtype=fmt.act_dtype), partial(head_kind, act_dtype=fmt.act_dtype)


def _pack_blocks(model: Transformer, make: Callable[[torch.Tensor], nn.Module]) -> None:
    """Every block's fused q/k/v, output, fused gate/up and down projections packed, the float
    copies freed (a projection already packed is left as it is)."""
    for blk in model.blocks():
        a, f = blk.attn, blk.ffn
        if a.packed_qkv is None:
            a.packed_qkv = make(torch.cat([a.wq.weight, a.wk.weight, a.wv.weight]))
            a.wq.weight = a.wk.weight = a.wv.weight = _freed(a.wq.weight)
            a.wqkv = None
        if isinstance(a.wo, nn.Linear):
            a.wo = make(a.wo.weight)
        if f.packed_gate_up is None:
            f.packed_gate_up = make(torch.cat([f.w_gate.weight, f.w_up.weight]))
            f.w_gate.weight = f.w_up.weight = _freed(f.w_gate.weight)
            f.w_gate_up = None
        if isinstance(f.w_down, nn.Linear):
            f.w_down = make(f.w_down.weight)


def _pack_head(
    model: Transformer,
    head_make: Callable[[torch.Tensor], nn.Module],
    memo: dict[int, tuple[torch.Tensor, nn.Module]],
) -> None:
    """The head (a restricted head's projection) packed once per source weight: ``memo``
    hands a draft the module its target's shared head already has."""
    head = model.lm_head
    if isinstance(head, RestrictedHead):
        if head.proj is None:
            head.proj = _memo_packed(head.weight, head_make, memo)
            head.weight = _freed(head.weight)
    elif isinstance(head, nn.Linear):
        model.lm_head = _memo_packed(head.weight, head_make, memo)  # type: ignore[assignment]


def _memo_packed(
    w: torch.Tensor,
    head_make: Callable[[torch.Tensor], nn.Module],
    memo: dict[int, tuple[torch.Tensor, nn.Module]],
) -> nn.Module:
    if id(w) not in memo:  # the tensor is kept with its module: its id stays unique
        memo[id(w)] = (w, head_make(w))
    return memo[id(w)][1]
