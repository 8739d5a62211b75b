"""The real llama.cpp server (xllamacpp) on loopback: plain, with a converted draft, with n-gram
speculation, and killed mid-run. Counters must reconcile with the per-response stats.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("xllamacpp")

from specpilot.backends import response_extras_for
from specpilot.backends.facts import model_file
from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig
from specpilot.loadgen import LoadConfig, run_schedule
from specpilot.records import ScheduledRequest

pytestmark = pytest.mark.timeout(120)
COPY = "Copy this list exactly: apple, banana, cherry, apple, banana, cherry, apple, banana, cherry"


@pytest.fixture(scope="module")
def target():
    from specpilot.engine.loader import default_target_path

    return default_target_path()


def sched(n, gap, content=COPY, max_tokens=4, phase="p", **kw):
    return [
        ScheduledRequest(
            i,
            i * gap,
            phase,
            "g",
            f"p{i}",
            [{"role": "user", "content": content}],
            max_tokens,
            **kw,
        )
        for i in range(n)
    ]


def load(be, items, **kw):
    parse = response_extras_for("llamacpp", strict=True)  # a changed timings format fails here
    cfg = LoadConfig.build(be.endpoint, progress=False, response_extras=parse, **kw)
    return run_schedule(items, cfg)


def delta(before, after, key):
    return after.metrics.get(key, 0.0) - before.metrics.get(key, 0.0)


def test_plain_server_accounting_manifest_and_counters(target):
    with LlamaCppBackend(LlamaCppConfig(model=target, threads=1, n_parallel=2, n_ctx=1024)) as be:
        before = be.scrape(label="before")
        items = sched(5, 0.1, max_tokens=4)
        # a forced timeout: a long answer under a 50 ms deadline
        items.append(
            ScheduledRequest(
                5,
                0.0,
                "p",
                "g",
                "long",
                [{"role": "user", "content": "Tell a long story."}],
                256,
                deadline_s=0.05,
            )
        )
        res = load(be, items, enforce_deadlines=True)
        after = be.scrape(label="after")
        man = be.describe()
    recs = res.records
    assert [r.status for r in recs] == ["ok"] * 5 + ["timeout"]
    for r in recs[:5]:
        assert r.output_tokens == 4 and r.prompt_tokens > 10 and r.finish_reason == "length"
        assert r.first_content_t > r.sent_t and r.prefill_s > 0 and r.chunks >= 1
        assert r.spec is None  # plain decoding: no draft stats in timings
    assert delta(before, after, "generation_tokens") >= 20
    assert after.metrics.get("spec_rounds", 0) == 0 and after.rss_bytes > 50e6
    assert (
        man.models[0].sha256 == model_file("target", target).sha256
        and len(man.tokenizer_sha256) == 64
    )
    assert man.speculative == {"type": None} and "--metrics" in man.launch
    assert man.hardware["cpu_logical_cores"] >= 1


def test_converted_draft_runs_and_reconciles(target, tmp_path):
    """A draft written by our GGUF exporter is accepted by llama.cpp and proposes tokens."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from conftest import tiny_model
    from specpilot.engine.gguf_export import write_llama_gguf
    from specpilot.engine.loader import load_model

    draft_model = tiny_model(0, n_layers=1, dim=64)
    path = write_llama_gguf(
        draft_model, tmp_path / "draft.gguf", tokenizer_from=target, dtype="f32"
    )
    back = load_model(path, tokenizer=False).model  # round trip through our own loader
    for k, v in draft_model.state_dict().items():
        if k in back.state_dict():
            assert (back.state_dict()[k] - v).abs().max() < 1e-6, k
    cfg = LlamaCppConfig(model=target, draft=path, draft_n_max=2, threads=1, n_ctx=512)
    with LlamaCppBackend(cfg) as be:
        before = be.scrape()
        res = load(be, sched(2, 0.05, max_tokens=6))
        after = be.scrape()
        man = be.describe()
    assert all(r.status == "ok" for r in res.records)
    proposed = sum(r.spec["proposed"] for r in res.records)
    accepted = sum(r.spec["accepted"] for r in res.records)
    assert proposed > 0
    assert delta(before, after, "spec_proposed_tokens") == proposed
    assert delta(before, after, "spec_accepted_tokens") == accepted
    rounds = delta(before, after, "spec_rounds")
    assert delta(before, after, "spec_committed_tokens") == accepted + rounds
    assert man.speculative["type"] == "draft-simple" and man.models[1].role == "draft"
    assert not any("tokenizer differs" in n for n in man.notes)


