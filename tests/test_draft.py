"""Distilled drafts: training forward, restricted head (exactness), draft format, trainer,
screening ranking on tiny random models, and the shipped draft on the real target."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from conftest import tiny_model
from specpilot.draft.distill import agreement, coverage, head_vocab, train_draft
from specpilot.draft.model import default_init_layers, make_draft
from specpilot.draft.screening import format_table, screen
from specpilot.draft.teacher import generate_teacher_data, load_shards, save_shard
from specpilot.engine.draft_format import (
    RestrictedHead,
    draft_spec_path,
    is_draft_dir,
    load_draft_dir,
    save_draft_dir,
    shipped_draft_path,
)
from specpilot.engine.generate import Engine
from specpilot.engine.loader import LoadedModel, ModelLoadError, default_target_path, file_sha256
from specpilot.engine.runtime import DEFAULT_DRAFT, load_draft
from specpilot.engine.sampling import SamplingParams, speculative_accept

pytestmark = pytest.mark.usefixtures("one_thread")


def _prompts(n: int, seed: int = 0, length: int = 8) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 2000, (length,), generator=g).tolist() for _ in range(n)]


def test_forward_train_matches_cached_forward() -> None:
    m = tiny_model(3, n_layers=2)
    m.setup_cache(64, 1)
    tokens = torch.tensor([_prompts(1, length=12)[0]])
    cached = m(tokens, torch.arange(12)[None], torch.tensor([0]))
    with torch.no_grad():
        free = m.forward_train(tokens)
    torch.testing.assert_close(free, cached, atol=1e-4, rtol=1e-4)


def test_restricted_head_scores_only_its_ids() -> None:
    m = tiny_model(4)
    ids = torch.tensor([5, 17, 300, 4000])
    head = RestrictedHead(m.embed.weight, ids)
    x = torch.randn(2, 3, m.cfg.dim)
    out = head(x)  # (2, 3, V)
    full = x @ m.embed.weight.T
    assert out.shape == full.shape
    torch.testing.assert_close(out[..., ids], full[..., ids])
    mask = torch.ones(m.cfg.vocab_size, dtype=torch.bool)
    mask[ids] = False
    assert bool(torch.isneginf(out[..., mask]).all())
    with pytest.raises(ValueError):
        RestrictedHead(m.embed.weight, torch.tensor([1, 1]))


def test_restricted_draft_keeps_the_target_distribution() -> None:
    """q is 0 outside the head: the Leviathan rule still yields exactly p (analytic + sampled)."""
    g = torch.Generator().manual_seed(0)
    vocab, k = 6, 2
    p = torch.softmax(torch.randn(k + 1, vocab, generator=g) * 1.5, -1)  # target, full vocab
    w = torch.randn(vocab, 4, generator=g)
    head = RestrictedHead(w, torch.tensor([0, 2, 3]))  # the draft can never propose 1, 4, 5
    q = torch.softmax(head(torch.randn(k, 4, generator=g)), -1)
    assert float(q[:, [1, 4, 5]].abs().max()) == 0.0
    # analytic first token: q(x) min(1, p/q) + P(reject) * norm(max(0, p - q))(x) == p(x)
    accept = torch.minimum(p[0], q[0])
    residual = (p[0] - q[0]).clamp_min(0)
    first = accept + (1 - accept.sum()) * residual / residual.sum()
    torch.testing.assert_close(first, p[0])
    # sampled, through the engine's accept rule
    n = 20000
    counts = torch.zeros(vocab)
    for _ in range(n):
        d = torch.multinomial(q, 1, generator=g).squeeze(-1)
        a, nxt = speculative_accept(d, q, p, g)
        counts[int(d[0]) if a >= 1 else nxt] += 1
    freq = counts / n
    assert float((freq - p[0]).abs().max()) < 0.015  # ~4 sigma at n = 20000
    assert float(freq[[1, 4, 5]].sum()) > 0.9 * float(p[0, [1, 4, 5]].sum())  # reached via residual


def test_restricted_draft_greedy_output_equals_plain() -> None:
    target = tiny_model(5, n_layers=2, scale=3.0)
    ids = torch.arange(0, 20000)
    draft = make_draft(target, [0], ids)
    params = SamplingParams(max_tokens=16)
    prompt = _prompts(1, seed=2)[0]
    plain = Engine(target, None, max_seq_len=64).generate(prompt, params, 0)
    spec = Engine(target, draft, max_seq_len=64).generate(prompt, params, 3)
    assert spec.output_ids == plain.output_ids


def test_draft_dir_roundtrip_and_runtime(tmp_path: Path) -> None:
    target = tiny_model(6, n_layers=4)
    tfile = tmp_path / "target.gguf"
    tfile.write_bytes(b"pretend weights")
    loaded = LoadedModel(model=target, tokenizer=None, path=tfile, source="gguf")
    draft = make_draft(target, default_init_layers(4, 2), torch.arange(100, 5000))
    out = save_draft_dir(
        draft, tmp_path / "d2", target_path=tfile, init_layers=[0, 3], dtype=torch.float32
    )
    assert is_draft_dir(out)
    meta = json.loads((out / "draft.json").read_text())
    assert meta["head_vocab"] == 4900 and meta["init_layers"] == [0, 3]
    back = load_draft_dir(out, loaded)
    assert back.embed is target.embed  # shared, not copied
    tokens = torch.tensor([_prompts(1)[0]])
    with torch.no_grad():
        torch.testing.assert_close(back.forward_train(tokens), draft.forward_train(tokens))
    via_runtime = load_draft(str(out), loaded, torch.float32)
    assert isinstance(via_runtime.lm_head, RestrictedHead)
    tfile.write_bytes(b"another target")
    with pytest.raises(ModelLoadError, match="sha256"):
        load_draft_dir(out, loaded)


def test_teacher_data_and_trainer_improve_agreement(tmp_path: Path) -> None:
    torch.manual_seed(0)  # weights only
    target = tiny_model(7, n_layers=2, scale=3.0)
    prompts = [("code" if i % 2 else "longform", p) for i, p in enumerate(_prompts(12, seed=3))]
    samples = list(generate_teacher_data(target, prompts, batch=4, max_new=12, topk=8, seed=1))
    assert len(samples) == 12
    s = samples[0]
    assert s.topk_ids.shape == (12, 8) and len(s.tokens) == s.prompt_len + 12
    save_shard(samples, tmp_path / "teacher-000.pt")
    assert len(load_shards(tmp_path)) == 12
    ids = head_vocab(samples, 512)
    assert coverage(samples, ids) == 1.0
    draft = make_draft(copy.deepcopy(target), [1], ids)
    before, _ = agreement(draft, samples)
    stats = train_draft(draft, samples, max_steps=40, lr=3e-3, warmup_steps=5)
    after, by_group = agreement(draft, samples)
    assert stats.steps == 40 and set(by_group) == {"code", "longform"}
    assert after > before + 0.2


def test_screening_ranks_identical_draft_first_and_random_last() -> None:
    target = tiny_model(8, n_layers=2, dim=64, scale=3.0)
    same = copy.deepcopy(target)
    rand = tiny_model(99, n_layers=2, dim=64, scale=3.0)
    prompts = {"a": _prompts(2, seed=4), "b": _prompts(2, seed=5)}
    report = screen(
        target, {"random": rand, "same": same}, prompts, ks=[2, 3], max_tokens=12, max_seq_len=64,
        repeats=3,
    )  # fmt: skip
    by = {c.name: c for c in report.candidates}
    for g in prompts:
        assert report.ranking[g] == ["same", "random"]
        for k in (2, 3):
            assert by["same"].groups[g][k].acceptance_rate == 1.0
            assert by["random"].groups[g][k].acceptance_rate < 0.2
        assert by["same"].perplexity[g] < by["random"].perplexity[g]
        assert by["same"].best_k[g] in (2, 3)
    table = format_table(report)
    assert "same" in table and "ppl" in table
    json.dumps(report.to_dict())


def test_distill_and_screen_arguments_reach_their_commands() -> None:
    from specpilot.cli import build_parser
    from specpilot.commands import distill, screen_drafts

    args = build_parser().parse_args(
        [
            "distill",
            "--layers",
            "2",
            "--minutes",
            "1",
            "--out",
            "d",
            "--weights",
            "code=2,longform=0.5",
        ]
    )
    assert args.func is distill.run and args.layers == 2
    assert distill._weights(args.weights) == {"code": 2.0, "longform": 0.5}
    with pytest.raises(ValueError, match="--weights: 'code' is not GROUP=NUMBER"):
        distill._weights("code")
    args = build_parser().parse_args(["screen-drafts", "--draft", "a=truncate:0", "--ks", "2,3"])
    assert args.func is screen_drafts.run and args.draft == ["a=truncate:0"]


def test_shipped_draft_files() -> None:
    path = shipped_draft_path("smollm2-135m-instruct-d4")
    # the default draft is this directory, distilled from the default target (same sha256)
    assert draft_spec_path(DEFAULT_DRAFT) == path
    want = json.loads((path / "draft.json").read_text())["target_sha256"]
    assert want == file_sha256(default_target_path())
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 40 * 2**20
    meta = json.loads((path / "draft.json").read_text())
    assert meta["head_vocab"] == 8192 and meta["config"]["n_layers"] == 4
    assert (path / "MODEL_CARD.md").exists()


@pytest.mark.slow
def test_shipped_draft_on_real_target(default_target, chat_ids) -> None:
    draft = load_draft(DEFAULT_DRAFT, default_target, torch.float32)
    assert isinstance(draft.lm_head, RestrictedHead)
    engine = Engine(
        default_target.model, draft, tokenizer=default_target.tokenizer, max_seq_len=512
    )
    params = SamplingParams(max_tokens=32)
    prompt = chat_ids[10]  # a JSON request
    plain = engine.generate(prompt, params, 0)
    spec = engine.generate(prompt, params, 4)
    assert spec.output_ids == plain.output_ids  # fp32 greedy: exact
    committed = sum(r.committed for r in spec.rounds)
    assert committed / len(spec.rounds) > 1.5  # an untrained layer copy stays near 1.0


def test_replayed_greedy_rounds_equal_the_engines() -> None:
    from specpilot.draft.screening import replay_greedy_rounds

    target = tiny_model(9, n_layers=2, scale=3.0)
    draft = make_draft(target, [0], torch.arange(0, 30000))  # agrees often, not always
    engine = Engine(target, draft, max_seq_len=96)
    for seed in range(3):
        prompt = _prompts(1, seed=10 + seed)[0]
        for k in (1, 3):
            res = engine.generate(prompt, SamplingParams(max_tokens=24), k)
            replay = replay_greedy_rounds(draft, [*prompt, *res.output_ids], len(prompt), k)
            assert replay == [(r.accepted, r.committed) for r in res.rounds]
