"""Greedy consistency: hand-built divergences (near tie vs defect), and a greedy arm with an
injected token swap, served for real (tiny random models, SmolLM2's tokenizer, in-process
server on loopback), caught by the quality pass + consistency check while a correct
speculative arm is not flagged."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.quality.config import QualityConfig
from specpilot.quality.consistency import compare, greedy_consistency, summarise
from specpilot.quality.runner import plan_quality, run_quality_pass
from specpilot.records import OutputRecord
from specpilot.workload.groups import SLO, LengthSpec, Prompt, Sampling, TaskGroup

pytestmark = pytest.mark.usefixtures("one_thread")


def out(
    arm: str, tokens: list[str], tops: list[list[list[Any]]] | None = None, pid: str = "p1"
) -> OutputRecord:
    tops = tops or [[[t, -0.1]] for t in tokens]
    return OutputRecord(
        "r",
        arm,
        "code",
        pid,
        0,
        None,
        0.0,
        "".join(tokens),
        tokens=tokens,
        token_logprobs=[t[0][1] for t in tops],
        top_logprobs=tops,
        manifest_sha256=f"sha-{arm}",
    )


BASE = out(
    "base",
    ["def", " f", "():", " return", " 1"],
    [
        [["def", -0.01], ["class", -5.0]],
        [[" f", -0.2], [" g", -0.25]],  # a near tie: margin 0.05
        [["():", -0.1], ["(x", -3.0]],
        [[" return", -0.1], [" pass", -2.6]],
        [[" 1", -0.5], [" 2", -1.0]],
    ],
)


def test_identical_outputs():
    rec = compare(BASE, out("spec", list(BASE.tokens)))
    assert rec.identical and rec.divergence_index is None and not rec.defect
    assert (rec.baseline_manifest_sha256, rec.candidate_manifest_sha256) == ("sha-base", "sha-spec")


def test_a_near_tie_flip_is_recorded_not_failed():
    rec = compare(BASE, out("spec", ["def", " g", "(x):", " return", " 1"]), threshold=0.5)
    assert not rec.identical and rec.divergence_index == 1
    assert (rec.baseline_token, rec.candidate_token) == (" f", " g")
    assert rec.baseline_logprob == -0.2 and rec.candidate_logprob == -0.25
    assert rec.margin == pytest.approx(0.05) and not rec.defect


def test_a_clear_divergence_is_a_defect():
    rec = compare(BASE, out("spec", ["def", " f", "():", " pass"]), threshold=0.5)
    assert rec.divergence_index == 3 and rec.margin == pytest.approx(2.5) and rec.defect
    # a token the baseline did not even list among its alternatives
    rec = compare(BASE, out("spec", ["def", " f", "():", " banana"]), threshold=0.5)
    assert rec.candidate_logprob is None and rec.defect
    # the same swap under a threshold above the gap is a near tie
    assert not compare(BASE, out("spec", ["def", " f", "():", " pass"]), threshold=3.0).defect


def test_stopping_early_is_judged_by_the_margin_there():
    rec = compare(BASE, out("spec", ["def", " f"]))  # the candidate stopped at position 2
    assert rec.candidate_token is None and rec.margin == pytest.approx(2.9) and rec.defect
    near = out("base", ["a", "b"], [[["a", -0.1]], [["b", -0.1], ["c", -0.2]]])
    assert not compare(near, out("spec", ["a"])).defect  # stopping was a near tie there
    # the baseline stopped and reported nothing at that position: unknown margin, listed
    rec = compare(out("base", ["a"]), out("spec", ["a", "b"]))
    assert rec.baseline_token is None and rec.margin is None and rec.defect


def test_summary_per_group_lists_defects_by_prompt():
    outs = [
        BASE,
        out("spec", list(BASE.tokens)),
        out("base", ["x", "y"], [[["x", -0.1]], [["y", -0.1], ["z", -0.2]]], pid="p2"),
        out("spec", ["x", "z"], pid="p2"),
        out("base", ["q"], pid="p3"),  # no candidate output: not compared
    ]
    recs = greedy_consistency(outs, "base", "spec", threshold=0.05)
    [s] = summarise(recs)
    assert (s.prompts, s.identical, s.near_ties, s.defects) == (2, 1, 0, ["p2"])
    assert s.identical_rate == 0.5 and not s.passed


# -- served for real ------------------------------------------------------------------------

SWAP_AT = 3
PROMPTS = ["Write a haiku about rain.", "List three fruits.", "What is 2 + 2?", "Name a colour."]


def _engine_classes():
    from specpilot.engine.generate import Engine

    class SwappedEngine(Engine):
        """Greedy decoding that replaces output token SWAP_AT with a fixed token: a defect."""

        swap_to = 1000

        def _commit(self, r, new):  # type: ignore[no-untyped-def]
            start = len(r.output_ids)
            if r.params.greedy and start <= SWAP_AT < start + len(new):
                new = list(new)
                new[SWAP_AT - start] = self.swap_to
            return super()._commit(r, new)

    return Engine, SwappedEngine


@pytest.fixture(scope="module")
def servers():
    from conftest import tiny_model
    from specpilot.engine.loader import default_target_path, load_tokenizer
    from specpilot.serve import ServerConfig, create_app
    from test_server import LiveServer

    Engine, SwappedEngine = _engine_classes()
    tok = load_tokenizer(default_target_path())
    started = {}
    for arm, cls, draft in (
        ("base", Engine, None),
        ("spec", Engine, 22),
        ("swap", SwappedEngine, None),
    ):
        d = tiny_model(draft, n_layers=1) if draft else None
        engine = cls(tiny_model(21, scale=3.0), d, tokenizer=tok, max_slots=2, max_seq_len=256)
        cfg = ServerConfig(
            model_name="tiny", draft_name="d" if d else None, default_k=2 if d else 0
        )
        started[arm] = LiveServer(create_app(cfg, engine=engine))
    yield {arm: s.url for arm, s in started.items()}
    for s in started.values():
        s.stop()


def test_injected_token_swap_is_caught_and_a_correct_speculative_arm_is_not(servers):
    group = TaskGroup(
        name="g",
        description="greedy prompts",
        prompts=tuple(
            Prompt(f"p{i}", "g", "eval", ({"role": "user", "content": t},))
            for i, t in enumerate(PROMPTS)
        ),
        output=LengthSpec(8),
        sampling=Sampling(temperature=0.0),
        slo=SLO(1.0, 10.0),
    )
    cfg = QualityConfig(greedy_prompts=len(PROMPTS))
    plan = plan_quality([group], cfg)
    outs = []
    for arm, url in servers.items():
        outs += run_quality_pass(url, "tiny", plan, arm=arm, cfg=cfg, manifest_sha256=f"m-{arm}")
    assert all(o.error is None and len(o.tokens) == 8 and len(o.top_logprobs[0]) == 5 for o in outs)
    spec = greedy_consistency(outs, "base", "spec", cfg.greedy_threshold)
    swap = greedy_consistency(outs, "base", "swap", cfg.greedy_threshold)
    assert len(spec) == len(swap) == len(PROMPTS)
    assert not [r.prompt_id for r in spec if r.defect]  # fp32: identical or near ties only
    assert [r.prompt_id for r in swap if r.defect] == [f"p{i}" for i in range(len(PROMPTS))]
    assert all(
        r.divergence_index == SWAP_AT and r.candidate_manifest_sha256 == "m-swap" for r in swap
    )
    [s] = summarise(swap)
    assert s.identical == 0 and s.defects == [f"p{i}" for i in range(len(PROMPTS))]
