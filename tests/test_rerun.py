"""``specpilot rerun`` end to end (issue 51 item 4): a finished pilot measured again on its
stored schedule reproduces the outcome of every cell it decided, and its report sets each cell's
interval beside the previous run's; ``specpilot diff`` prints the same table, and ``specpilot
report`` rebuilds the section from the new pilot file alone.

The pilot is small on purpose (~30 s a run here): two arms given by URL, each on three replicas
of the tests' tiny engine (SmolLM2's tokenizer, random weights), one load level in 10 episodes,
and a planted x3 slowdown through the baseline's processes, which every run must find. The
baseline reaches the engines through a proxy that makes every latency 10x, so the candidate is
faster for real: two arms alike would get a direction by chance in about 1 pilot in 20, which no
rerun reproduces. The default pilot takes ~9 minutes; ``test_rerun_plan.py`` checks its rerun's
plan (the same schedule, capacity figures and deadlines; its workload files found) without
running engines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specpilot.cli import main
from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.loadgen.dilate import DilatingProxy
from specpilot.serve import ServerConfig, create_app
from specpilot.store import read_pilot
from test_server import MODEL, TOKEN, LiveServer, make_engine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PILOT = """\
name: rerun-e2e
workload:
  seed: 1
  groups: {{structured: {{output: {{mean: 4}}}}}}
  phases: [{{name: peak, duration_s: 6, arrival: {{kind: constant, rate: 4}}}}]
episodes: {{per_level: 12, processes: 4, planted: 2.0}}
arms:
  - {{name: base, role: baseline, engine: openai, urls: {base}}}
  - {{name: spec, role: speculative, engine: openai, urls: {spec}}}
quality: {{greedy_prompts: 1, sampled_prompts: 1, samples: 2}}
compat: {{enabled: false}}
drill: {{enabled: false}}
"""
DECIDED = ("faster", "slower", "no_difference")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, list[str]]]:
    """Four tiny engines; the baseline reaches each through a proxy that makes every latency
    10x (``loadgen.dilate``), the candidate directly: a real effect of -90%. The processes here
    are servers in this one Python process, so they differ a lot (one clean-clone run left a
    -75% effect at -57% [-84%, +19%] on 2.8 degrees of freedom): -90% (log -2.3) is decided on
    any split of that noise, -75% (log -1.4) was not."""
    tok = load_tokenizer(default_target_path())
    app = ServerConfig(model_name=MODEL, admin_token=TOKEN)
    live = [LiveServer(create_app(app, engine=make_engine(tok, draft=False))) for _ in range(4)]
    slow = [DilatingProxy(s.url, 9.0).start() for s in live]
    yield {"base": [p.url + "/v1" for p in slow], "spec": [s.url + "/v1" for s in live]}
    for p in slow:
        p.stop()
    for s in live:
        s.stop()


def _cells(doc: dict) -> dict[tuple[str, str, str], dict]:
    return {(c["candidate_arm"], c["phase"], c["task_group"]): c for c in doc["comparisons"]}


def test_a_rerun_reproduces_the_decided_cells_and_sets_the_intervals_side_by_side(
    servers: dict[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("CI", "1")  # plain progress lines
    path = tmp_path / "p.yaml"
    path.write_text(
        PILOT.format(base=json.dumps(servers["base"]), spec=json.dumps(servers["spec"]))
    )
    before, after = tmp_path / "before", tmp_path / "after"
    assert main(["pilot", str(path), "--out", str(before), "--quiet"]) == 0
    capsys.readouterr()
    path.unlink()  # the rerun reads the config from the pilot file, not from the YAML
    assert main(["rerun", str(before), "--out", str(after), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "Compared with the previous run" in printed

    old = json.loads((before / "report.json").read_text())
    new = json.loads((after / "report.json").read_text())
    # the same schedule, seed and config; a new pilot
    assert new["pilot"]["schedule"] == old["pilot"]["schedule"]
    assert new["pilot"]["config_sha256"] == old["pilot"]["config_sha256"]
    assert new["pilot"]["pilot_id"] != old["pilot"]["pilot_id"]
    # the pilot recorded where its workload's relative paths start (its file's folder)
    recorded = read_pilot(before / "pilot.duckdb").pilot.schedule["workload_dir"]
    assert Path(recorded) == tmp_path.resolve()
    stored = read_pilot(after / "pilot.duckdb").pilot
    assert stored.status == "complete"
    assert any(n.startswith(f"rerun of {old['pilot']['pilot_id']}") for n in stored.notes)

    # every cell the original decided has the same outcome now
    was, now = _cells(old), _cells(new)
    decided = {k: c["outcome"] for k, c in was.items() if c["outcome"] in DECIDED}
    assert decided.get(("planted", "peak", "*")) == "slower", was
    assert decided.get(("spec", "peak", "*")) == "faster", was
    assert {k: now[k]["outcome"] for k in decided} == decided

    # the section: each cell's interval before and now, side by side
    cmp = new["previous_run"]
    assert cmp["previous"]["pilot_id"] == old["pilot"]["pilot_id"]
    assert cmp["schedule"]["same"] is True and cmp["change"] == "nothing: the same config"
    assert cmp["config_changes"] == []
    by = {(c["candidate"], c["phase"], c["group"]): c for c in cmp["cells"]}
    assert set(by) == set(was)
    md = (after / "report.md").read_text().split("## Compared with the previous run")[1]
    html = (after / "report.html").read_text()
    for k, c in by.items():
        iv_old, iv_new = was[k]["task_rel_change"], now[k]["task_rel_change"]
        assert c["before"]["estimate"] == pytest.approx(iv_old["estimate"], abs=1e-6)
        assert c["after"]["estimate"] == pytest.approx(iv_new["estimate"], abs=1e-6)
        row = next(
            ln for ln in md.splitlines() if ln.startswith(f"| {k[0]} | base | {k[1]} | {k[2]} |")
        )
        assert f"{iv_old['estimate']:+.1%}" in row and f"{iv_new['estimate']:+.1%}" in row
    assert 'id="previous-run"' in html and "task time change before [CI]" in html

    # specpilot diff prints the same table; specpilot report rebuilds the section from the file
    assert main(["diff", str(before / "report.json"), str(after / "report.json")]) == 0
    table = capsys.readouterr().out
    assert table.count("| planted | base | peak |") == len([k for k in by if k[0] == "planted"])
    rebuilt = tmp_path / "rebuilt"
    assert main(["report", str(after / "pilot.duckdb"), "--out", str(rebuilt), "--no-plots"]) == 0
    again = json.loads((rebuilt / "report.json").read_text())["previous_run"]
    assert again["cells"] == cmp["cells"]
