"""Phase plan -> deterministic schedule; YAML validation; client stages."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from specpilot.errors import ConfigError, InputFileError
from specpilot.workload import (
    BM25Index,
    Schedule,
    StageRunner,
    WorkloadError,
    build_schedule,
    group_prompts,
    load_workload,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "workload.yaml"
SHARED_TRACES = ROOT.parent / "shared" / "data" / "traces"

BASE = {
    "name": "t",
    "seed": 5,
    "groups": {"zh_business": {"weight": 2}, "code": {}, "structured": {}, "longform": {}},
    "stages": {
        "retrieval": {"kind": "bm25", "docs": "builtin", "top_k": 2, "groups": ["zh_business"]},
        "tool": {
            "kind": "simulated",
            "dist": "lognormal",
            "median_s": 0.2,
            "sigma": 0.5,
            "groups": ["code"],
        },
    },
    "warmup": {"requests": 3, "rate": 2.0},
    "phases": [
        {"name": "off_peak", "duration_s": 30, "arrival": {"kind": "poisson", "rate": 1.0}},
        {"name": "peak", "duration_s": 20, "arrival": {"kind": "gamma", "rate": 3.0, "cv": 2.0}},
        {
            "name": "burst",
            "arrival": {
                "kind": "steps",
                "steps": [{"duration_s": 5, "rate": 0}, {"duration_s": 5, "rate": 8}],
            },
        },
    ],
}


def _write(tmp_path: Path, data: dict, name: str = "w.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, allow_unicode=True))
    return p


def test_same_seed_gives_byte_identical_json_across_processes(tmp_path):
    p = _write(tmp_path, BASE)
    here = build_schedule(p).to_json()
    code = "import sys; from specpilot.workload import build_schedule; sys.stdout.write(build_schedule(sys.argv[1]).to_json())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # no dependence on str hashing
    there = subprocess.run(
        [sys.executable, "-c", code, str(p)], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert there == here
    assert build_schedule(p, seed=6).to_json() != here


def test_schedule_contents(tmp_path):
    s = build_schedule(_write(tmp_path, BASE))
    assert s.phase_names == ["warmup", "off_peak", "peak", "burst"]
    assert [r.index for r in s.requests] == list(range(len(s)))
    warm = s.phase("warmup")
    assert (
        len(warm) == 3
        and all(r.warmup for r in warm)
        and not any(r.warmup for r in s.phase("peak"))
    )
    assert [p.start_s for p in s.phases] == [0.0, 1.5, 31.5, 51.5]
    burst = s.phase("burst")
    assert burst and min(r.send_t for r in burst) >= 5.0  # the first step is a pause
    for ph in s.phases:
        times = [r.send_t for r in s.phase(ph.name)]
        assert times == sorted(times) and all(0 <= t < ph.duration_s for t in times)
        assert ph.requests == len(times)
    eval_ids = {g: {p.id for p in group_prompts(g, "eval")} for g in BASE["groups"]}
    for r in s.requests:
        assert r.prompt_id in eval_ids[r.group]  # default split: held-out prompts only
        assert r.max_tokens >= 1 and r.deadline_s and r.ttft_slo_s
        sampled = r.temperature > 0
        assert (r.seed is not None) == sampled
        if r.group == "zh_business":
            assert r.client_stages == {"retrieval": 0.0} and r.measured_stages == ["retrieval"]
            assert (
                r.messages[0]["role"] == "system"
                and "Reference material" in r.messages[0]["content"]
            )
        elif r.group == "code":
            assert set(r.client_stages) == {"tool"} and r.client_stages["tool"] > 0
            assert r.measured_stages == []
        else:
            assert r.client_stages == {}
    # Group mix follows the weights (zh_business 2 of 5).
    share = sum(r.group == "zh_business" for r in s.requests) / len(s)
    assert 0.25 < share < 0.55
    # Prompts of a group are cycled: no repeat before every eval prompt was used once.
    code_ids = [r.prompt_id for r in s.requests if r.group == "code"]
    n = len(eval_ids["code"])
    assert len(set(code_ids[:n])) == min(n, len(code_ids))


def test_json_round_trip_and_select(tmp_path):
    s = build_schedule(_write(tmp_path, BASE))
    f = tmp_path / "s.json"
    s.save(f)
    back = Schedule.load(f)
    assert back.to_json() == s.to_json() and back.sha256() == s.sha256()
    assert {r.phase for r in back.select(["peak"])} == {"warmup", "peak"}
    assert {r.phase for r in back.select(["peak"], warmup=False)} == {"peak"}
    with pytest.raises(ConfigError, match="phases: warmup, off_peak"):
        back.phase("nope")
    d = json.loads(s.to_json())
    d["version"] = 99
    with pytest.raises(InputFileError, match="version"):
        Schedule.from_dict(d)


def test_phase_group_weights_and_split_override(tmp_path):
    data = {
        "seed": 1,
        "groups": {
            "code": {"split": "train"},
            "longform": {"sampling": {"temperature": 0.3}, "output": {"mean": 50}},
        },
        "phases": [
            {
                "name": "p",
                "duration_s": 30,
                "arrival": {"kind": "constant", "rate": 2},
                "groups": {"longform": 1},
            }
        ],
    }
    s = build_schedule(_write(tmp_path, data))
    assert len(s) == 60 and {r.group for r in s.requests} == {"longform"}
    assert {r.max_tokens for r in s.requests} == {50} and {r.temperature for r in s.requests} == {
        0.3
    }
    assert s.groups["code"]["split"] == "train"


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (
            {"phases": [{"name": "p", "duration_s": 5, "arrival": {"kind": "poisson"}}]},
            "phases[0].arrival: rate missing -> add rate: (requests/s), or target_utilization:",
        ),
        (
            {"phases": [{"name": "p", "duration_s": 5, "arrival": {"kind": "poison", "rate": 1}}]},
            "phases[0].arrival.kind: Input tag 'poison'",
        ),
        (
            {"groups": {"code": {"wieght": 1}}},
            "groups.code.wieght: Extra inputs are not permitted -> did you mean 'weight'?",
        ),
        ({"groups": {"mine": {}}}, "group 'mine' is not built in"),
        (
            {"phases": [{"name": "p", "arrival": {"kind": "constant", "rate": 1}}]},
            "phase 'p' needs duration_s",
        ),
        (
            {
                "phases": [
                    {
                        "name": "p",
                        "duration_s": 1,
                        "arrival": {"kind": "gamma", "rate": 1, "cv": -1},
                    }
                ]
            },
            "phases[0].arrival.cv: Input should be greater than 0",
        ),
        (
            {"stages": {"s": {"kind": "simulated", "dist": "uniform", "min_s": 0.1}}},
            "stages.s: a uniform stage needs min_s and max_s",
        ),
        (
            {
                "phases": [
                    {
                        "name": "p",
                        "duration_s": 1,
                        "arrival": {"kind": "constant", "rate": 1},
                        "groups": {"x": 1},
                    }
                ]
            },
            "uses group 'x'",
        ),
    ],
)
def test_config_errors_name_the_field_and_the_fix(tmp_path, patch, expected):
    data = {
        "groups": {"code": {}},
        "phases": [{"name": "p", "duration_s": 5, "arrival": {"kind": "constant", "rate": 1}}],
    }
    data.update(patch)
    with pytest.raises(WorkloadError) as err:
        load_workload(_write(tmp_path, data))
    assert expected in str(err.value)


def test_trace_replay_phase(tmp_path):
    rng = np.random.default_rng(0)
    t = np.sort(np.concatenate([rng.uniform(0, 600, 300), rng.uniform(200, 260, 300)]))
    lines = ["timestamp,input_tokens,output_tokens"] + [
        f"{x:.4f},{rng.integers(200, 3000)},{rng.integers(5, 900)}" for x in t
    ]
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text("\n".join(lines) + "\n")
    data = {
        "seed": 2,
        "groups": {"longform": {}},
        "phases": [
            {
                "name": "replay",
                "arrival": {
                    "kind": "trace",
                    "path": "traces/t.csv",
                    "window": "peak",
                    "window_s": 60,
                    "target_rate": 2.0,
                    "length_scale": 0.1,
                    "max_output_tokens": 64,
                    "use_lengths": "both",
                    "ignore_eos": True,
                },
            }
        ],
    }
    s = build_schedule(_write(tmp_path, data))
    ph = s.phases[0]
    assert ph.window["kind"] == "peak" and 190 <= ph.window["start_s"] <= 210
    assert ph.offered_rate == pytest.approx(2.0, rel=0.1)
    assert all(r.ignore_eos and 1 <= r.max_tokens <= 64 for r in s.requests)
    padded = [r for r in s.requests if r.input_tokens_target and r.input_tokens_target > 60]
    assert padded and all(r.messages[0]["role"] == "system" for r in padded)
    r = padded[0]
    chars = sum(len(m["content"]) for m in r.messages)
    assert chars == pytest.approx(r.input_tokens_target * 4, rel=0.1)
    # A fixed window in trace seconds, replayed at its own speed.
    data["phases"][0]["arrival"].update(window=[0, 100], target_rate=None, time_scale=1.0)
    s2 = build_schedule(_write(tmp_path, data, "w2.yaml"))
    assert s2.phases[0].duration_s == 100.0 and len(s2) == int(np.sum(t < 100))
    # a window without a single arrival is refused with the phase, the window and the fix
    data["phases"][0]["arrival"].update(window=[700, 800])
    with pytest.raises(
        ConfigError, match=r"phases.replay: the trace window 700-800 s .* no request"
    ):
        build_schedule(_write(tmp_path, data, "w3.yaml"))


def test_stage_runner_times_real_and_simulated_stages(tmp_path):
    docs = tmp_path / "kb"
    docs.mkdir()
    (docs / "refunds.md").write_text("Refunds take five business days after the return arrives.")
    (docs / "shipping.txt").write_text("Shipping is free above fifty euros.")
    data = {
        "seed": 3,
        "groups": {"structured": {}},
        "stages": {
            "search": {"kind": "bm25", "docs": "kb", "top_k": 1},
            "tool": {"kind": "simulated", "dist": "fixed", "median_s": 0.01},
            "pause": {"kind": "simulated", "dist": "fixed", "median_s": 0.0},
        },
        "phases": [{"name": "p", "duration_s": 3, "arrival": {"kind": "constant", "rate": 1}}],
    }
    s = build_schedule(_write(tmp_path, data))
    runner = StageRunner(s.stages, base_dir=s.base_dir)
    req = s.requests[0]
    # A planned 0-second pause and a real search both wait 0.0 before sending; only the
    # search is measured at send time, and the request says so.
    assert req.client_stages == {"search": 0.0, "tool": 0.01, "pause": 0.0}
    assert req.measured_stages == ["search"]
    assert "Refunds" in req.messages[0]["content"]  # the passages retrieved at build time
    measured = asyncio.run(runner.run(req))
    assert list(measured) == list(req.client_stages)  # in the schedule's order
    assert 0 < measured["search"] < 0.05 and 0.009 < measured["tool"] < 0.2
    assert set(runner.run_sync(req)) == {"search", "tool", "pause"}


def test_bm25_scores_agree_with_bm25s():
    """The hand-written index (see stages' docstring for why) against the maintained library:
    bm25s's Lucene variant has the same idf and leaves out the constant factor k1 + 1."""
    import bm25s

    from specpilot.workload.stages import tokenize

    idx = BM25Index.builtin()
    ref = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    ref.index([tokenize(d.title + " " + d.text) for d in idx.docs], show_progress=False)
    for query in (
        "差旅住宿标准 超标部分",
        "refund to the payment method",
        "报销 发票 流程",
        "API rate limits",
    ):
        terms = list(dict.fromkeys(tokenize(query)))  # a query term counts once here
        want = 2.5 * ref.get_scores(terms)
        assert np.allclose(idx.scores(query), want, rtol=1e-5, atol=1e-6), query
        assert want.max() > 0, query  # the query matched something: the check is not vacuous


@pytest.mark.skipif(
    not (SHARED_TRACES / "AzureLLMInferenceTrace_conv.csv").is_file(),
    reason="../shared traces absent",
)
def test_example_workload_builds():
    s = build_schedule(EXAMPLE)
    assert s.phase_names == ["warmup", "off_peak", "peak", "burst", "replay_peak"]
    assert s.phases[-1].window["kind"] == "peak" and len(s.phase("replay_peak")) > 10
    assert s.to_json() == build_schedule(EXAMPLE).to_json()


def test_output_ignore_eos_reaches_the_schedule_and_the_request_body(tmp_path):
    """A group's ``output.ignore_eos`` (equal work in both arms of a pair) is carried by every
    request of that group and sent as vLLM's ``ignore_eos``; the other groups' are not."""
    from specpilot.loadgen import LoadConfig
    from specpilot.loadgen.config import request_body

    data = {
        "seed": 3,
        "groups": {
            "longform": {"output": {"mean": 24, "ignore_eos": True}},
            "code": {"output": {"mean": 24}},
        },
        "phases": [{"name": "p", "duration_s": 10, "arrival": {"kind": "constant", "rate": 2}}],
    }
    s = build_schedule(_write(tmp_path, data))
    by_group = {g: {r.ignore_eos for r in s.requests if r.group == g} for g in ("longform", "code")}
    assert by_group == {"longform": {True}, "code": {False}}
    cfg = LoadConfig.build("http://127.0.0.1:1")
    bodies = {r.group: json.loads(request_body(cfg, r)) for r in s.requests}
    assert bodies["longform"]["ignore_eos"] is True and "ignore_eos" not in bodies["code"]
    with pytest.raises(WorkloadError, match="ignore_eos"):
        data["groups"]["code"]["output"]["ignore_eos"] = "sometimes"
        build_schedule(_write(tmp_path, data))
