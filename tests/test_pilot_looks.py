"""The episode design's looks and budget as the runner executes them (``pilot.run.looks``): a real
episode pilot with an interim look (builtin engines, 2 processes per arm), the budget's
trimming on a real ETA clock and pilot file, and the refusals before anything runs."""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest
import yaml

from pilot_cases import at_fixed_rates
from specpilot.analysis.episodes.sequential import spent
from specpilot.cli import main
from specpilot.errors import ConfigError
from specpilot.pilot.eta.remaining import EtaClock, Step, load_key
from specpilot.pilot.run.looks import BELOW_LEAST, Looks, blocks, least
from specpilot.records import HardwareFacts, PilotRecord
from specpilot.store import Store

DEFAULT = Path(__file__).resolve().parent.parent / "examples" / "pilot-default.yaml"


def _config(tmp_path: Path, **episodes) -> Path:
    data = at_fixed_rates(yaml.safe_load(DEFAULT.read_text()))
    data["episodes"] = {**data["episodes"], **episodes}
    for p in data["workload"]["phases"]:  # the traces relative to the example
        p["arrival"]["path"] = str((DEFAULT.resolve().parent / p["arrival"]["path"]).resolve())
    f = tmp_path / "pilot.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def test_a_budget_too_small_for_the_least_pilot_is_refused_before_any_start(tmp_path, capsys):
    rc = main(["pilot", str(_config(tmp_path)), "--budget", "0.5", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert "episodes.budget_min 0.5:" in err and "11 episodes per level" in err
    assert "-> set episodes.budget_min (or --budget) to at least" in err
    con = duckdb.connect(str(tmp_path / "o" / "pilot.duckdb"), read_only=True)
    assert con.execute("select count(*) from arms").fetchall() == [(0,)]  # nothing started


def test_every_pilot_takes_a_budget_even_its_quick_profile(capsys):
    rc = main(["pilot", "--quick", "--budget", "5", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "budget 5 min: the last episodes are dropped" in out


@pytest.mark.parametrize(
    ("looks", "why"),
    [([8, 8], "increasing order"), ([14], "between 10 and 13"), ([6], "between 10 and 13")],
)
def test_looks_outside_the_design_are_refused_by_field(tmp_path, capsys, looks, why):
    rc = main(["pilot", str(_config(tmp_path, looks=looks)), "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and "episodes.looks" in err and why in err, err


def test_looks_that_cannot_fit_the_design_say_so(tmp_path, capsys):
    f = _config(tmp_path, processes=8, per_level=14, looks=[8])
    assert main(["pilot", str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "no look fits 14 episodes per level on 8 processes" in err
    assert "raise per_level above 16, or remove episodes.looks" in err


@contextlib.contextmanager
def _looks(tmp_path: Path, design: dict, spent_s: float = 0.0):
    """``Looks`` over ``design`` with a real ETA clock (every episode's load on runs a and b,
    10 s each by the plan) and a real pilot file; ``spent_s`` already spent by the pilot."""
    order = [n for b in blocks(design) for n in b]
    plan = [Step(load_key(r, [n]), "load", "builtin", r, sched_s=10.0) for n in order for r in "ab"]
    clock = EtaClock(plan=list(plan))
    with Store(tmp_path / "p.duckdb") as store:
        rec = PilotRecord("p", "p", {}, "", "0", 0.0, hardware=HardwareFacts(cpu_model="x"))
        store.add_pilot(PilotRecord(**{**rec.__dict__, "schedule": {"design": design}}))
        notes: list[str] = []
        ctx = SimpleNamespace(
            progress=SimpleNamespace(clock=clock, note=notes.append, notes=notes),
            started=time.perf_counter() - spent_s,
            store=store,
            cfg=SimpleNamespace(analysis=SimpleNamespace(ci_level=0.95)),
        )
        yield Looks(ctx, design, lambda n: [load_key(r, [n]) for r in "ab"]), ctx, order


def _design(per_level: int, processes: int, looks: list[int], budget: float | None) -> dict:
    levels = {lv: [f"{lv}~{k + 1:02d}" for k in range(per_level)] for lv in ("off", "peak")}
    return {
        "processes": processes,
        "levels": levels,
        "looks": {"at": [*looks, per_level], "alpha": 0.05, "budget_min": budget, "ran": []},
    }


def test_the_budget_drops_past_the_least_first_then_holds_with_the_least_too(tmp_path):
    design = _design(per_level=8, processes=2, looks=[4], budget=2.0)
    order = [n for b in blocks(design) for n in b]
    assert order[:4] == ["off~01", "peak~01", "off~02", "peak~02"]  # levels interleaved
    # every episode's load on 2 runs, so 16 episodes x 20 s = 320 s; 30 s spent before them
    with _looks(tmp_path, design, spent_s=30.0) as (looks, ctx, _):
        clock, store = ctx.progress.clock, ctx.store
        kept = []
        for i, name in enumerate(order):  # the runner's walk, each episode taking its 20 s
            looks.trim(order[i:])
            if looks.runs(name):
                kept.append(name)
                clock.done.update({load_key(r, [name]): 10.0 for r in "ab"})
                ctx.started -= 20.0
            if i == 0:  # the ETA from priors says 350 s of 120, but nothing is dropped early
                assert not looks.skipped
        # 120 s budget (+10%: 132 s), 30 spent, 20 s an episode: the least, 6 episodes per
        # level, would take 270 s, so 5 of its 12 run (130 s) and the note names the budget
        # the least needs here; every episode past the least is dropped first
        assert len(kept) == 5 and 2 * least(design) == 12
        assert kept == order[: len(kept)]  # the last dropped first, the levels alike
        assert set(looks.skipped) == set(order[len(kept) :])
        assert {n for n, why in looks.skipped.items() if why == BELOW_LEAST} == set(order[5:12])
        assert {n for n, why in looks.skipped.items() if why == "budget"} == set(order[12:])
        assert looks.lk["least_needs_min"] == pytest.approx(4.5, abs=0.05)
        notes = ctx.progress.notes
        assert any(re.search(r"--budget 4\.[56] runs it", n) for n in notes), notes
        assert clock.eta_s() == 0.0  # out of the ETA too
        stored = store.records("pilots")[0].schedule["design"]["looks"]
        assert stored["skipped"] == looks.skipped  # in the pilot file as it happens


def test_a_budget_that_holds_the_rest_drops_nothing(tmp_path):
    design = _design(per_level=8, processes=2, looks=[4], budget=60.0)
    with _looks(tmp_path, design) as (looks, _ctx, order):
        for i in range(len(order)):
            looks.trim(order[i:])
        assert not looks.skipped


@pytest.mark.slow
def test_an_episode_pilot_looks_after_its_first_block_and_reports_at_the_last_looks_level(
    tmp_path, capsys
):
    f = _config(tmp_path, per_level=6, processes=2, looks=[4], budget_min=None)
    data = yaml.safe_load(f.read_text())
    data["workload"]["phases"][0]["duration_s"] = 9
    data["workload"]["phases"][1]["duration_s"] = 6
    for g in data["workload"]["groups"].values():
        g["output"] = {"mean": 8, "dist": "fixed", "min": 8, "max": 8}
    data["drill"] = {"enabled": False}
    data["compat"] = {"enabled": False}
    data["quality"] = {"greedy_prompts": 1, "greedy_max_tokens": 8, "sampled_prompts": 1,
                       "samples": 2, "sampled_max_tokens": 8}  # fmt: skip
    f.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    rc = main(["pilot", str(f), "--out", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err[-3000:]
    assert "\nlooks: look 1 after off_peak 4, peak 4 episodes" in capsys.readouterr().out
    con = duckdb.connect(str(out / "pilot.duckdb"), read_only=True)
    (schedule,) = con.execute("select schedule from pilots").fetchone()
    design = (json.loads(schedule) if isinstance(schedule, str) else schedule)["design"]
    looks = design["looks"]
    (look,) = looks["ran"]
    assert look["look"] == 1 and look["episodes"] == {"off_peak": 4, "peak": 4}
    assert look["alpha"] == pytest.approx(spent(4 / 6, 0.05))
    final = looks["final"]
    assert final["alpha"] == pytest.approx(0.05 - look["alpha"])
    for lv in ("off_peak", "peak"):  # every episode ran, or was dropped with its reason
        dropped = sum((final["not_run"].get(lv) or {}).values())
        assert final["episodes"][lv] + dropped == len(design["levels"][lv])  # 6, or fewer
        # where a slice with no arrival joined the next (pilot.design.split_schedule)
        assert (lv in look["closed"]) == bool(dropped)
    ran = {
        r[0] for r in con.execute("select distinct phase from requests where not warmup").fetchall()
    }
    assert not ran & set(looks.get("skipped") or {})  # a dropped episode has no record
    assert con.execute("select count(*) from arms where status <> 'complete'").fetchall() == [(0,)]
    # in place (the default pilot's design): the baseline and the planted arm ran on the
    # speculative processes with speculation off, the speculative arm with it on, every request
    served = dict(
        con.execute(
            "select arm, list(distinct served_k) from requests where not warmup group by arm"
        ).fetchall()
    )
    assert served == {"baseline": [0], "planted": [0], "speculative": [3]}, served
    arms = {r[0]: json.loads(r[1]) if isinstance(r[1], str) else r[1] for r in con.execute(
        "select run_id, manifest from arms").fetchall()}  # fmt: skip
    base = {k: m for k, m in arms.items() if ".baseline." in k}
    assert base and all(
        m["within"]["of_run"].split(".")[-2] == "speculative" for m in base.values()
    )
    assert all(m["capacity"] == arms[m["within"]["of_run"]]["capacity"] for m in base.values())
    rss = con.execute(
        "select count(*) from snapshots where arm = 'baseline' and rss_bytes is not null"
    )
    assert rss.fetchall() == [(0,)]  # the process's memory is the speculative arm's, not its
    doc = json.loads((out / "report.json").read_text())
    assert doc["sequential"]["lines"][0].startswith("look 1 after off_peak 4, peak 4 episodes")
    assert doc["analysis_config"]["ci_level"] == pytest.approx(1 - final["alpha"])
    assert "Sequential looks" in (out / "report.md").read_text()


def test_the_budget_is_left_out_of_the_config_hash_so_a_rerun_with_another_resumes(tmp_path):
    from specpilot.pilot.config.file import load_pilot
    from specpilot.pilot.config.sizing import with_budget

    cfg = load_pilot(_config(tmp_path))
    assert with_budget(cfg, 30.0).sha256() == cfg.sha256() == with_budget(cfg, 5.0).sha256()
    assert with_budget(cfg, 30.0).episodes.budget_min == 30.0


def test_episodes_scales_the_levels_so_each_episode_keeps_its_length(tmp_path, capsys):
    from specpilot.pilot.config.file import load_pilot
    from specpilot.pilot.config.sizing import with_episodes

    cfg = load_pilot(_config(tmp_path))
    wide = with_episodes(cfg, 40, tmp_path)
    assert wide.episodes.per_level == 40 and cfg.episodes.per_level == 14
    f = 40 / 14
    assert wide.episodes.budget_min == pytest.approx(cfg.episodes.budget_min * f, abs=0.01)
    for a, b in zip(cfg.workload_config().phases, wide.workload_config().phases, strict=True):
        assert b.duration_s / 40 == pytest.approx(a.duration_s / 14, abs=1e-3)
    assert wide.sha256() != cfg.sha256()  # other episodes: not a resume of this pilot
    rc = main(["pilot", str(_config(tmp_path)), "--episodes", "40", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "40 episodes per load level" in out, out[-2000:]
    off = cfg.workload_config().phases[0]
    assert f"{off.name} {off.duration_s * f:g}s x" in out, out[-2000:]
    # where the phases cannot grow as asked, refused by what is in the way
    data = yaml.safe_load(_config(tmp_path).read_text())
    data["workload"]["phases"][0]["arrival"]["window"] = [0.0, 5.0]  # a trace window: 17 s
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"arrivals end at 17 s, before the 24.286 s") as exc:
        with_episodes(load_pilot(short), 20, tmp_path)
    assert "at most 14" in str(exc.value.fix)
    del data["workload"]["phases"][0]["duration_s"]
    short.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="takes its length from its arrivals"):
        with_episodes(load_pilot(short), 20, tmp_path)
    wl = tmp_path / "workload.yaml"
    wl.write_text(yaml.safe_dump(yaml.safe_load(_config(tmp_path).read_text())["workload"]))
    data = yaml.safe_load(_config(tmp_path).read_text())
    data["workload"] = str(wl)
    short.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="the workload is a file of its own"):
        with_episodes(load_pilot(short), 20, tmp_path)
    with pytest.raises(ConfigError, match=r"the drill's phase 'peak' would last 3\.14286 s"):
        with_episodes(cfg, 2, tmp_path)  # 22 s x 2 / 14, under the drill's 3 + 5 + 4 s
    fewer = with_episodes(cfg, 8, tmp_path)
    assert fewer.drill.replay_s == cfg.drill.replay_s == 14
    assert fewer.episodes.budget_min == cfg.episodes.budget_min  # never shrunk
    data = yaml.safe_load(_config(tmp_path).read_text())
    data["drill"]["replay_s"] = None  # the whole phase: the seconds it replays now
    del data["quick"]  # its phases are traces: steps here would not merge with them
    steps = {"kind": "steps", "steps": [{"duration_s": 22, "rate": 2}]}
    data["workload"]["phases"][1]["arrival"] = steps
    short.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="arrives in steps"):
        with_episodes(load_pilot(short), 40, tmp_path)
    del data["workload"]["phases"][1]
    data["drill"]["phase"] = "off_peak"
    short.write_text(yaml.safe_dump(data))
    assert with_episodes(load_pilot(short), 40, tmp_path).drill.replay_s == 44
    # the embedded default, whose traces are relative to its own file, and its quick profile
    assert main(["pilot", "--episodes", "20", "--dry-run"]) == 0
    assert "20 episodes per load level" in capsys.readouterr().out
    assert main(["pilot", "--quick", "--episodes", "20", "--dry-run"]) == 0
    assert "1 process per arm, 20 episodes per load level" in capsys.readouterr().out
    # refused by name, before anything runs
    for argv, said in (
        (["--episodes", "150"], "--episodes 150: episodes.per_level: Input should be less"),
        (["--episodes", "1"], "--episodes 1: episodes.per_level: Input should be greater"),
    ):
        rc = main(["pilot", *argv, "--dry-run"])
        err = capsys.readouterr().err
        assert rc == 2 and said in err and "Traceback" not in err, err


def test_an_interrupted_runs_time_counts_against_the_budget(tmp_path):
    design = _design(per_level=8, processes=2, looks=[4], budget=2.0)
    design["looks"]["spent_s"] = 100.0  # the interrupted run took 100 s of the 120
    with _looks(tmp_path, design) as (looks, ctx, order):
        assert looks.spent_s() >= 100.0
        droppable_ones = order[2 * least(design) :]
        looks.trim(droppable_ones)  # the next episode is the first droppable one
        assert set(looks.skipped) == set(droppable_ones)
        looks.save()
        stored = ctx.store.records("pilots")[0].schedule["design"]["looks"]
        assert stored["spent_s"] >= 100.0  # carried to the next resume


def test_the_least_is_cut_only_at_measured_costs_and_every_level_keeps_an_episode(tmp_path):
    """A pilot already past its budget before its first episode (slow starts): nothing is
    dropped on priors alone; once an episode is measured the least's last episodes go, but
    never a level's first, so every level keeps one."""
    design = _design(per_level=8, processes=2, looks=[4], budget=2.0)
    order = [n for b in blocks(design) for n in b]
    with _looks(tmp_path, design, spent_s=500.0) as (looks, ctx, _):
        clock, kept = ctx.progress.clock, []
        for i, name in enumerate(order):
            looks.trim(order[i:])
            if i == 0:
                assert not looks.skipped  # the ETA is priors only: nothing measured yet
            if looks.runs(name):
                kept.append(name)
                clock.done.update({load_key(r, [name]): 10.0 for r in "ab"})
                ctx.started -= 20.0
        assert kept == ["off~01", "peak~01"]  # each level's first episode, nothing else
        assert looks.skipped["off~02"] == BELOW_LEAST and looks.skipped["off~08"] == "budget"


def test_the_check_before_the_run_allows_the_least_design_the_runs_own_slack():
    """The least design (2 processes: 4 episodes a level, 2 levels, runs a and b at 10 s each:
    160 s) over a budget by 5% runs (the run itself lets it past by up to 10%, then cuts); by
    15% it is refused, naming the budget that holds it with that slack."""
    from specpilot.pilot.eta.remaining import eta_s
    from specpilot.pilot.run.looks import SLACK, check_budget

    design = {**_design(per_level=8, processes=2, looks=[], budget=None), "per_level": 8}
    order = [n for b in blocks(design) for n in b]
    plan = [Step(load_key(r, [n]), "load", "builtin", r, sched_s=10.0) for n in order for r in "ab"]
    kept = [s for s in plan if s.key.rsplit(":", 1)[-1] not in set(order) - _least(design)]
    need = eta_s(kept, {})
    for over, refused in ((1.05, False), (1.15, True)):
        design["looks"]["budget_min"] = need / over / 60.0
        if not refused:
            check_budget(design, plan, 0.0)
            continue
        with pytest.raises(ConfigError, match=r"set episodes\.budget_min \(or --budget\)") as e:
            check_budget(design, plan, 0.0)
        smallest = float(re.search(r"at least ([\d.]+)", str(e.value)).group(1))
        assert smallest * 60.0 * (1 + SLACK) >= need - 6.0


def _least(design: dict) -> set[str]:
    n = least({**design, "in_place": False})
    return {names[k] for names in design["levels"].values() for k in range(n)}