def test_synthetic_acceptance_accepts_every_draft_and_breaks_greedy_identity(target, tmp_path):
    """``synth_rates`` [1, 1, 1]: llama.cpp accepts every drafted token whatever the target says,
    so greedy output is no longer the target's: what a user runs to see the quality gates say
    no. A random 1-layer draft makes the difference certain."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from conftest import tiny_model
    from specpilot.engine.gguf_export import write_llama_gguf

    path = write_llama_gguf(
        tiny_model(0, n_layers=1, dim=64), tmp_path / "d.gguf", tokenizer_from=target, dtype="f32"
    )
    texts = {}
    for name, kw in (("plain", {}), ("synth", {"draft": path, "synth_rates": [1.0, 1.0, 1.0]})):
        cfg = LlamaCppConfig(model=target, threads=1, n_ctx=512, **kw)
        with LlamaCppBackend(cfg) as be:
            res = load(be, sched(1, 0.05, max_tokens=12))
        (r,) = res.records
        assert r.status == "ok"
        texts[name] = r.output_text
        if name == "synth":
            assert r.spec["proposed"] > 0 and r.spec["accepted"] == r.spec["proposed"]
    assert texts["synth"] != texts["plain"], texts


def test_ngram_speculation_accepts_on_copy_heavy_text(target):
    cfg = LlamaCppConfig(
        model=target,
        spec_type="ngram-simple",
        ngram={"size_n": 2, "size_m": 8},
        threads=1,
        n_ctx=512,
    )
    with LlamaCppBackend(cfg) as be:
        before = be.scrape()
        res = load(be, sched(1, 0.0, max_tokens=16))
        after = be.scrape()
        man = be.describe()
    r = res.records[0]
    assert r.status == "ok" and r.spec["accepted"] > 0
    rounds = delta(before, after, "spec_rounds")
    acc = delta(before, after, "spec_accepted_tokens")
    assert acc == r.spec["accepted"] and rounds >= 1
    # per-position counters: P(a >= 1) counts every round that accepted anything; they sum to accepted
    pos = [delta(before, after, f"spec_accepted_pos_{i}") for i in range(1, 65)]
    assert sum(pos) == acc and pos[0] <= rounds
    assert man.speculative["method_class"] == "ngram"


def test_ngram_mod_with_k_3_drafts_at_most_3_tokens(target):
    # ngram-mod has its own draft lengths (defaults n_min 48, n_max 64): the arm's k must reach
    # them, or an arm labelled k=3 proposes up to 64 tokens a round
    cfg = LlamaCppConfig(
        model=target,
        spec_type="ngram-mod",
        draft_n_max=3,
        ngram={"n_match": 4},
        threads=1,
        n_ctx=512,
    )
    with LlamaCppBackend(cfg) as be:
        before = be.scrape()
        res = load(be, sched(1, 0.0, max_tokens=48))
        after = be.scrape()
        man = be.describe()
    assert res.records[0].status == "ok"
    rounds = delta(before, after, "spec_rounds")
    proposed = delta(before, after, "spec_proposed_tokens")
    assert rounds >= 1, "no n-gram draft on copy-heavy text: the test lost its subject"
    assert proposed <= 3 * rounds
    assert man.speculative["effective"]["ngram-mod"] == {"n_match": 4, "n_max": 3, "n_min": 1}


def test_server_killed_mid_run(target):
    """Killed after its second ok answer (not after a delay: a busy machine answers late)."""
    be = LlamaCppBackend(LlamaCppConfig(model=target, threads=1, n_parallel=2, n_ctx=1024))
    be.start()
    kill_at: list[float] = []
    oks: list[str] = []

    def kill_after_two_ok(rec, chunks, rounds, prefill):
        if rec.status == "ok":
            oks.append(rec.request_id)
            if len(oks) == 2:
                kill_at.append(time.perf_counter())
                be.kill()

    try:
        items = sched(16, 0.15, content="Say hi.", max_tokens=3)  # 2.4 s of arrivals
        parse = response_extras_for("llamacpp", strict=True)
        cfg = LoadConfig.build(
            be.endpoint, progress=False, response_extras=parse, abort_after_connect_errors=3
        )
        res = run_schedule(items, cfg, kill_after_two_ok)
    finally:
        be.stop()
    recs = res.records
    statuses = [r.status for r in recs]
    assert kill_at, [(r.status, r.error) for r in recs]
    assert len(recs) == 16 and set(statuses) <= {"ok", "error", "not_sent"}
    assert statuses[0] == "ok" and statuses.count("ok") >= 2
    assert all(r.done_t <= kill_at[0] + 0.05 for r in recs if r.status == "ok")
    assert all(r.status != "ok" for r in recs if r.sent_t and r.sent_t > kill_at[0])
    assert "error" in statuses
