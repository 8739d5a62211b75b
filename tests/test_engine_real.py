"""Greedy identity on the real default target (SmolLM2-135M, fp32) with test drafts.

24 prompts of mixed kinds (Chinese business text, code, JSON, prose, chat), k in {1, 3, 5},
batch 4 (each k on half of the prompts; together all of them) and batch 1 (6 prompts, k in turn),
against plain outputs decoded in batches of 4 that straddle the speculative ones. Two test
drafts cover the edges: a 4-layer truncated copy of the target (untrained: the first draft
token is rejected in most rounds) and an exact copy (every draft accepted, so the draft's
cache must receive the last draft token before the next round).
fp32 is used because greedy identity is exact there; bf16 drifts at near-ties (R1).
"""

from __future__ import annotations

import copy

import pytest

from conftest import PROMPTS
from specpilot.engine.generate import Engine
from specpilot.engine.loader import layer_truncated_copy
from specpilot.engine.sampling import SamplingParams

pytestmark = pytest.mark.slow
MAX_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)


@pytest.fixture(scope="module")
def plain(default_target, chat_ids):
    """Plain greedy outputs, decoded 4 at a time in batches that straddle every batch of the
    speculative tests (prompts 2-5, 6-9, ..., 22-23 + 0-1): each comparison below is across
    batch shapes or batch compositions, never the same padding twice (6 batched runs instead
    of 24 single ones)."""
    e = Engine(
        default_target.model, None, tokenizer=default_target.tokenizer, max_slots=4, max_seq_len=512
    )
    n = len(chat_ids)
    order = [(i + 2) % n for i in range(n)]
    out: dict[int, object] = {}
    for j in range(0, n, 4):
        idx = order[j : j + 4]
        rs = e.generate_batch([chat_ids[i] for i in idx], [GREEDY] * len(idx), [0] * len(idx))
        out.update(zip(idx, rs, strict=True))
    return [out[i] for i in range(n)]


@pytest.fixture(scope="module")
def truncated_engine(default_target):
    draft = layer_truncated_copy(default_target.model, [0, 1, 28, 29])
    return Engine(
        default_target.model,
        draft,
        tokenizer=default_target.tokenizer,
        max_slots=4,
        max_seq_len=512,
    )


def test_prompts_are_mixed_and_outputs_nontrivial(plain, chat_ids) -> None:
    assert len(PROMPTS) >= 20
    assert sum(any("\u4e00" <= c <= "\u9fff" for c in p) for p in PROMPTS) >= 4
    assert all(len(r.output_ids) > 0 for r in plain)
    assert sum(r.finish_reason == "stop" for r in plain) >= 1  # some end on EOS within 24
    assert len({tuple(r.output_ids) for r in plain}) == len(plain)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_batch4_greedy_speculative_equals_plain(truncated_engine, plain, chat_ids, k) -> None:
    rounds = []
    # half of the batches for each k (k = 1 and 5 the even ones, k = 3 the odd): every prompt
    # is checked at batch 4, at half the cost of all three k on all of them
    for i in range(4 * (k // 2 % 2), len(chat_ids), 8):
        batch = chat_ids[i : i + 4]
        results = truncated_engine.generate_batch(batch, [GREEDY] * len(batch), [k] * len(batch))
        for j, r in enumerate(results):
            assert r.output_ids == plain[i + j].output_ids, f"prompt {i + j}: {PROMPTS[i + j]!r}"
            assert r.text == plain[i + j].text and r.finish_reason == plain[i + j].finish_reason
            rounds += r.rounds
    # First draft token rejected in most rounds: the correction path carries the output.
    assert sum(x.accepted == 0 for x in rounds) > 0.5 * len(rounds)
    assert any(x.truncated == "eos" for x in rounds)


def test_batch1_greedy_speculative_equals_plain(truncated_engine, plain, chat_ids) -> None:
    # batch 1 (``generate``): k = 1, 3, 5 in turn over every fourth prompt, 6 prompts (every k is
    # also checked at batch 4 above on all 24 prompts; this keeps the batch-1 path's cost at a
    # third of one test per k)
    for n, i in enumerate(range(1, len(chat_ids), 4)):
        k = (1, 3, 5)[n % 3]
        r = truncated_engine.generate(chat_ids[i], GREEDY, k)
        assert r.output_ids == plain[i].output_ids, f"prompt {i} at k={k}: {PROMPTS[i]!r}"


def test_identical_draft_all_accepted(default_target, plain, chat_ids) -> None:
    e = Engine(
        default_target.model,
        copy.deepcopy(default_target.model),
        tokenizer=default_target.tokenizer,
        max_slots=4,
        max_seq_len=512,
    )
    for i in (0, 4, 9, 13):
        r = e.generate(chat_ids[i], GREEDY, 3)
        assert r.output_ids == plain[i].output_ids
        full = [x for x in r.rounds if x.truncated is None]
        assert all(x.accepted == 3 and x.committed == 4 for x in full)
    results = e.generate_batch([chat_ids[i] for i in (1, 5, 10, 14)], [GREEDY] * 4, [5] * 4)
    for i, r in zip((1, 5, 10, 14), results, strict=True):
        assert r.output_ids == plain[i].output_ids
