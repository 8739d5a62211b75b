"""Broken variants of a real example pilot (``examples/pilot-builtin-poisson.yaml``), each run
through ``specpilot pilot FILE --dry-run``: exit 2, no traceback, and the message carries
``FILE:LINE`` with the line of the offending field, the field's name, and a fix that says what
would work. Nothing starts: every variant is refused before an engine could.

Each case edits the example's text (``old`` -> ``new``, ``old`` found exactly once); the line
expected is the first line of the edited file holding ``at``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specpilot.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pilot-builtin-poisson.yaml"
TEXT = EXAMPLE.read_text()
BASE0 = "    options: {draft: null, threads: 1, max_slots: 4}\n  - name: speculative"
SPEC = '    options: {draft: "shipped:smollm2-135m-instruct-d4", k: 3, threads: 1, max_slots: 4}'
CONTROL = "  - name: control\n    role: control\n    engine: builtin\n"

# (id, old, new, at: the text on the line the message must name, field, fix: in the fix text)
CASES = [
    # -- the file itself
    ("empty-file", TEXT, "", "", "arms", "arms:"),
    ("comments-only", TEXT, "# nothing yet\n", "# nothing", "arms", "arms:"),
    ("yaml-unclosed-flow", SPEC, SPEC[:-1], SPEC[:-1], "options", "close"),
    ("yaml-tab-indent", "    role: control\n", "\trole: control\n", "\trole: control", "role", "spaces"),
    ("yaml-bad-indent", "    engine: builtin\n    options: {draft: null, threads: 1, max_slots: 4}\n\nload",
     "    engine: builtin\n      options: {draft: null}\n\nload", "      options: {draft: null}",
     "options", "indent"),
    ("top-level-list", TEXT, "- a\n- b\n", "- a", "(top level)", "name:"),
    ("top-level-scalar", TEXT, "just some words\n", "just some words", "(top level)", "name:"),
    # -- top-level fields
    ("unknown-field", "seed: 11\n", "seeds: 11\n", "seeds:", "seeds", "did you mean 'seed'"),
    ("misplaced-field", "seed: 11\n", "seed: 11\nthreads: 2\n", "threads: 2", "threads",
     "arms[].options"),
    ("name-type", "\nname: builtin-poisson\n", "\nname: [a, b]\n", "name: [a, b]", "name", "string"),
    ("name-pattern", "\nname: builtin-poisson\n", "\nname: my pilot\n", "name: my pilot", "name",
     "letters, digits"),
    ("seed-type", "seed: 11\n", "seed: eleven\n", "seed: eleven", "seed", "whole number"),
    ("seed-list", "seed: 11\n", "seed: [1]\n", "seed: [1]", "seed", "whole number"),
    # the retired measurement designs' keys: refused with the fix, never run
    ("design", "seed: 11\n", "seed: 11\ndesign: interleaved\n", "design: interleaved", "design",
     "remove design:"),
    ("repetitions", "seed: 11\n", "seed: 11\nrepetitions: 2\n", "repetitions: 2", "repetitions",
     "episodes.processes"),
    ("bool", "representative_traffic: false", "representative_traffic: maybe",
     "representative_traffic", "representative_traffic", "true or false"),
    ("missing-arms", TEXT[TEXT.index("arms:\n"):TEXT.index("\nload:") + 1], "", "name: builtin-poisson",
     "arms", "add it"),
    # -- the inline workload
    ("duration-zero", "duration_s: 40,", "duration_s: 0,", "duration_s: 0", "duration_s",
     "more than 0"),
    ("duration-negative", "duration_s: 80,", "duration_s: -80,", "duration_s: -80",
     "duration_s", "more than 0"),
    ("rate-zero", "rate: 0.5}", "rate: 0}", "rate: 0}", "rate", "more than 0"),
    ("rate-negative", "rate: 0.25}", "rate: -0.25}", "rate: -0.25", "rate", "more than 0"),
    ("rate-type", "rate: 0.25}", "rate: fast}", "rate: fast", "rate", "number"),
    ("arrival-kind", "kind: poisson, rate: 0.5", "kind: poison, rate: 0.5", "kind: poison",
     "kind", "poisson"),
    # a field of another arrival kind: never "did you mean 'window'?" for window itself
    ("arrival-other-kind", "kind: poisson, rate: 0.5", "kind: poisson, rate: 0.5, window: all",
     "window: all", "window", "'window' belongs to kind: trace"),
    ("trace-missing", "arrival: {kind: poisson, rate: 0.5}",
     "arrival: {kind: trace, path: no-such-trace.csv, window: all}", "no-such-trace.csv",
     "arrival.path", "relative path starts at"),
    ("phase-no-name", "{name: peak, duration_s: 40", "{duration_s: 40", "{duration_s: 40",
     "name", "add it"),
    ("group-weight", "code: {weight: 1,", "code: {weight: -1,", "code: {weight: -1",
     "weight", "0 or more"),
    ("output-mean-zero", "output: {mean: 72}}", "output: {mean: 0}}", "output: {mean: 0}",
     "mean", "1 or more"),
    ("workload-unknown-key", "  seed: 4\n", "  seed: 4\n  sead: 5\n", "sead: 5", "sead",
     "did you mean"),
    ("workload-file-missing", TEXT[TEXT.index("workload:\n"):TEXT.index("arms:\n")],
     "workload: no-such-workload.yaml\n\n", "workload: no-such", "workload", "path"),
    # -- arms
    ("engine-name", "    engine: builtin\n    options: {draft: null, threads: 1, max_slots: 4}\n"
     "    budget", "    engine: turbo\n    options: {draft: null, threads: 1, max_slots: 4}\n"
     "    budget", "engine: turbo", "engine", "builtin"),
    ("engine-missing", CONTROL, "  - name: control\n    role: control\n", "- name: control",
     "engine", "builtin"),
    ("role-bad", "role: control", "role: champion", "role: champion", "role",
     "'baseline'"),
    ("role-missing", CONTROL, "  - name: control\n    engine: builtin\n", "- name: control",
     "role", "add it"),
    ("duplicate-arm", "  - name: control\n", "  - name: alternative\n",
     "  - name: alternative\n    role: control", "name", "rename"),
    ("two-baselines", "    role: control\n", "    role: baseline\n", "role: baseline\n    engine: builtin\n    options: {draft: null, threads: 1, max_slots: 4}\n\nload",
     "role", "extra"),
    ("no-speculative", "    role: speculative\n", "    role: extra\n", "arms:\n", "arms",
     "role: speculative"),
    ("unknown-matched-against", "matched_against: speculative", "matched_against: speculatve",
     "matched_against: speculatve", "budget.matched_against", "speculative"),
    ("unknown-compare-to", CONTROL, CONTROL + "    compare_to: nobody\n", "compare_to: nobody",
     "compare_to", "baseline"),
    ("compare-to-itself", CONTROL, CONTROL + "    compare_to: control\n",
     "compare_to: control", "compare_to", "another arm"),
    ("one-arm", TEXT[TEXT.index("  - name: speculative"):TEXT.index("\nload:") + 1], "\n",
     "arms:", "arms", "speculative"),
    ("arm-name-pattern", "  - name: control\n", "  - name: the control\n", "name: the control",
     "name", "letters, digits"),
    # -- engine options
    ("k-negative", "k: 3,", "k: -3,", "k: -3", "k", "0 or more"),
    ("k-too-large", "k: 3,", "k: 99,", "k: 99", "k", "16 or less"),
    ("k-without-draft", BASE0, "    options: {draft: null, k: 2, threads: 1, max_slots: 4}\n"
     "  - name: speculative", "k: 2", "k", "draft"),
    ("threads-zero", BASE0, BASE0.replace("threads: 1", "threads: 0"), "threads: 0, max_slots",
     "threads", "1 or more"),
    ("slots-type", BASE0, BASE0.replace("max_slots: 4", "max_slots: four"), "max_slots: four",
     "max_slots", "whole number"),
    ("option-typo", BASE0, BASE0.replace("threads: 1", "thread: 1"), "thread: 1", "thread",
     "did you mean 'threads'"),
    ("draft-type", SPEC, SPEC.replace('"shipped:smollm2-135m-instruct-d4"', "3"), "draft: 3,",
     "draft", "string"),
    ("derive-literal", "derive: kv_slots", "derive: kv_slot", "derive: kv_slot", "derive",
     "'none' or 'kv_slots'"),
    ("target-missing", BASE0, BASE0.replace("{draft: null,", "{target: /no/such/model.gguf, draft: null,"),
     "target: /no/such/model.gguf", "target", "default target"),
    ("draft-missing", SPEC, SPEC.replace('"shipped:smollm2-135m-instruct-d4"', "./no-such-draft"),
     "draft: ./no-such-draft", "draft", "shipped:smollm2-135m-instruct-d4"),
    ("shipped-draft-unknown", SPEC, SPEC.replace("smollm2-135m-instruct-d4", "nope"),
     "shipped:nope", "draft", "shipped:smollm2-135m-instruct-d4"),
    ("two-switches", SPEC, SPEC.replace("threads: 1", "threads: 2"), "threads: 2",
     "threads", "same threads"),
    # -- the other sections
    ("timeout-zero", "load: {timeout_s: 60,", "load: {timeout_s: 0,", "timeout_s: 0",
     "load.timeout_s", "more than 0"),
    ("load-api", "load: {timeout_s: 60,", "load: {api: grpc, timeout_s: 60,", "api: grpc",
     "load.api", "'chat' or 'completions'"),
    ("drill-phase", "drill: {enabled: false}", "drill: {enabled: true, phase: nope}",
     "phase: nope", "drill.phase", "off_peak"),
    ("quality-negative", "samples: 4,", "samples: -4,", "samples: -4", "quality.samples",
     "or more"),
    ("compat-feature", "compat: {enabled: false}", "compat: {features: [telepathy]}",
     "telepathy", "compat.features", "choose from"),
    ("quick-not-mapping", "          sampled_max_tokens: 12}\n",
     "          sampled_max_tokens: 12}\nquick: fast\n", "quick: fast", "quick", "mapping"),
    ("quick-override", "          sampled_max_tokens: 12}\n",
     "          sampled_max_tokens: 12}\nquick:\n  workload:\n    phases:\n"
     "      - {name: off_peak, duration_s: 0}\n", "duration_s: 0}", "duration_s", "more than 0"),
]  # fmt: skip


def _edited(old: str, new: str) -> str:
    assert TEXT.count(old) == 1, old
    return TEXT.replace(old, new)


def _line_of(text: str, at: str) -> int:
    i = text.index(at)
    return text.count("\n", 0, i) + 1


def test_the_cases_are_many_and_distinct() -> None:
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    ("case", "old", "new", "at", "field", "fix"), CASES, ids=[c[0] for c in CASES]
)
def test_a_broken_variant_names_file_line_field_and_fix(
    tmp_path, capsys, monkeypatch, case, old, new, at, field, fix
) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths in a variant resolve to nothing
    text = _edited(old, new)
    f = tmp_path / "pilot.yaml"
    f.write_text(text)
    rc = main(["pilot", str(f), "--dry-run"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    whole = "\n".join(err)
    assert rc == 2 and not any("Traceback" in ln for ln in err), whole
    line = _line_of(text, at)
    here = [ln for ln in err if re.search(rf"{re.escape(str(f))}:{line}\b", ln)]
    assert here, f"no {f.name}:{line} in:\n{whole}"
    problem = next((ln for ln in here if field in ln), None)
    assert problem is not None, f"{field!r} not named on line {line}:\n{whole}"
    fixes = [ln.split("fix:", 1)[1] for ln in err if ln.lstrip().startswith("fix:")]
    fix_text = problem.split(" -> ", 1)[1] if " -> " in problem else " ".join(fixes)
    assert fix in fix_text, f"fix {fix!r} not in {fix_text!r}:\n{whole}"


ALL_TARGETS = [
    (BASE0, BASE0.replace("{draft: null,", "{target: models/t.gguf, draft: null,")),
    (SPEC, SPEC.replace("{draft:", "{target: models/t.gguf, draft:")),
    ("    options: {draft: null, threads: 1, max_slots: 4}\n    budget",
     "    options: {target: models/t.gguf, draft: null, threads: 1, max_slots: 4}\n    budget"),
    ("    options: {draft: null, threads: 1, max_slots: 4}\n\nload",
     "    options: {target: models/t.gguf, draft: null, threads: 1, max_slots: 4}\n\nload"),
]  # fmt: skip


def _every_arm_on(target_edits: list[tuple[str, str]]) -> str:
    text = TEXT
    for old, new in target_edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("arms_missing", [4, 1])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_target_file_that_is_not_there_stops_the_pilot_before_anything_runs(
    tmp_path, capsys, monkeypatch, arms_missing, dry_run
) -> None:
    """Every arm on a missing target (the dry run used to pass) or one arm (it used to read
    'arms differ in target'): refused at load, naming each arm, the field, the path and the
    fix, before an output directory or an engine exists."""
    from specpilot.pilot.run import runner

    built: list[object] = []  # a real run must never get as far as the Pilot (nor start one here)
    monkeypatch.setattr(runner, "Pilot", lambda *a, **k: built.append(a) or pytest.fail("ran"))
    monkeypatch.chdir(tmp_path)
    text = _every_arm_on(ALL_TARGETS[:arms_missing] if arms_missing == 4 else ALL_TARGETS[1:2])
    f = tmp_path / "pilot.yaml"
    f.write_text(text)
    out = tmp_path / "out"
    rc = main(["pilot", str(f), "--dry-run"] if dry_run else ["pilot", str(f), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert "differ in target" not in err and not out.exists() and not built
    arms = (
        ["baseline", "speculative", "alternative", "control"]
        if arms_missing == 4
        else ["speculative"]
    )
    for arm in arms:
        i = ["baseline", "speculative", "alternative", "control"].index(arm)
        line = [n for n, ln in enumerate(text.splitlines(), 1) if "target: models/t.gguf" in ln][
            i if arms_missing == 4 else 0
        ]
        want = f"{f}:{line}: arms[{i}].options.target: arm {arm!r}: target models/t.gguf does not exist"
        assert want in err, err
    assert str(tmp_path) in err  # where a relative path was looked for
    assert err.count("-> point target at an existing GGUF file") == len(arms), err


def test_a_run_built_in_code_is_stopped_before_engines_start(tmp_path, monkeypatch) -> None:
    """The same check when a run plans its arms (``plan_arms``): a config that never went
    through a file is refused before any backend is made."""
    import yaml

    from specpilot.pilot.config.file import PilotConfigError, parse_pilot
    from specpilot.pilot.plan import engines
    from specpilot.pilot.run.runner import Pilot

    data = yaml.safe_load(_every_arm_on(ALL_TARGETS[1:2]))
    cfg = parse_pilot(data, "in-code")
    started: list[object] = []
    monkeypatch.setattr(engines, "make_backend", lambda *a, **k: started.append(a))
    out = tmp_path / "out"
    with pytest.raises(PilotConfigError) as err:
        Pilot(cfg, out).run()
    assert err.value.at == ("arms", 1, "options", "target")
    assert "arm 'speculative': target models/t.gguf does not exist" in str(err.value)
    assert err.value.fix and "default target" in err.value.fix
    assert not started and not out.exists()


DEFAULT = Path(__file__).resolve().parent.parent / "src" / "specpilot" / "data" / "pilots"


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_level_too_thin_for_its_episodes_is_refused_at_its_line(
    tmp_path, capsys, dry_run
) -> None:
    """The embedded default with its off-peak level slowed to 0.02 req/s (about 1 request in
    its 44 s) for 14 episodes on 5 processes: refused before any engine starts, naming the
    phase, its request count, and the duration and rate that would give each episode one."""
    text = (DEFAULT / "default.yaml").read_text()
    traces = (DEFAULT.parent / "traces").as_posix()
    text = text.replace("../traces/", traces + "/")
    old = "target_utilization: 0.3, use_lengths: none}"
    assert text.count(old) == 1
    text = text.replace(old, "target_rate: 0.02, use_lengths: none}")
    text = text.replace("duration_s: 600", "duration_s: 44", 1)
    # absolute rates and deadlines: nothing waits for the capacity probe
    text = text.replace("target_utilization: 0.8,", "target_rate: 2.0,")
    text = text.replace("unloaded_x: 2.0", "deadline_s: 20").replace("fit_budget: true", "")
    f = tmp_path / "thin.yaml"
    f.write_text(text)
    args = ["pilot", str(f), "--out", str(tmp_path / "out")] + (["--dry-run"] if dry_run else [])
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    line = _line_of(text, "- name: off_peak") + 1  # the phase's duration_s
    assert f"{f}:{line}:" in err, err
    assert "phase 'off_peak'" in err and "fewer than the 10 episodes the design needs" in err
    assert "(14 planned)" in err, err
    assert re.search(r"duration_s to at least \d+ s or its rate to at least [\d.]+ req/s", err)
    assert "'peak'" not in err  # the peak level is fine
    assert not (tmp_path / "out" / "pilot.duckdb").exists()  # nothing was measured
