"""The sampled gate says no: a speculative engine with a wrong acceptance rule (min(1, q/p)
instead of min(1, p/q)), built here as an Engine subclass and served in-process, is caught by
the distribution tests at the default N; the correct speculative engine on the same target
and draft is not flagged. Real SmolLM2 target (fp32) and the shipped draft, k = 3."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from specpilot.quality.config import QualityConfig
from specpilot.quality.runner import plan_quality, run_quality_pass
from specpilot.quality.sampled import distribution_tests
from specpilot.quality.summary import gate
from specpilot.workload.groups import load_group

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.usefixtures("one_thread")]


def wrong_accept(draft_tokens, q, p, generator):  # type: ignore[no-untyped-def]
    """Leviathan's rule with the ratio upside down: accept with min(1, q/p)."""
    from specpilot.engine.sampling import sample

    k = draft_tokens.shape[0]
    idx = torch.arange(k)
    p_x, q_x = p[idx, draft_tokens], q[idx, draft_tokens]
    u = torch.rand(k, generator=generator, dtype=torch.float64).float()
    rejected = (~(u * p_x < q_x)).nonzero()
    if rejected.numel() == 0:
        return k, int(sample(p[k], generator))
    j = int(rejected[0])
    residual = (p[j] - q[j]).clamp_min(0.0)
    total = residual.sum()
    return j, int(sample(residual / total if total > 0 else p[j], generator))


def _broken_engine_class() -> type:
    import specpilot.engine.generate as gen
    import specpilot.engine.rounds as rounds

    class BrokenEngine(gen.Engine):
        def step(self, reqs):  # type: ignore[no-untyped-def]
            right = rounds.speculative_accept
            rounds.speculative_accept = (
                wrong_accept  # this engine's rounds only (one server at a time)
            )
            try:
                return super().step(reqs)
            finally:
                rounds.speculative_accept = right

    return BrokenEngine


@pytest.fixture(scope="module")
def quality_pass(default_target) -> Iterator[Any]:
    """Run the default quality plan's sampled part for one arm on a fresh in-process server."""
    from specpilot.engine.runtime import DEFAULT_DRAFT, load_draft
    from specpilot.serve import ServerConfig, create_app
    from test_server import LiveServer

    draft = load_draft(DEFAULT_DRAFT, default_target, torch.float32)
    # Default N (samples per prompt), one longform prompt: fewer prompts than the pilot, so
    # less power than the pilot has; what is caught here is caught there.
    cfg = QualityConfig(greedy_prompts=0, sampled_prompts=1)
    plan = plan_quality([load_group("longform")], cfg)
    assert len(plan) == cfg.samples == 12

    def run(arm: str, cls: type, k: int) -> list[Any]:
        engine = cls(
            default_target.model,
            draft,
            tokenizer=default_target.tokenizer,
            max_slots=4,
            max_seq_len=512,
        )
        server = LiveServer(
            create_app(ServerConfig(model_name="m", draft_name="d4", default_k=k), engine=engine)
        )
        try:
            return run_quality_pass(server.url, "m", plan, arm=arm, cfg=cfg, manifest_sha256=arm)
        finally:
            server.stop()

    yield cfg, run


def test_a_wrong_acceptance_rule_is_caught_and_the_right_one_is_not(quality_pass):
    from specpilot.engine.generate import Engine

    cfg, run = quality_pass
    outs = (
        run("baseline", Engine, 0)
        + run("speculative", Engine, 3)
        + run("broken", _broken_engine_class(), 3)
    )
    assert all(o.error is None and len(o.tokens) == 24 for o in outs), [
        (o.arm, o.error, len(o.tokens)) for o in outs if o.error or len(o.tokens) != 24
    ]
    broken = {
        t.test: t for t in distribution_tests(outs, "baseline", "broken", cfg.positions, cfg.span)
    }
    right = {
        t.test: t
        for t in distribution_tests(outs, "baseline", "speculative", cfg.positions, cfg.span)
    }
    assert broken["mean_logprob"].differs or broken["top1_rate"].differs, broken
    assert not any(t.differs for t in right.values()), right
    # the first token comes from prefill in both: no rule touches it
    assert not broken["token@0"].differs
    # the builtin engine reports the target's own log-probs (EngineAdapter.target_logprobs)
    v = gate(
        [], outs, baseline_arm="baseline", candidate_arm="broken", cfg=cfg, target_logprobs=True
    )
    assert not v.passed and any("samples differ" in r for r in v.reasons)
    right_gate = gate(
        [],
        outs,
        baseline_arm="baseline",
        candidate_arm="speculative",
        cfg=cfg,
        target_logprobs=True,
    )
    assert right_gate.passed
