"""The accept/correct rule preserves the target distribution; a broken rule is caught.

Significance: each chi-square test rejects at p < 1e-4 (a false alarm once in 10,000 runs for a
correct rule, and the seeds are fixed so the outcome is reproducible). The total-variation
bound (0.02 at 40,000 samples) is ~4x the sampling noise of a correct rule, and far below the
TV distance that the broken rule produces (> 0.1 here; asserted too).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from scipy.stats import chisquare

from specpilot.engine.sampling import (
    SamplingParams,
    greedy_accept,
    sample,
    speculative_accept,
    warp,
)

ALPHA = 1e-4
TV_BOUND = 0.02
N = 40_000


def broken_accept(draft_tokens, q, p, generator):
    """Negative control: accept with min(1, q/p) (ratio upside down), else sample from p."""
    k = draft_tokens.shape[0]
    for i in range(k):
        x = int(draft_tokens[i])
        u = float(torch.rand((), generator=generator))
        if u >= min(1.0, float(q[i, x] / p[i, x])):
            return i, int(sample(p[i], generator))
    return k, int(sample(p[k], generator))


def first_token_histogram(rule: Callable, q: torch.Tensor, p: torch.Tensor, k: int, seed: int):
    """Empirical distribution of the first emitted token of one speculative round."""
    g = torch.Generator().manual_seed(seed)
    v = p.shape[-1]
    counts = torch.zeros(v)
    second = torch.zeros(v)  # second emitted token when the first draft was accepted
    drafts = torch.multinomial(q, N, replacement=True, generator=g).T  # (N, k): d_i ~ q_i
    for n in range(N):
        d = drafts[n]
        accepted, nxt = rule(d, q, p, g)
        emitted = [*d[:accepted].tolist(), nxt]
        counts[emitted[0]] += 1
        if accepted >= 1:
            second[emitted[1]] += 1
    return counts, second


def tv(counts: torch.Tensor, probs: torch.Tensor) -> float:
    return 0.5 * float((counts / counts.sum() - probs).abs().sum())


def chi2_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    keep = probs > 0
    assert float(counts[~keep].sum()) == 0.0, "emitted a token the target gives probability 0"
    expected = probs[keep] * counts.sum()
    return float(chisquare(counts[keep].numpy(), expected.numpy()).pvalue)


# Position-dependent toy distributions over 6 tokens; q deliberately disagrees with p.
P = torch.tensor(
    [
        [0.40, 0.25, 0.15, 0.10, 0.07, 0.03],
        [0.05, 0.05, 0.10, 0.20, 0.30, 0.30],
        [0.30, 0.30, 0.20, 0.10, 0.05, 0.05],
        [0.10, 0.10, 0.10, 0.10, 0.30, 0.30],
    ]
)
Q = torch.tensor(
    [
        [0.10, 0.10, 0.10, 0.20, 0.20, 0.30],
        [0.30, 0.20, 0.20, 0.10, 0.10, 0.10],
        [0.05, 0.05, 0.10, 0.20, 0.30, 0.30],
    ]
)


@pytest.mark.parametrize("k", [1, 3])
def test_leviathan_rule_preserves_target_distribution(k: int) -> None:
    counts, second = first_token_histogram(speculative_accept, Q[:k], P[: k + 1], k, seed=k)
    assert chi2_p(counts, P[0]) > ALPHA
    assert tv(counts, P[0]) < TV_BOUND
    # Given the first draft was accepted, the next emitted token follows the target at position 1.
    assert chi2_p(second, P[1]) > ALPHA
    assert tv(second, P[1]) < 2 * TV_BOUND


def test_broken_rule_is_caught_by_the_same_test() -> None:
    counts, _ = first_token_histogram(broken_accept, Q[:1], P[:2], 1, seed=7)
    assert chi2_p(counts, P[0]) < ALPHA
    assert tv(counts, P[0]) > 0.1


def test_rejection_never_emits_later_drafts() -> None:
    # Target puts zero mass on the first draft token: it must be rejected and nothing after it used.
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        accepted, nxt = speculative_accept(torch.tensor([0, 2]), q, p, g)
        assert (accepted, nxt) == (0, 1)


def test_greedy_accept_is_exact_argmax_matching() -> None:
    assert greedy_accept(torch.tensor([3, 4, 5]), torch.tensor([3, 4, 5, 6])) == (3, 6)  # bonus
    assert greedy_accept(torch.tensor([3, 4, 5]), torch.tensor([9, 4, 5, 6])) == (
        0,
        9,
    )  # first rejected
    assert greedy_accept(torch.tensor([3, 4, 5]), torch.tensor([3, 8, 5, 6])) == (1, 8)
    # Greedy warp is one-hot, so the general rule reduces to the same matching.
    logits = torch.tensor([[0.1, 2.0, 0.3], [1.0, 0.0, 0.5]])
    probs = warp(logits, SamplingParams(temperature=0))
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_warps_top_k_top_p_temperature() -> None:
    logits = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))
    p = warp(logits, SamplingParams(temperature=1.0, top_k=2))
    assert p.tolist() == pytest.approx([0.5 / 0.7, 0.2 / 0.7, 0, 0, 0])
    p = warp(logits, SamplingParams(temperature=1.0, top_p=0.8))  # nucleus: 0.5+0.2+0.15 >= 0.8
    assert p.tolist() == pytest.approx([0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0])
    p = warp(logits, SamplingParams(temperature=1.0, top_p=0.5))  # the top token alone reaches it
    assert p.tolist() == pytest.approx([1, 0, 0, 0, 0])
    hot = warp(logits, SamplingParams(temperature=2.0))
    assert float(hot[0]) < 0.5 and float(hot[-1]) > 0.05


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("temperature", {"temperature": -0.5}),
        ("top_p", {"top_p": 0.0}),
        ("top_p", {"top_p": 1.5}),
        ("top_k", {"top_k": -1}),
        ("max_tokens", {"max_tokens": 0}),
        ("stop", {"stop": ("",)}),
    ],
)
def test_bad_sampling_params_name_the_field(field: str, kwargs: dict) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs).validate()


def test_max_tokens_beyond_context_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"max_tokens=100 .* context length 64"):
        SamplingParams(max_tokens=100).validate(context_length=64, prompt_tokens=10)


def test_greedy_accept_batch_by_hand_and_against_the_row_rule() -> None:
    from specpilot.engine.sampling import greedy_accept, greedy_accept_batch

    drafts = torch.tensor([[5, 6, 7], [5, 9, 7], [1, 2, 3], [4, 4, 4]])
    target = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8], [0, 2, 3, 9], [4, 4, 4, 4]])
    ks = torch.tensor([3, 3, 3, 1])  # the last row proposed only one draft
    acc, nxt = greedy_accept_batch(drafts, target, ks)
    assert acc.tolist() == [3, 1, 0, 1] and nxt.tolist() == [8, 6, 0, 4]
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        k = int(torch.randint(0, 5, (1,), generator=g))
        d = torch.randint(0, 3, (6, 4), generator=g)
        t = torch.randint(0, 3, (6, 5), generator=g)
        ks = torch.randint(0, k + 1, (6,), generator=g)
        acc, nxt = greedy_accept_batch(d[:, :k], t[:, : k + 1], ks)
        for i in range(6):
            kk = int(ks[i])
            assert (int(acc[i]), int(nxt[i])) == greedy_accept(d[i, :kk], t[i, : kk + 1])
