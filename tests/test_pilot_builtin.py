"""A load run against the real builtin server (SmolLM2 with the shipped draft, k = 3, one
thread) written to a pilot file: every round and prefill persisted and accounted for, and the
counters scraped at each phase edge agree with the requests of that phase.

The relation tested per ok request: ``output_tokens = 1 + sum(committed over its rounds)``: the
prefill commits the first output token, every decode round commits its accepted drafts plus
the correction/bonus token (fewer when EOS, a stop string or max_tokens cuts the round).
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import yaml

pytest.importorskip("fastapi")

from specpilot.backends import response_extras_for
from specpilot.backends.builtin import BuiltinBackend
from specpilot.cli import main
from specpilot.loadgen import LoadConfig, LoadRunner
from specpilot.records import ArmRecord, PilotRecord
from specpilot.store import PhaseRecorder, Store, read_pilot
from specpilot.workload import build_schedule

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
K = 3
SPEC_COUNTERS = (("spec_rounds", "rounds"), ("spec_proposed_tokens", "proposed"),
                 ("spec_accepted_tokens", "accepted"))  # fmt: skip


@pytest.fixture(scope="module")
def server():
    be = BuiltinBackend(k=K, extra_args=["--threads", "1", "--served-model-name", "smollm2"])
    be.start(timeout_s=240)
    try:
        yield be
    finally:
        be.stop()


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    out = {"mean": 24, "dist": "uniform", "min": 12, "max": 24}
    wl = {
        "name": "builtin-pilot",
        "seed": 5,
        "groups": {"code": {"output": out}, "structured": {"output": out}},
        "phases": [
            {"name": "off_peak", "duration_s": 2, "arrival": {"kind": "constant", "rate": 1.5}},
            {"name": "peak", "duration_s": 1, "arrival": {"kind": "constant", "rate": 4}},
            {"name": "burst", "duration_s": 1, "arrival": {"kind": "constant", "rate": 3}},
        ],
    }
    path = tmp_path_factory.mktemp("wl") / "w.yaml"
    path.write_text(yaml.safe_dump(wl))
    return path


@pytest.fixture(scope="module")
def real_run(server, workload, tmp_path_factory):
    """The load run written to a pilot file: (schedule, path, load result)."""
    sched = build_schedule(str(workload))
    path = tmp_path_factory.mktemp("run") / "pilot.duckdb"
    store = Store(path)
    store.add_pilot(PilotRecord("p", sched.name, {}, "", "0", 0.0, schedule=sched.to_dict()))
    store.add_arm(ArmRecord("p", "r1", "speculative", "speculative", "builtin",
                            server.describe().to_dict()))  # fmt: skip
    cfg = LoadConfig.build(
        server.endpoint, model="smollm2", run_id="r1", arm="speculative", timeout_s=120,
        phase_timing="back_to_back",  # nothing else in flight at an edge: exact deltas
        response_extras=response_extras_for("builtin", strict=True), progress=False,
    )  # fmt: skip
    runner = LoadRunner.for_schedule(sched, cfg, store.sink)
    durations = {p.name: p.duration_s for p in sched.phases}
    PhaseRecorder(store, "r1", "speculative", server.scrape, durations).attach(runner)
    result = runner.run()
    store.close()
    return sched, path, result


def test_rounds_prefills_and_phase_counters_of_a_real_run(real_run):
    sched, path, result = real_run
    assert 8 <= len(sched.requests) <= 12
    assert [r.status for r in result.records] == ["ok"] * len(sched.requests), [
        r.error for r in result.records
    ]
    data = read_pilot(path, rounds=True)
    rounds = defaultdict(list)
    for rr in data.rounds:
        rounds[rr.request_id].append(rr)
    prefills = defaultdict(list)
    for p in data.prefills:
        prefills[p.request_id].append(p)
    for req in data.requests:
        mine = sorted(rounds[req.request_id], key=lambda r: r.round_index)
        assert req.output_tokens == 1 + sum(r.committed for r in mine), req.request_id
        assert [r.round_index for r in mine] == list(range(len(mine)))
        assert all(r.committed <= r.accepted + 1 and r.accepted <= r.proposed <= K for r in mine)
        assert all(r.truncated is not None for r in mine if r.committed < r.accepted + 1)
        assert all(r.phase == req.phase and r.run_id == "r1" for r in mine)
        (pre,) = prefills[req.request_id]  # exactly one prefill per request
        assert pre.prompt_tokens == req.prompt_tokens and pre.target_s > 0
        # the server's clock is the client's (CLOCK_MONOTONIC): rounds lie inside the request
        assert req.sent_t <= pre.t_start <= mine[0].t_start <= mine[-1].t_start <= req.done_t
        assert req.served_k == K and req.served_scope and req.strategy_version is not None
        assert req.server_request_id.startswith("chatcmpl-") and req.output_text
        assert req.spec["rounds"] == sum(1 for r in mine if r.proposed > 0)
        assert req.queue_s is not None and req.prefill_s > 0 and req.decode_s > 0
    assert sum(r.proposed for r in data.rounds) > 0  # the draft did propose
    # counter deltas over each phase equal what that phase's requests report
    snaps = {(s.phase, s.label): s for s in data.snapshots}
    for phase in data.phases:
        assert phase.status == "complete" and phase.actual_end_t > phase.actual_start_t
        before, after = snaps[(phase.phase, "before")], snaps[(phase.phase, "after")]
        reqs = [r for r in data.requests if r.phase == phase.phase]
        assert reqs
        for counter, key in SPEC_COUNTERS:
            delta = after.metrics.get(counter, 0.0) - before.metrics.get(counter, 0.0)
            assert delta == sum(r.spec[key] for r in reqs), (phase.phase, counter)
        gen = after.metrics["generation_tokens"] - before.metrics.get("generation_tokens", 0.0)
        assert gen == sum(r.output_tokens for r in reqs)
        assert after.target_weight_bytes > 0 and after.draft_weight_bytes > 0
        assert after.kv_allocated_bytes > after.draft_kv_bytes > 0 and after.rss_bytes > 50e6
    vc = {(v.tokens, v.batch_size) for v in data.verify_costs}
    assert any(tokens == K + 1 for tokens, _ in vc)


def test_the_simulator_calibrated_on_one_phase_predicts_the_others(real_run, capsys):
    """Issue 23's gate on a real (tiny) run: calibrate on off_peak, predict peak and burst from
    their measured arrivals and lengths. The figures are the result, printed; the verdict
    must follow the rule (validated iff every gated miss is within the tolerance)."""
    from specpilot.simulate import validate

    _, path, _ = real_run
    data = read_pilot(path)
    v = validate(data, "speculative", ["off_peak"], ["peak", "burst"])
    gated = [c for c in v.checks if c.gated]
    assert len(gated) == 4 and all(c.measured and c.predicted for c in gated), v.checks
    assert v.validated == all(abs(c.rel_error or 0) <= v.tolerance for c in gated)
    with capsys.disabled():
        print("\n" + v.text)
        for c in v.checks:
            print(f"  {c.phase:8} {c.metric:9} measured {c.measured} predicted {c.predicted}")
    assert main(["simulate", str(path), "--arm", "speculative", "--validate",
                 "--calibrate-on", "off_peak"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "simulation of speculative" in out and "e2e_p99" in out


def test_the_load_command_persists_rounds_from_a_url(server, workload, tmp_path, capsys):
    out = tmp_path / "cli.duckdb"
    argv = ["load", server.endpoint, "--engine", "builtin", "--workload", str(workload)]
    rc = main([*argv, "--out", str(out), "--quiet", "--phase", "peak", "--back-to-back"])
    assert rc == 0, capsys.readouterr().err
    assert "rounds" in capsys.readouterr().out
    data = read_pilot(out)
    ok = [r for r in data.requests if r.status == "ok"]
    by_req = {rr.request_id: rr for rr in data.request_rounds}
    assert ok and {p.request_id for p in data.prefills} == {r.request_id for r in ok}
    for r in ok:
        assert r.output_tokens == 1 + by_req[r.request_id].committed
    assert [p.phase for p in data.phases] == ["peak"]
    before, after = (s for s in data.snapshots if s.phase == "peak" and s.label != "during")
    delta = after.metrics["spec_rounds"] - before.metrics.get("spec_rounds", 0.0)
    assert delta == sum(rr.spec_rounds for rr in data.request_rounds) > 0
