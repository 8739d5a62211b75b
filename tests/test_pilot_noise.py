"""The noise a machine has shown, kept between pilots (pilot.plan.noise), and the planner that
predicts the next pilot's power from it (``specpilot pilot --dry-run``)."""

from __future__ import annotations

import json

import pytest

from specpilot.backends.facts import hardware_info
from specpilot.pilot.config.file import default_pilot_path, load_pilot
from specpilot.pilot.plan.noise import (
    PRIOR_EPISODE_SD,
    components,
    episode_plan,
    machine_key,
    measured,
    noise_file,
    remember,
)


def _doc(hw: dict, planted_sd: float, spec_sd: float) -> dict:
    def cell(arm: str, phase: str, group: str, sd: float | None) -> dict:
        noise = None
        if sd is not None:
            noise = {
                "process_sd": [0.01, 0.02],
                "episode_sd": sd,
                "episodes": 12,
                "processes": [3, 3],
                "pairs_per_episode": 4.5,
                "se": sd / 12**0.5,
                "df": 8.0,
            }
        return {"candidate_arm": arm, "phase": phase, "task_group": group, "episode_noise": noise}

    comparisons = [
        cell(arm, phase, group, sd if group == "*" else 0.5)
        for arm, sd in (("planted", planted_sd), ("speculative", spec_sd))
        for phase in ("off_peak", "peak")
        for group in ("code", "*")
    ]
    return {
        "hardware": hw,
        "pilot": {"name": "p", "config_sha256": "abc"},
        "planted": [{"arm": "planted"}],
        "comparisons": comparisons,
    }


HW = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "avx512f", "sse"], "cpu_logical_cores": 2}


def test_remember_keeps_the_pooled_cells_per_machine_and_the_planner_pools_the_newest(tmp_path):
    path = tmp_path / "noise" / "measured.jsonl"
    assert remember(_doc(HW, 0.08, 0.15), path) == 4  # 2 arms x 2 levels, pooled cells only
    assert remember(_doc(HW, 0.10, 0.20), path) == 4
    other = {**HW, "cpu_model": "Intel Xeon"}
    assert remember(_doc(other, 0.5, 0.5), path) == 4
    path.write_text(path.read_text() + "{not json\n")  # a torn line is skipped, never an error
    entry = measured(machine_key(HW), path)
    assert entry is not None and entry["machine"] == "AMD EPYC | avx2/avx512f | 2 cores"
    planted = components(entry, "anything", "planted")
    spec = components(entry, "speculative", "candidate")
    # the newest LAST pilots of this machine pooled (root mean square over their cells)
    assert planted is not None and planted["s_xi"] == pytest.approx(
        (0.08**2 / 2 + 0.10**2 / 2) ** 0.5
    )
    assert spec is not None and spec["s_xi"] == pytest.approx((0.15**2 / 2 + 0.20**2 / 2) ** 0.5)
    assert entry["pilot"] == "2 pilots, newest p"
    newest = measured(machine_key(HW), path, last=1)
    assert newest is not None and components(newest, "x", "planted")["s_xi"] == pytest.approx(0.10)
    assert spec["s_b"] == pytest.approx(0.02) and spec["pairs_per_episode"] == 4.5
    assert components(entry, "another-arm", "candidate") is None  # a candidate's own, by name
    assert measured("Some other CPU | avx2 | 2 cores", path) is None
    # a pilot measured on a machine other work loaded unevenly teaches the planner nothing
    lines = path.read_text().count("\n")
    assert remember(_doc(HW, 0.5, 0.5), path, shared=("b/peak: 0.90 cores used",)) == 0
    assert path.read_text().count("\n") == lines
    no_episodes = {
        **_doc(HW, 0.1, 0.1),
        "comparisons": [{"task_group": "*", "episode_noise": None}],
    }
    assert remember(no_episodes, path) == 0


def test_the_planner_predicts_from_this_machines_measured_noise(tmp_path, monkeypatch):
    """Without a measurement the stated prior; with one, that machine's noise, named as such;
    a noisier arm is predicted a larger smallest detectable effect and a wider interval."""
    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path))
    cfg = load_pilot(default_pilot_path())
    before = episode_plan(cfg)
    assert before is not None
    assert {r["source"] for r in before["predicted"]} == {"prior"}
    assert before["predicted"][0]["episode_sd"] == PRIOR_EPISODE_SD
    remember(_doc(hardware_info(), 0.06, 0.20))
    assert noise_file().is_file() and noise_file().parent.parent == tmp_path
    after = episode_plan(cfg)
    assert after is not None
    got = {r["arm"]: r for r in after["predicted"]}
    assert got["planted"]["source"].startswith("measured here") and got["planted"][
        "episode_sd"
    ] == pytest.approx(0.06)
    assert got["speculative"]["mde"] > got["planted"]["mde"]
    # per load level where that level was measured (_doc measures both levels alike)
    assert set(got["planted"]["by_level"]) == {"off_peak", "peak"}
    assert got["planted"]["by_level"]["peak"]["mde"] == pytest.approx(got["planted"]["mde"])
    assert got["speculative"]["half_width"] > got["planted"]["half_width"]
    assert 0.9 < after["deciding_level"] < 0.995  # a pooled level's share of alpha
    json.dumps(after)  # the plan is printed and can be saved as JSON
