"""Two runs of one schedule compared (``report.compare``): each cell's outcome and interval
before and now, the frozen settings that changed, the schedule's first differing request, and
the "Compared with the previous run" section a rerun's report builds from its pilot record.

The runs are ``pilot_cases`` pilots (seeded, no model): the same slots with the speculative
arm's factor moved, so which cell changed outcome is known by construction.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pilot_cases import Cell, case
from specpilot.report import build_report
from specpilot.report.compare import (
    compare,
    first_difference,
    schedule_fingerprint,
    summary_of,
)
from specpilot.report.schema import validate
from specpilot.report.sections_previous import markdown

CELLS = {("code", "peak"): Cell(spec=0.7, n=40), ("zh", "peak"): Cell(spec=0.7, n=40)}


def _schedule(n: int = 6, prompt: str = "p") -> dict[str, Any]:
    return {
        "version": 1,
        "name": "w",
        "seed": 7,
        "config_sha256": "c",
        "phases": [{"name": "peak", "requests": n, "duration_s": 3.0}],
        "groups": {},
        "stages": {},
        "requests": [
            {
                "index": i,
                "phase": "peak",
                "group": "code",
                "prompt_id": f"{prompt}-{i}",
                "send_t": i * 0.5,
                "messages": [{"role": "user", "content": f"q{i}"}],
            }
            for i in range(n)
        ],
    }


def _doc(spec_code: float = 0.7, schedule: dict[str, Any] | None = None, **pilot: Any) -> Any:
    cells = {**CELLS, ("code", "peak"): Cell(spec=spec_code, n=40)}
    data = case(cells, alternative=False, control=False)
    data.pilot.schedule = copy.deepcopy(schedule if schedule is not None else _schedule())
    for k, v in pilot.items():
        setattr(data.pilot, k, v)
    return data


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    return build_report(_doc(), plots=False).document


def test_a_run_against_itself_keeps_every_cell_and_setting(before: dict[str, Any]) -> None:
    s = summary_of(before)
    cmp = compare(s, s)
    assert cmp["schedule"]["same"] is True and cmp["schedule"]["requests"] == 6
    assert cmp["cells"] and all(c["same_outcome"] for c in cmp["cells"])
    assert cmp["frozen_changes"] == [] and cmp["frozen_unchanged"] > 0
    assert cmp["config_changes"] == []
    decided = [c for c in cmp["cells"] if c["before"]["outcome"] in ("faster", "slower")]
    assert decided, cmp["cells"]  # the case decides its cells: the count below means something
    assert cmp["text"].startswith(f"{len(decided)} of the {len(decided)} cells decided before")


def test_a_cell_that_moved_shows_both_intervals_and_the_frozen_change(
    before: dict[str, Any],
) -> None:
    after_data = _doc(spec_code=1.3)
    for run in after_data.arms:  # every process of the speculative arm: an engine upgrade
        if run.arm == "spec":
            run.manifest = {
                **run.manifest,
                "engine_version": "0.2.0",
                "models": [{"role": "target", "sha256": "new"}],
            }
    after = build_report(after_data, plots=False).document
    cmp = compare(summary_of(before), summary_of(after), given=["arms.spec.options.k=4"])
    by = {(c["candidate"], c["group"]): c for c in cmp["cells"]}
    code, zh = by[("spec", "code")], by[("spec", "zh")]
    assert (code["before"]["outcome"], code["after"]["outcome"]) == ("faster", "slower")
    assert code["same_outcome"] is False and zh["same_outcome"] is True
    assert code["before"]["estimate"] < 0 < code["after"]["estimate"]
    changed = {(f["arm"], f["setting"]): (f["before"], f["after"]) for f in cmp["frozen_changes"]}
    assert changed[("spec", "engine version")] == (None, "0.2.0")
    assert changed[("spec", "target sha256")] == (None, "new")
    text = "\n".join(markdown(cmp))
    row = next(ln for ln in text.splitlines() if ln.startswith("| spec | base | peak | code |"))
    lo, hi = code["before"], code["after"]
    assert f"{lo['estimate']:+.1%} [{lo['low']:+.1%}, {lo['high']:+.1%}]" in row
    assert f"{hi['estimate']:+.1%} [{hi['low']:+.1%}, {hi['high']:+.1%}]" in row
    assert row.rstrip(" |").endswith("changed")
    assert "--set arms.spec.options.k=4" in text


def test_a_rerun_report_holds_the_section_and_specpilot_report_rebuilds_it(
    before: dict[str, Any],
) -> None:
    """The previous run's summary stored with the rerun's schedule is what builds the section:
    rebuilding the report from the records alone gives it again."""
    sched = {
        **_schedule(),
        "previous_run": {"summary": summary_of(before), "given": [], "change": "nothing"},
    }
    rep = build_report(_doc(spec_code=1.3, schedule=sched), plots=False)
    cmp = rep.document["previous_run"]
    assert cmp is not None and cmp["schedule"]["same"] is True
    assert cmp["previous"]["pilot_id"] == before["pilot"]["pilot_id"]
    assert any(c["same_outcome"] is False for c in cmp["cells"])
    assert "## Compared with the previous run" in rep.markdown
    assert 'id="previous-run"' in rep.html and "outcome before" in rep.html
    assert "Changed for this run: nothing." in rep.markdown
    # a pilot that is not a rerun: no section
    assert before["previous_run"] is None
    pytest.importorskip("jsonschema")
    assert validate(rep.document) == [] and validate(before) == []


def test_the_first_differing_request_is_named() -> None:
    a = schedule_fingerprint(_schedule())
    assert a is not None and first_difference(a, a) is None
    moved = _schedule()
    moved["requests"][3]["prompt_id"] = "other"
    b = schedule_fingerprint(moved)
    assert b is not None
    said = first_difference(a, b)
    assert said is not None and said.startswith("request peak-000003:")
    assert "prompt p-3" in said and "prompt other" in said
    # the same slot, other words sent
    worded = _schedule()
    worded["requests"][2]["messages"][0]["content"] = "changed"
    said = first_difference(a, schedule_fingerprint(worded) or {})
    assert said is not None and said.startswith("request peak-000002 (") and "differs" in said
    # one more request in the second
    longer = schedule_fingerprint(_schedule(n=7))
    said = first_difference(a, longer or {})
    assert said is not None and "peak-000006" in said and "second only" in said


def test_the_pilots_additions_are_not_the_schedule() -> None:
    """The design, capacity figures and a rerun's previous-run summary stored beside the
    requests do not make it another schedule."""
    a = schedule_fingerprint(_schedule())
    b = schedule_fingerprint({**_schedule(), "design": {"x": 1}, "previous_run": {"y": 2}})
    assert a is not None and b is not None and a["sha256"] == b["sha256"]
