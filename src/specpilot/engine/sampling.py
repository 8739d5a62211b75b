"""Sampling math as pure tensor functions: warps and the Leviathan accept/correct rule.

Everything random takes an explicit ``torch.Generator``; nothing reads global RNG state.

    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])   # target, k+1 = 2 positions
    >>> q = torch.tensor([[1.0, 0.0, 0.0]])                      # draft, k = 1 position
    >>> g = torch.Generator().manual_seed(0)
    >>> n, nxt = speculative_accept(torch.tensor([0]), q, p, g)  # accepted with prob 0.5
    >>> n in (0, 1)
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specpilot.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings. ``temperature == 0`` is greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int = 128
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def validate(self, context_length: int | None = None, prompt_tokens: int = 0) -> None:
        """Raise ValueError naming the field and the allowed range."""
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not isinstance(self.top_p, (int, float)) or not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if context_length is not None and prompt_tokens + self.max_tokens > context_length:
            raise ConfigError(
                f"max_tokens={self.max_tokens} with a {prompt_tokens}-token prompt exceeds the "
                f"context length {context_length}; lower max_tokens to at most "
                f"{max(context_length - prompt_tokens, 0)}"
            )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ConfigError("stop must be a list of non-empty strings")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits (..., V) -> probabilities after temperature, top-k and top-p.

    Greedy (temperature 0) returns the one-hot argmax, so the general accept rule reduces to
    exact argmax matching.
    """
    logits = logits.float()
    if params.greedy:
        out = torch.zeros_like(logits)
        return out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / params.temperature
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly above each token
        sorted_p = sorted_p.masked_fill(before >= params.top_p, 0.0)  # keep the nucleus
        probs = torch.zeros_like(probs).scatter_(-1, idx, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` (..., V) -> (...)."""
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return out.reshape(probs.shape[:-1])


def speculative_accept(
    draft_tokens: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """Leviathan et al. (2023) rule for one sequence.

    draft_tokens: (k,) proposed tokens; q: (k, V) draft probabilities they were sampled from;
    p: (k+1, V) target probabilities at the same positions plus one. Both already warped.
    Returns (accepted, next_token): tokens ``draft_tokens[:accepted]`` are kept, then
    ``next_token`` is appended: sampled from norm(max(0, p - q)) at the first rejection, or from
    p[k] (the bonus token) when all k are accepted. Nothing after a rejection is used.
    """
    k = draft_tokens.shape[0]
    idx = torch.arange(k, device=p.device)
    p_x = p[idx, draft_tokens]
    q_x = q[idx, draft_tokens]
    u = torch.rand(k, generator=generator, dtype=torch.float64, device=p.device).float()
    # accept iff u < p/q, written without division (q_x > 0 for any token the draft sampled)
    accept = u * q_x < p_x
    rejected = (~accept).nonzero()
    if rejected.numel() == 0:
        return k, int(sample(p[k], generator))
    j = int(rejected[0])
    residual = (p[j] - q[j]).clamp_min(0.0)
    total = residual.sum()
    # p == q up to rounding cannot reject; guard against an all-zero residual all the same.
    dist = residual / total if total > 0 else p[j]
    return j, int(sample(dist, generator))


def greedy_accept_batch(
    draft_tokens: torch.Tensor, target_argmax: torch.Tensor, ks: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``greedy_accept`` for a batch, on the device: draft_tokens (B, K), target_argmax
    (B, K+1), ks (B,) each row's own k <= K (cells past it are ignored).

    -> (accepted (B,), next token (B,)): the longest prefix of each row's k drafts equal to the
    target's argmax, then the target's argmax right after it (correction or bonus token).
    """
    kmax = draft_tokens.shape[1]
    if kmax == 0:
        return torch.zeros_like(target_argmax[:, 0]), target_argmax[:, 0]
    cols = torch.arange(kmax, device=draft_tokens.device)
    match = (draft_tokens == target_argmax[:, :kmax]) & (cols[None, :] < ks[:, None])
    accepted = match.long().cumprod(dim=-1).sum(dim=-1)  # (B,)
    return accepted, target_argmax.gather(1, accepted[:, None])[:, 0]


def greedy_accept(draft_tokens: torch.Tensor, target_argmax: torch.Tensor) -> tuple[int, int]:
    """Exact argmax matching: target_argmax (k+1,) -> (accepted, next_token)."""
    k = draft_tokens.shape[0]
    mismatch = (draft_tokens != target_argmax[:k]).nonzero()
    j = int(mismatch[0]) if mismatch.numel() else k
    return j, int(target_argmax[j])
