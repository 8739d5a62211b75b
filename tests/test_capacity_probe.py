"""The capacity probe (``pilot.run.capacity``, ``simulate.sustain``) and load levels as fractions of
it (``target_utilization``): the probe measured on a real engine (the tests' tiny random model
behind the specpilot server, in a process of its own), the sustainable-rate search on samples
whose answer is known, the schedule's rates from a capacity, and the report's figures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specpilot.analysis import analyze
from specpilot.cli import main
from specpilot.errors import ConfigError
from specpilot.pilot.config.settings import LoadSettings
from specpilot.pilot.run.capacity import (
    NoSustainableRate,
    over_capacity,
    pick,
    probe,
    replayer,
)
from specpilot.pilot.run.finish import summary
from specpilot.records import PilotData, PilotRecord, ScheduledRequest
from specpilot.report.document import to_document
from specpilot.report.markdown import render_markdown
from specpilot.report.schema import validate
from specpilot.simulate.sustain import Sample, sustainable
from specpilot.workload import build_schedule
from test_server import MODEL
from tiny_server import running

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pilot-builtin-poisson.yaml"


def _workload(**arrival: object) -> dict[str, object]:
    return {
        "name": "u",
        "seed": 1,
        "groups": {"code": {"weight": 1}, "structured": {"weight": 1}},
        "warmup": {"requests": 1, "rate": 1.0},
        "phases": [{"name": "low", "duration_s": 100, "arrival": {"kind": "constant", **arrival}}],
    }


# -- the schedule from a capacity ----------------------------------------------------------


def test_a_utilization_is_a_fraction_of_the_capacity_given() -> None:
    s = build_schedule(_workload(target_utilization=0.3), capacity_rps=2.0)
    low = next(p for p in s.phases if p.name == "low")
    assert low.requests == 60  # 0.3 x 2 req/s over 100 s, constant arrivals
    assert low.arrival["target_utilization"] == 0.3 and low.arrival["capacity_rps"] == 2.0
    faster = build_schedule(_workload(target_utilization=0.3), capacity_rps=4.0)
    assert next(p for p in faster.phases if p.name == "low").requests == 120


def test_a_rate_keeps_its_schedule_whatever_the_capacity() -> None:
    a = build_schedule(_workload(rate=0.5)).to_dict()
    b = build_schedule(_workload(rate=0.5), capacity_rps=3.0).to_dict()
    assert a == b  # the JSON of a pilot that gives rates is unchanged: old pilots resume


def test_a_utilization_without_a_capacity_names_the_phase_and_the_fix() -> None:
    with pytest.raises(ConfigError) as err:
        build_schedule(_workload(target_utilization=0.3))
    assert "phase 'low'" in str(err.value) and "target_utilization 0.3" in str(err.value)
    assert err.value.fix and "rate:" in err.value.fix


@pytest.mark.parametrize(
    ("arrival", "said"),
    [
        ("target_utilization: 2.0", "less than or equal to 1.5"),
        ("target_utilization: 0", "greater than 0"),
        ("rate: 0.5, target_utilization: 0.3", "rate and target_utilization both given"),
    ],
)
def test_a_bad_utilization_is_refused_at_its_line(tmp_path, capsys, arrival, said) -> None:
    text = EXAMPLE.read_text()
    old = "arrival: {kind: poisson, rate: 0.5}"
    assert text.count(old) == 1
    f = tmp_path / "p.yaml"
    f.write_text(text.replace(old, f"arrival: {{kind: poisson, {arrival}}}"))
    assert main(["pilot", str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err
    line = text[: text.index(old)].count("\n") + 1
    assert f"{f}:{line}:" in err and said in err and "Traceback" not in err, err


def test_the_dry_run_plans_utilization_at_a_given_capacity_or_says_it_waits(
    tmp_path, capsys
) -> None:
    text = EXAMPLE.read_text().replace(
        "arrival: {kind: poisson, rate: 0.5}", "arrival: {kind: poisson, target_utilization: 0.5}"
    )
    f = tmp_path / "p.yaml"
    f.write_text(text)
    assert main(["pilot", str(f), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "phases peak give target_utilization" in out and "capacity probe" in out
    assert main(["pilot", str(f), "--dry-run", "--json", "--capacity", "2"]) == 0
    plan = json.loads(capsys.readouterr().out)
    peak = next(p for p in plan["schedule"]["phases"] if p["name"] == "peak")
    assert 0.6 < peak["offered_rate"] < 1.4  # Poisson at 0.5 x 2 req/s over 30 s
    assert plan["capacity"] == {"given_rps": 2.0, "waits_for_probe": []}


def test_probe_false_with_a_utilization_is_refused_at_its_line(tmp_path, capsys) -> None:
    text = EXAMPLE.read_text().replace(
        "arrival: {kind: poisson, rate: 0.5}", "arrival: {kind: poisson, target_utilization: 0.5}"
    )
    assert "\nload: {" in text
    text = text.replace("\nload: {", "\nload: {capacity_probe: false, ", 1)
    f = tmp_path / "p.yaml"
    f.write_text(text)
    out = tmp_path / "out"
    assert main(["pilot", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    line = text[: text.index("\nload: {")].count("\n") + 2
    assert f"{f}:{line}:" in err and "capacity_probe is false" in err, err
    assert "phase 'peak'" in err and not (out / "pilot.duckdb").exists()


def test_a_baseline_by_url_is_not_probed_unless_allowed(tmp_path, capsys) -> None:
    text = EXAMPLE.read_text().replace(
        "arrival: {kind: poisson, rate: 0.5}", "arrival: {kind: poisson, target_utilization: 0.5}"
    )
    head = "  - name: baseline\n    role: baseline\n"
    assert text.count(head) == 1
    text = text.replace(head, head + "    url: http://127.0.0.1:9\n")
    text = text.replace("processes: 3,", "processes: 1,")  # an endpoint is one process
    f = tmp_path / "p.yaml"
    f.write_text(text)
    out = tmp_path / "out"
    assert main(["pilot", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "add 'probe: true' to arm 'baseline'" in err and "Traceback" not in err, err
    assert not (out / "pilot.duckdb").exists()


# -- the sustainable rate from samples ------------------------------------------------------


def _sync(step: float, tokens: int = 30) -> list[Sample]:
    return [Sample(g, tokens, 20, 0.05, 0.05 + (tokens - 1) * step) for g in ("a", "b")] * 2


def _burst(n: int, slots: int, step_full: float, tokens: int = 30) -> tuple[list[Sample], float]:
    """``n`` requests at once on ``slots``: each prefill (0.05 s) in turn, then full batches."""
    waves = -(-n // slots)
    return [Sample("a", tokens, 20, 0.05, 0.0)] * n, n * 0.05 + waves * (tokens - 1) * step_full


def test_a_step_that_grows_with_the_batch_sustains_less() -> None:
    """The same unloaded engine, once with a batch step that barely grows (AVX-512-like) and
    once with one that grows with the batch (AVX2-like): the second sustains less."""
    sync = _sync(0.02)
    flat = _rate(sync, 0.022)
    steep = _rate(sync, 0.07)
    assert flat.step_s[1] == pytest.approx(0.022, rel=0.15)
    assert steep.step_s[1] == pytest.approx(0.07, rel=0.15)
    assert steep.sustainable_rps < 0.6 * flat.sustainable_rps
    for r in (flat, steep):
        assert 0 < r.sustainable_rps < r.max_rps
        assert all(r.predicted_p90_s[g] <= r.limit_s[g] + 1e-9 for g in r.predicted_p90_s)
    assert _rate(sync, 0.07) == steep  # seeded: the same measurements, the same rate


def _rate(sync: list[Sample], step_full: float):  # type: ignore[no-untyped-def]
    burst, span = _burst(8, 4, step_full)
    return sustainable(sync, burst, burst_span_s=span, slots=4)


def test_a_deadline_tighter_than_the_factor_lowers_the_rate() -> None:
    sync = _sync(0.02)
    burst, span = _burst(8, 4, 0.03)
    loose = sustainable(sync, burst, burst_span_s=span, slots=4)
    unloaded = loose.unloaded_s["a"]
    tight = sustainable(sync, burst, burst_span_s=span, slots=4, deadlines={"a": 1.2 * unloaded})
    assert tight.limit_s["a"] == pytest.approx(1.2 * unloaded)
    assert tight.sustainable_rps < loose.sustainable_rps


def test_over_capacity_is_said_not_refused() -> None:
    s = build_schedule(_workload(rate=3.0))
    notes = over_capacity(s, 2.0)
    assert notes == [
        "phase low: 3 req/s is 1.50x the capacity measured (2 req/s): kept as an overload by "
        "intent, its requests will queue"
    ]
    assert over_capacity(s, 4.0) == []


# -- the probe on a real engine ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> Iterator[str]:
    """The tests' tiny random model behind ``specpilot serve``'s app, 2 slots, one thread."""
    with running() as base:
        yield base


def _requests(n: int = 8) -> list[ScheduledRequest]:
    return [
        ScheduledRequest(
            index=i,
            send_t=float(i),
            phase="low",
            group=("code", "chat")[i % 2],
            prompt_id=f"p{i}",
            messages=[{"role": "user", "content": f"write {i} things"}],
            max_tokens=24,
            ignore_eos=True,
        )
        for i in range(n)
    ]


def test_the_probe_measures_a_real_engine(tiny: str) -> None:
    run = replayer(tiny, MODEL, LoadSettings(), "baseline")
    f = probe(run, _requests(), slots=2, deadlines={}, confirm_s=4.0)
    assert set(f["unloaded_s"]) == {"code", "chat"}
    assert all(v > 0 for v in f["unloaded_s"].values())
    assert f["slots"] == 2 and f["step_s"][0] > 0
    assert 0 < f["sustainable_rps"] <= f["simulated_rps"] <= f["max_rps"]
    c = f["confirm"]
    assert c["answered"] == c["requests"] >= 4  # every request of the segment came back
    assert f["limit_s"]["code"] == pytest.approx(2 * f["unloaded_s"]["code"], abs=2e-4)
    if f["sustainable_rps"] < f["simulated_rps"]:  # lowered by the confirmation, and said
        assert "overshot" in f["note"]
    assert f["probe_s"] > 0


def test_deadlines_from_the_unloaded_task_time_are_set_by_the_probe(tiny: str) -> None:
    """``slo.unloaded_x``: the group's deadline is that multiple of its unloaded median, in
    seconds, and bounds the sustainable rate where it is tighter than the factor."""
    run = replayer(tiny, MODEL, LoadSettings(), "baseline")
    f = probe(run, _requests(), slots=2, deadlines={}, confirm_s=2.0, unloaded_x={"code": 1.5})
    u = f["unloaded_s"]["code"]
    assert f["deadlines_s"] == {"code": pytest.approx(1.5 * u, abs=2e-3)}
    assert f["limit_s"]["code"] == pytest.approx(1.5 * u, abs=2e-3)  # tighter than 2x
    assert f["limit_s"]["chat"] == pytest.approx(2 * f["unloaded_s"]["chat"], abs=2e-4)


def test_a_baseline_that_misses_its_slo_unloaded_has_no_sustainable_rate(tiny: str) -> None:
    run = replayer(tiny, MODEL, LoadSettings(), "baseline")
    with pytest.raises(NoSustainableRate) as err:
        probe(run, _requests(4), slots=2, deadlines={"code": 0.001}, confirm_s=2.0)
    assert "group 'code': unloaded task time" in str(err.value)
    assert "> its slo.deadline_s 0.001 s" in str(err.value)


def test_pick_takes_each_group_in_schedule_order() -> None:
    chosen = pick(_requests(8), per_group=2)
    assert [r.index for r in chosen] == [0, 1, 2, 3]


# -- the report's figures ---------------------------------------------------------------------


def _pilot(capacity: dict[str, object] | None) -> PilotData:
    phase = {
        "duration_s": 10.0,
        "requests": 6,
        "warmup": False,
        "arrival": {"kind": "trace", "target_utilization": 0.3},
    }
    sched: dict[str, object] = {
        "phases": [
            {"name": "warmup", "duration_s": 1.0, "requests": 1, "warmup": True, "arrival": {}},
            {"name": "off~01", **phase},
            {"name": "off~02", **phase},
            {"name": "peak~01", **{**phase, "requests": 16, "arrival": {"kind": "trace"}}},
        ]
    }
    if capacity is not None:
        sched["capacity"] = capacity
    return PilotData(PilotRecord("p", "cap", {}, "", "0", 0.0, schedule=sched))


def test_the_report_states_capacity_and_utilization_of_every_level() -> None:
    probe_fig = {
        "method": "synchronous pass + saturating burst",
        "sustainable_rps": 2.0,
        "unloaded_s": {"code": 1.1},
        "limit_s": {"code": 2.2},
        "sync_rps": 0.8,
        "max_rps": 3.1,
        "probe_s": 30.0,
        "start_s": 4.0,
        "arm": "baseline",
        "predicted_p90_s": {"code": 2.0},
        "confirm": {
            "rate_rps": 2.0,
            "requests": 16,
            "answered": 15,
            "p90_s": {"code": 2.4},
            "over_limit": {"code": 2.0},
        },
        "note": "the open-loop segment at 2 req/s overshot a limit 2.00x",
    }
    doc = to_document(analyze(_pilot(probe_fig)))
    assert validate(doc) == []
    assert doc["capacity"]["probe"]["sustainable_rps"] == 2.0
    levels = {lv["level"]: lv for lv in doc["capacity"]["levels"]}
    assert levels["off"]["offered_rps"] == 0.6 and levels["off"]["utilization"] == 0.3
    assert levels["off"]["target_utilization"] == 0.3
    # a level given as a rate is stated on this machine too
    assert levels["peak"]["utilization"] == 0.8 and levels["peak"]["target_utilization"] is None
    md = render_markdown(doc)
    assert "2 req/s sustained" in md and "| off | 0.6 |" in md
    assert "Cross-check: 15 of 16 requests open-loop at 2 req/s" in md
    assert "at worst 2.00x its limit (simulated p90 code 2.00 s; measured code 2.40 s)" in md
    assert "overshot a limit 2.00x" in md
    assert "capacity 2 req/s (probed)" in summary(doc, [], 60.0)
    assert "off 0.6 req/s (0.30 of capacity)" in summary(doc, [], 60.0)


def test_without_a_probe_utilization_is_not_measured_never_guessed() -> None:
    doc = to_document(analyze(_pilot(None)))
    assert validate(doc) == []
    assert doc["capacity"]["probe"] is None
    assert all(lv["utilization"] is None for lv in doc["capacity"]["levels"])
    assert "Capacity not probed" in render_markdown(doc)
    assert "capacity not probed" in summary(doc, [], 60.0)


DEFAULT = Path(__file__).resolve().parent.parent / "src" / "specpilot" / "data" / "pilots"


def test_more_episodes_of_utilization_phases_need_the_capacity(tmp_path, capsys) -> None:
    """``--episodes N`` scales each phase by the seconds its arrivals play, which for a
    utilization depend on the capacity: asked for without one, then planned with one."""
    text = (DEFAULT / "default.yaml").read_text()
    text = text.replace("../traces/", (DEFAULT.parent / "traces").as_posix() + "/")
    text = text[: text.index("\nquick:")] + "\n"  # its quick profile gives rates
    text = text.replace("fit_budget: true", "fit_budget: false")  # the file's lengths, scaled
    f = tmp_path / "u.yaml"
    f.write_text(text)
    assert main(["pilot", str(f), "--dry-run", "--episodes", "20"]) == 2
    err = capsys.readouterr().err
    assert "phase 'off_peak' gives target_utilization" in err and "--capacity RPS" in err, err
    args = ["pilot", str(f), "--dry-run", "--json", "--episodes", "20", "--capacity", "3"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    off = next(p for p in plan["schedule"]["phases"] if p["name"] == "off_peak")
    assert off["duration_s"] == pytest.approx(600 * 20 / 14, abs=0.1)
    assert plan["episodes"]["per_level"] == 20


def _util_example(tmp_path: Path) -> Path:
    text = EXAMPLE.read_text().replace(
        "arrival: {kind: poisson, rate: 0.5}", "arrival: {kind: poisson, target_utilization: 0.5}"
    )
    f = tmp_path / "p.yaml"
    f.write_text(text)
    return f


@pytest.mark.parametrize("given", ["0", "-1"])
def test_a_capacity_not_above_zero_is_refused_naming_the_option(tmp_path, capsys, given) -> None:
    f = _util_example(tmp_path)
    assert main(["pilot", str(f), "--dry-run", "--capacity", given]) == 2
    err = capsys.readouterr().err
    assert f"--capacity {float(given):g}" in err and "above 0" in err and "Traceback" not in err


def test_the_dry_run_refuses_what_the_run_refuses(tmp_path, capsys) -> None:
    """capacity_probe: false beside a utilization: refused by --dry-run too, at its line."""
    f = _util_example(tmp_path)
    text = f.read_text().replace("\nload: {", "\nload: {capacity_probe: false, ", 1)
    f.write_text(text)
    assert main(["pilot", str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "capacity_probe is false" in err and "Traceback" not in err, err


def test_a_resumed_pilot_keeps_the_capacity_it_measured(tmp_path) -> None:
    """The schedule of a resumed pilot is rebuilt at the capacity stored when it started (the
    probe is not rerun: a second figure would give another schedule); another config's
    figure is never taken."""
    from specpilot.pilot.config.file import load_pilot
    from specpilot.pilot.run.record import stored_capacity
    from specpilot.store import Store

    cfg = load_pilot(_util_example(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    stored = {"method": "probe", "sustainable_rps": 1.7, "arm": "baseline"}
    with Store(out / "pilot.duckdb") as store:
        store.add_pilot(
            PilotRecord("p1", cfg.name, {}, cfg.sha256(), "0", 0.0, schedule={"capacity": stored})
        )
    assert stored_capacity(out / "pilot.duckdb", cfg.sha256()) == stored
    other = tmp_path / "other"
    other.mkdir()
    with Store(other / "pilot.duckdb") as store:
        store.add_pilot(
            PilotRecord("p2", cfg.name, {}, "0" * 64, "0", 0.0, schedule={"capacity": stored})
        )
    assert stored_capacity(other / "pilot.duckdb", cfg.sha256()) is None


def test_a_given_capacity_is_said_to_be_given_not_probed() -> None:
    given = {"method": "given on the command line (--capacity), not measured",
             "sustainable_rps": 2.0, "arm": "baseline", "given": True}  # fmt: skip
    doc = to_document(analyze(_pilot(given)))
    assert validate(doc) == []
    text = summary(doc, [], 60.0)
    assert "capacity 2 req/s (given, not measured)" in text and "probed" not in text
    assert "as given on the command line (--capacity), not measured" in render_markdown(doc)
