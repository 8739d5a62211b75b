"""Engine paths on tiny random-weight models (fast): greedy identity, batching, edges, KV reuse."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import tiny_model
from specpilot.engine.generate import Engine
from specpilot.engine.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
PROMPTS = [[1, 5, 9, 200], [7, 7, 3000, 12, 41, 99, 1024, 5], [42], list(range(300, 330))]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_model(seed=1, n_layers=2, dim=64, scale=3.0)


@pytest.fixture(scope="module")
def random_draft():
    return tiny_model(seed=2, n_layers=1, dim=32, scale=3.0)


def engine(target, draft, **kw) -> Engine:
    return Engine(target, draft, max_slots=4, max_seq_len=256, **kw)


def plain_outputs(target, prompts, params=GREEDY, **kw):
    e = engine(target, None, **kw)
    return [e.generate(p, params, 0) for p in prompts]


@pytest.fixture(scope="module")
def noisy_draft(target):
    """The target with perturbed weights: agrees often, not always (partial acceptance)."""
    d = copy.deepcopy(target)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in d.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05 * p.std())
    return d


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("which", ["random", "noisy"])
def test_greedy_spec_equals_plain(target, random_draft, noisy_draft, k, which) -> None:
    draft = random_draft if which == "random" else noisy_draft
    base = plain_outputs(target, PROMPTS)
    e = engine(target, draft)
    rounds = []
    for p, b in zip(PROMPTS, base, strict=True):
        r = e.generate(p, GREEDY, k)
        assert r.output_ids == b.output_ids
        assert all(x.proposed == k for x in r.rounds[:-1])
        rounds += r.rounds
    assert len(e.free_slots) == 4  # slots returned
    accepted = [x.accepted for x in rounds]
    if which == "random":  # first draft token rejected in (nearly) every round
        assert sum(a == 0 for a in accepted) >= 0.9 * len(accepted)
    else:  # a mix of partial and full acceptance exercises both cache paths
        assert 0 < sum(accepted) < k * len(accepted)


def test_identical_draft_accepts_everything_and_its_cache_gets_the_last_token(target) -> None:
    draft = copy.deepcopy(target)
    base = plain_outputs(target, PROMPTS[:2])
    e = engine(target, draft)
    for p, b in zip(PROMPTS[:2], base, strict=True):
        r = e.generate(p, GREEDY, 4)
        assert r.output_ids == b.output_ids
        # Every full round accepts all 4 and commits 5 (bonus included). If the draft's cache
        # missed d_k after a full accept, its next proposals would diverge and be rejected.
        full = [x for x in r.rounds if x.truncated is None]
        assert full and all(x.accepted == 4 and x.committed == 5 for x in full)


def test_batched_mixed_k_and_lengths_equal_single_runs(target, random_draft) -> None:
    base = plain_outputs(target, PROMPTS)
    e = engine(target, random_draft)
    ks = [0, 1, 3, 5]
    params = [
        GREEDY,
        SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True),
        GREEDY,
        SamplingParams(temperature=0.0, max_tokens=17, ignore_eos=True),
    ]
    results = e.generate_batch(PROMPTS, params, ks)
    for r, b, sp in zip(results, base, params, strict=True):
        assert r.output_ids == b.output_ids[: sp.max_tokens]
    assert {x.batch_size for x in results[0].rounds[:5]} == {4}
    assert results[0].rounds[0].proposed == 0 and results[3].rounds[0].proposed == 5


def test_eos_inside_an_accepted_run(target) -> None:
    draft = copy.deepcopy(target)
    out = plain_outputs(target, [PROMPTS[0]])[0].output_ids
    # Pick an EOS id that first appears mid-round: prefill gives token 0, rounds of k=3 give 4.
    j = next(i for i in range(2, len(out)) if (i - 1) % 4 in (1, 2) and out[i] not in out[:i])
    eos = out[j]
    params = SamplingParams(temperature=0.0, max_tokens=24)
    plain = engine(target, None, eos_ids=[eos]).generate(PROMPTS[0], params, 0)
    spec = engine(target, draft, eos_ids=[eos]).generate(PROMPTS[0], params, 3)
    assert plain.output_ids == spec.output_ids == out[: j + 1]
    assert spec.finish_reason == plain.finish_reason == "stop"
    last = spec.rounds[-1]
    assert last.truncated == "eos" and last.accepted == 3 and last.committed < last.accepted + 1


def test_max_tokens_reached_mid_round(target) -> None:
    draft = copy.deepcopy(target)
    params = SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True)  # 1 + 4 + (2 of 4)
    r = engine(target, draft).generate(PROMPTS[1], params, 3)
    assert len(r.output_ids) == 7 and r.finish_reason == "length"
    assert [x.committed for x in r.rounds] == [4, 2]
    assert r.rounds[-1].truncated == "length" and r.rounds[-1].accepted == 3
    assert r.output_ids == plain_outputs(target, [PROMPTS[1]])[0].output_ids[:7]


def test_stop_string_spanning_a_round_boundary(target, tokenizer) -> None:
    draft = copy.deepcopy(target)
    base = plain_outputs(target, [PROMPTS[3]], tokenizer=tokenizer)[0]
    ids = base.output_ids
    # Round boundaries with k=3 after the prefill token: after output tokens 1, 5, 9, ...
    end_r1 = tokenizer.decode(ids[:5], skip_special_tokens=True)
    upto = tokenizer.decode(ids[:6], skip_special_tokens=True)
    assert len(upto) > len(end_r1) >= 2
    stop = upto[len(end_r1) - 2 :]  # last 2 chars of round 1 + the start of round 2
    assert stop not in tokenizer.decode(ids[:5], skip_special_tokens=True)
    params = SamplingParams(temperature=0.0, max_tokens=24, stop=(stop,), ignore_eos=True)
    spec = engine(target, draft, tokenizer=tokenizer).generate(PROMPTS[3], params, 3)
    plain = engine(target, None, tokenizer=tokenizer).generate(PROMPTS[3], params, 0)
    assert spec.finish_reason == plain.finish_reason == "stop"
    assert spec.text == plain.text == upto[: upto.find(stop)]
    assert spec.output_ids == plain.output_ids == ids[:6]
    assert spec.rounds[-1].truncated == "stop"


def test_prefill_is_recorded_apart_and_rounds_count_tokens(target, random_draft) -> None:
    r = engine(target, random_draft).generate(PROMPTS[3], GREEDY, 2)
    assert r.prefill is not None and r.prefill.prompt_tokens == len(PROMPTS[3])
    assert r.prefill.target_s > 0 and r.prefill.draft_s > 0
    assert 1 + sum(x.committed for x in r.rounds) == len(r.output_ids) == 24
    assert all(x.draft_s > 0 and x.verify_s > 0 and x.overhead_s >= 0 for x in r.rounds)


def test_sampling_is_reproducible_from_the_seed(target, random_draft) -> None:
    e = engine(target, random_draft)
    sp = SamplingParams(temperature=1.0, top_k=20, seed=123, max_tokens=16, ignore_eos=True)
    a, b = e.generate(PROMPTS[0], sp, 3), e.generate(PROMPTS[0], sp, 3)
    c = e.generate(
        PROMPTS[0],
        SamplingParams(temperature=1.0, top_k=20, seed=124, max_tokens=16, ignore_eos=True),
        3,
    )
    assert a.output_ids == b.output_ids and a.seed == 123
    assert c.output_ids != a.output_ids


def test_memory_accounting(target, random_draft) -> None:
    e = engine(target, random_draft)
    m = e.memory()
    cfg = target.cfg
    assert m.target_kv_bytes_per_token == 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 4
    assert m.target_kv_bytes_allocated == m.target_kv_bytes_per_token * 4 * 257
    assert m.target_weight_bytes == sum(p.numel() * 4 for p in target.parameters())
    assert 0 < m.draft_weight_bytes < m.target_weight_bytes
    assert m.peak_rss_bytes >= m.rss_bytes > 0


def test_bad_requests_name_the_field(target, random_draft) -> None:
    e = engine(target, random_draft)
    with pytest.raises(ValueError, match="k must be"):
        e.generate(PROMPTS[0], GREEDY, -1)
    with pytest.raises(ValueError, match="max_tokens"):
        e.generate(PROMPTS[0], SamplingParams(max_tokens=1000), 3)
    with pytest.raises(ValueError, match="prompt"):
        e.generate([], GREEDY, 3)
    with pytest.raises(ValueError, match="needs a draft"):
        engine(target, None).generate(PROMPTS[0], GREEDY, 2)
    with pytest.raises(ValueError, match="temperature"):
        e.generate(PROMPTS[0], SamplingParams(temperature=-1), 1)
    assert len(e.free_slots) == 4


def test_slots_exhausted_and_released(target) -> None:
    e = Engine(target, None, max_slots=1, max_seq_len=64)
    req = e.new_request([1, 2], GREEDY.__class__(max_tokens=4))
    with pytest.raises(RuntimeError, match="slots are busy"):
        e.new_request([1, 2], GREEDY.__class__(max_tokens=4))
    e.release(req)
    assert req.finish_reason == "cancelled" and e.free_slots == [0]
    e.release(req)  # a second release must not free the slot twice
    assert e.free_slots == [0]
    again = e.new_request([3], GREEDY.__class__(max_tokens=4))
    assert again.slot == 0 and e.free_slots == []


def test_speculative_sampling_matches_the_target_distribution_on_a_model() -> None:
    """Joint law of the first three sampled tokens (prefill token + one k=3 round), batched.

    Exact target probabilities come from plain forwards of a separate copy of the target.
    Chi-square at p < 1e-4 and a total-variation bound of 0.05 (noise at N=4000 over 27 cells is
    ~0.03); see test_sampling.py for the negative control that the same statistics catch.
    """
    from scipy.stats import chisquare

    from specpilot.engine.sampling import warp

    # A 512-token vocabulary keeps 4,000 generations fast; the rule is vocabulary-agnostic.
    target = tiny_model(seed=5, n_layers=2, dim=64, scale=3.0, vocab=512)
    noisy_draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for p in noisy_draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3 * p.std())
    prompt = [11, 22, 33, 44, 55]
    sp = SamplingParams(temperature=0.8, top_k=3, max_tokens=3, ignore_eos=True, seed=None)
    ref = copy.deepcopy(target)
    ref.setup_cache(64, 1)

    def probs(seq: list[int]) -> torch.Tensor:
        logits = ref(torch.tensor([seq]), torch.arange(len(seq))[None], torch.tensor([0]))
        return warp(logits[0, -1], sp)

    exact: dict[tuple[int, ...], float] = {}
    p1 = probs(prompt)
    for t1 in p1.nonzero().flatten().tolist():
        p2 = probs([*prompt, t1])
        for t2 in p2.nonzero().flatten().tolist():
            p3 = probs([*prompt, t1, t2])
            for t3 in p3.nonzero().flatten().tolist():
                exact[(t1, t2, t3)] = float(p1[t1] * p2[t2] * p3[t3])
    assert len(exact) == 27

    e = engine(target, noisy_draft)
    counts = dict.fromkeys(exact, 0)
    n, accepted = 4000, 0
    for i in range(n // 4):
        params = [SamplingParams(**{**sp.__dict__, "seed": 4 * i + j}) for j in range(4)]
        for r in e.generate_batch([prompt] * 4, params, [3] * 4):
            counts[tuple(r.output_ids)] += 1  # KeyError = a token outside the target's support
            accepted += r.rounds[0].accepted
    assert accepted > 0.15 * n  # speculation really contributed tokens
    keys = sorted(exact)
    obs = [counts[key] for key in keys]
    total = sum(exact.values())
    exp = [exact[key] / total * n for key in keys]
    assert chisquare(obs, exp).pvalue > 1e-4
    tv = 0.5 * sum(abs(o / n - exact[key]) for o, key in zip(obs, keys, strict=True))
    assert tv < 0.05


def test_logprobs_are_recorded_for_divergence_reports(target, random_draft) -> None:
    e = engine(target, random_draft)
    r = e.generate(PROMPTS[0], GREEDY, 3, logprobs=2)
    assert len(r.token_logprobs) == len(r.output_ids)
    for tok, lp in zip(r.output_ids, r.token_logprobs, strict=True):
        assert lp.token_id == tok and len(lp.top) == 2
        assert lp.top[0][0] == tok and lp.top[0][1] >= lp.top[1][1]  # greedy picks the top-1
