"""The quality-pass plan (same prompts and seeds for every arm, sized by QualityConfig), the
runner's records against the load generator's instant test server, and failures kept as
records."""

from __future__ import annotations

import pytest

from specpilot.loadgen.testserver import TestServer, TestServerConfig
from specpilot.quality.config import QualityConfig
from specpilot.quality.runner import parse_choice, plan_quality, run_quality_pass, sample_seed
from specpilot.workload.groups import BUILTIN_GROUPS, load_group


def test_default_plan_size_and_seeds_are_fixed():
    cfg = QualityConfig()
    plan = plan_quality([load_group(g) for g in BUILTIN_GROUPS], cfg)
    greedy = [r for r in plan if r.temperature == 0]
    sampled = [r for r in plan if r.temperature > 0]
    assert len(greedy) == 2 * cfg.greedy_prompts and all(r.seed is None for r in greedy)
    assert len(sampled) == 2 * cfg.sampled_prompts * cfg.samples
    assert {r.max_tokens for r in greedy if r.task_group == "code"} == {256}  # the group's own
    assert {r.max_tokens for r in sampled} == {cfg.sampled_max_tokens}
    eval_ids = {p.id for g in BUILTIN_GROUPS for p in load_group(g).split("eval")}
    assert {r.prompt_id for r in plan} <= eval_ids
    # the same plan every time, and a sample's seed depends on nothing but its coordinates
    assert plan == plan_quality([load_group(g) for g in BUILTIN_GROUPS], cfg)
    s = sampled[13]
    assert s.seed == sample_seed(cfg.seed, s.task_group, s.prompt_id, s.sample_index)
    assert len({r.seed for r in sampled}) == len(sampled)
    other = plan_quality([load_group("longform")], QualityConfig(seed=1))
    assert {r.seed for r in other}.isdisjoint(r.seed for r in sampled)


def test_runner_records_text_tokens_and_errors():
    plan = plan_quality(
        [load_group("structured"), load_group("zh_business")],
        QualityConfig(sampled_prompts=1, samples=3),
    )
    with TestServer(TestServerConfig()) as srv:
        outs = run_quality_pass(srv.url, "m", plan, arm="a", run_id="r1", manifest_sha256="abc")
    assert [(o.prompt_id, o.sample_index) for o in outs] == [
        (r.prompt_id, r.sample_index) for r in plan
    ]
    assert all(
        o.error is None and o.text and o.run_id == "r1" and o.manifest_sha256 == "abc" for o in outs
    )
    assert [o.seed for o in outs] == [r.seed for r in plan] and outs[0].max_tokens == 160
    # nobody listening: every request ends as a record with the error, none is lost
    down = run_quality_pass("http://127.0.0.1:9", "m", plan[:2], arm="a")
    assert len(down) == 2 and all(o.error and o.error.startswith("ConnectError") for o in down)


def test_parse_choice_reads_openai_logprobs():
    choice = {
        "message": {"role": "assistant", "content": "Hi there"},
        "logprobs": {
            "content": [
                {
                    "token": "Hi",
                    "logprob": -0.1,
                    "top_logprobs": [
                        {"token": "Hi", "logprob": -0.1},
                        {"token": "Hello", "logprob": -2.5},
                    ],
                },
                {
                    "token": " there",
                    "logprob": -0.3,
                    "top_logprobs": [{"token": " there", "logprob": -0.3}],
                },
            ]
        },
    }
    text, tokens, lps, tops = parse_choice(choice)
    assert (text, tokens, lps) == ("Hi there", ["Hi", " there"], [-0.1, -0.3])
    assert tops == [[["Hi", -0.1], ["Hello", -2.5]], [[" there", -0.3]]]
    assert parse_choice({"message": {"content": None}}) == ("", [], [], [])


def test_config_rejects_bad_values_by_name():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="samples"):
        QualityConfig(samples=0)
    with pytest.raises(ValidationError, match="isolation"):
        QualityConfig.model_validate({"sandbox": {"isolation": "chroot"}})
    assert QualityConfig.model_validate({"sandbox": {"cpu_s": 3}}).sandbox.limits().cpu_s == 3
