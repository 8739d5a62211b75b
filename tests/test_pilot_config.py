"""The pilot config: validation with file:line errors, the one-switch check (R6), the example
GPU deployment's launch commands, quick-profile merging. No engine starts here."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from specpilot.pilot.config.file import (
    PilotConfigError,
    deep_merge,
    default_pilot_path,
    load_pilot,
    parse_pilot,
)
from specpilot.pilot.plan.arms import check_one_switch, plan_arms
from specpilot.pilot.plan.engines import make_backend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _arms(**over):
    base = {
        "baseline": {"name": "b", "role": "baseline", "engine": "builtin", "options": {}},
        "spec": {
            "name": "s",
            "role": "speculative",
            "engine": "builtin",
            "options": {"draft": "shipped:smollm2-135m-instruct-d4", "k": 3},
        },
        "alt": {"name": "a", "role": "alternative", "engine": "builtin", "options": {}},
    }
    for key, opts in over.items():
        base[key] = {**base[key], "options": {**base[key]["options"], **opts}}
    return list(base.values())


def _check(arms, **kw):
    cfg = parse_pilot({"workload": "w.yaml", "arms": arms, **kw})
    plans = plan_arms(cfg)
    check_one_switch(plans)
    return plans


def test_the_embedded_default_and_its_quick_profile_validate():
    full = load_pilot(default_pilot_path())
    quick = load_pilot(default_pilot_path(), quick=True)
    # both in the episode design: the default decides, --quick passes through every engine at
    # its smallest (one process an arm, two episodes a level)
    assert [a.role for a in full.arms] == ["baseline", "speculative"]
    assert full.episodes.processes >= 3 and full.episodes.planted and full.episodes.in_place
    assert (quick.episodes.processes, quick.episodes.per_level) == (1, 2)
    assert not quick.episodes.in_place and quick.episodes.planted is None
    assert [a.role for a in quick.arms][:4] == ["baseline", "speculative", "alternative", "control"]
    assert "llamacpp-ngram" in [a.name for a in quick.arms]
    assert quick.profile == "quick" and full.profile == "full"
    assert quick.sha256() != full.sha256()
    # the quick overrides shorten every phase (two load levels in both)
    names = lambda c: [p["name"] for p in c.workload["phases"]]  # noqa: E731
    assert names(full) == ["off_peak", "peak"] and names(quick) == ["off_peak", "peak"]
    full_phases = {p["name"]: p for p in full.workload["phases"]}
    assert all(
        q["duration_s"] < full_phases[q["name"]]["duration_s"] for q in quick.workload["phases"]
    )
    plans = plan_arms(quick)
    check_one_switch(plans)
    by = {p.name: p for p in plans}
    assert by["speculative"].reference == "baseline" and by["speculative"].drill
    assert by["llamacpp-ngram"].strategy.kind == "ngram"
    assert by["llamacpp-ngram"].reference == "llamacpp-plain"
    assert by["alternative"].budget.matched_against == "speculative"
    assert by["baseline"].frozen["target"].startswith("sha256:")
    six = {p.name: p for p in plan_arms(load_pilot(EXAMPLES / "pilot-six-arms.yaml"))}
    assert six["llamacpp-draft"].reference == "llamacpp-plain"  # its trace paths resolve too
    # the example beside the GPU one is the same file (a link), and its trace paths resolve
    example = EXAMPLES / "pilot-default.yaml"
    assert example.resolve() == default_pilot_path().resolve()
    assert quick.compat.features and "cancellation" in quick.compat.features
    # the full profile: the checks speculation can break within a round (all 14 in test_compat)
    assert {"streaming", "stop_in_round", "cancellation"} <= set(full.compat.features or ())


def test_an_unknown_compat_feature_names_the_choices():
    data = {
        "workload": {"groups": {"code": {}}, "phases": [{"name": "p", "duration_s": 1}]},
        "arms": [
            {"name": "a", "role": "baseline", "engine": "builtin"},
            {"name": "b", "role": "speculative", "engine": "builtin", "options": {"k": 2}},
        ],
        "compat": {"features": ["streaming", "telepathy"]},
    }
    with pytest.raises(PilotConfigError, match=r"compat.features.*telepathy.*choose from"):
        parse_pilot(data, "p.yaml")


def test_a_drill_replay_that_ends_before_the_switch_back_is_refused_with_the_smallest_value():
    data = {
        "workload": {
            "groups": {"code": {}},
            "phases": [
                {"name": "peak", "duration_s": 30, "arrival": {"kind": "poisson", "rate": 1}}
            ],
        },
        "arms": [
            {"name": "a", "role": "baseline", "engine": "builtin"},
            {
                "name": "b",
                "role": "speculative",
                "engine": "builtin",
                "options": {"k": 2, "draft": "shipped:smollm2-135m-instruct-d4"},
            },
        ],
        "drill": {"switch_after_s": 3, "hold_s": 5, "recovery_window_s": 4, "replay_s": 10},
    }
    with pytest.raises(
        PilotConfigError,
        match=r"drill: replay_s 10 ends before.*= 12\) -> set drill.replay_s to at least 12",
    ):
        parse_pilot(data, "p.yaml")
    data["drill"]["replay_s"] = 12
    assert parse_pilot(data, "p.yaml").drill.replay_s == 12


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"spec": {"dtype": "float32"}}, "differ in dtype ('float32' vs 'auto')"),
        ({"spec": {"threads": 1}, "baseline": {"threads": 2}}, "differ in threads (1 vs 2)"),
        ({"spec": {"max_seq_len": 1024}}, "differ in context_limit (1024 vs 2048)"),
        ({"spec": {"max_slots": 8}}, "differ in max_slots (8 vs 4)\n  fix: keep capacity equal"),
        ({"alt": {"max_slots": 6}}, "declare it in budget.changes"),
    ],
)
def test_arms_that_differ_in_more_than_one_switch_are_refused(over, needle):
    with pytest.raises(PilotConfigError) as err:
        _check(_arms(**over))
    assert needle in err.value.describe()


def test_a_different_target_file_is_named(tmp_path):
    from specpilot.engine.loader import default_target_path

    same = tmp_path / "same.gguf"
    same.symlink_to(default_target_path())  # another path, the same bytes: not a difference
    _check(_arms(spec={"target": str(same)}))
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(64))  # another model file
    with pytest.raises(PilotConfigError) as err:
        _check(_arms(spec={"target": str(other)}))
    assert "differ in target ('sha256:" in str(err.value)


def test_the_alternative_may_change_declared_capacity_only():
    arms = _arms(alt={"max_slots": 6})
    arms[2]["budget"] = {"changes": ["max_slots", "max_batch_size"]}
    plans = _check(arms)
    assert plans[2].capacity["max_slots"] == 6
    arms[2]["budget"] = {"changes": ["dtype"]}
    with pytest.raises(PilotConfigError, match="not capacity settings"):
        _check(arms)


def test_roles_are_enforced():
    arms = _arms()
    arms[1]["options"] = {}  # the speculative arm with nothing switched on
    with pytest.raises(PilotConfigError, match="switches nothing on"):
        _check(arms)
    arms = _arms(baseline={"draft": "shipped:smollm2-135m-instruct-d4", "k": 2})
    with pytest.raises(PilotConfigError, match="baseline arm but switches on a draft"):
        _check(arms)
    with pytest.raises(PilotConfigError, match="exactly one speculative arm"):
        parse_pilot({"workload": "w", "arms": _arms()[:1] + _arms()[2:]})


def test_errors_name_the_line_the_field_and_the_fix(tmp_path):
    f = tmp_path / "pilot.yaml"
    f.write_text(
        textwrap.dedent(
            """\
            name: p
            workload: w.yaml
            arms:
              - {name: b, role: baseline, engine: builtin}
              - name: s
                role: speculative
                engine: builtin
                options:
                  draft: shipped:x
                  k: 0
                  thread: 2
            """
        )
    )
    with pytest.raises(PilotConfigError) as err:
        load_pilot(f)
    text = str(err.value)
    assert f"{f}:11: arms[1].options.thread: Extra inputs are not permitted" in text
    assert "did you mean 'threads'?" in text
    f.write_text(f.read_text().replace("      thread: 2\n", ""))
    with pytest.raises(PilotConfigError) as err:
        load_pilot(f)
    assert f"{f}:10: arms[1].options.k: a draft with k = 0 never proposes" in str(err.value)


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("pilot-*.yaml")))
def test_every_example_pilot_parses_plans_and_keeps_one_switch(name):
    """A shipped example that no longer loads fails here, not in a user's first command."""
    from specpilot.workload import build_schedule

    cfg = load_pilot(EXAMPLES / name)
    plans = plan_arms(cfg, resolve_files=False)
    check_one_switch(plans)
    assert {p.role for p in plans} >= {"baseline", "speculative"}
    if isinstance(cfg.workload, dict) and all(
        ph.get("arrival", {}).get("kind") != "trace" for ph in cfg.workload.get("phases", [])
    ):  # inline workloads on synthetic arrivals: the schedule builds too
        assert len(build_schedule(cfg.workload).requests) > 0


def test_the_gpu_example_parses_and_launches_exactly_these_commands():
    cfg = load_pilot(EXAMPLES / "pilot-vllm-gpu.yaml")
    plans = plan_arms(cfg, resolve_files=False)
    check_one_switch(plans)
    cmds = {p.name: make_backend(p, port=8000).command() for p in plans}
    tail = lambda c: c[c.index("serve") :]  # noqa: E731  (the interpreter path varies)
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert tail(cmds["baseline"]) == [
        "serve", model, "--host", "127.0.0.1", "--port", "8000", "--dtype", "bfloat16",
        "--enable-per-request-metrics", "--max-model-len", "8192",
        "--max-num-seqs", "128", "--gpu-memory-utilization", "0.45",
    ]  # fmt: skip
    spec = tail(cmds["speculative"])
    sc = json.loads(spec[spec.index("--speculative-config") + 1])
    assert sc == {
        "method": "draft_model",
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "num_speculative_tokens": 4,
    }
    assert spec[spec.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    alt = tail(cmds["alternative"])
    assert alt[alt.index("--max-num-seqs") + 1] == "192"
    assert alt[alt.index("--gpu-memory-utilization") + 1] == "0.48"  # + the draft's weights
    assert "--speculative-config" not in alt
    assert {p.name: p.reference for p in plans} == {
        "baseline": None,
        "speculative": "baseline",
        "alternative": "baseline",
        "control": "baseline",
    }
    assert tail(cmds["control"]) == tail(cmds["baseline"])  # the A/A: the same config twice


def test_an_arm_given_by_url_is_not_started_nor_drilled():
    arms = _arms()
    arms.append({"name": "remote", "role": "extra", "engine": "openai", "url": "http://h:1/v1"})
    plans = _check(arms)
    remote = plans[-1]
    assert remote.url and not remote.drill and "target" in remote.unknown
    be = make_backend(remote)
    assert be.endpoint == "http://h:1" and not be.describe().started_by_specpilot


def test_an_arm_given_by_url_waits_for_the_endpoint_and_scrapes_what_its_engine_publishes():
    """One class for an endpoint we do not run (``backends.openai.OpenAIBackend``), for a pilot
    arm's ``url:`` as for a managed API: start waits for /v1/models, the manifest names what
    the config could not tell, a known engine's /metrics parser applies; a dead URL is said."""
    from specpilot.backends import BackendError
    from specpilot.backends.openai import OpenAIBackend
    from specpilot.loadgen.testserver import TestServer, TestServerConfig

    with TestServer(TestServerConfig()) as srv:
        arms = _arms()
        arms.append({"name": "remote", "role": "extra", "engine": "vllm", "url": srv.url + "/v1"})
        be = make_backend(_check(arms)[-1])
        assert isinstance(be, OpenAIBackend) and be.engine == "vllm"
        be.start(10)
        man = be.describe()
        assert man.engine == "vllm" and "target" in man.speculative["unknown"]
        assert "cannot be drilled" in man.notes[0]
        snap = be.scrape("r", "remote", "p", "before")
        assert snap.engine == "vllm" and snap.rss_bytes is None  # no process of ours
    with pytest.raises(BackendError, match="does not answer"):
        OpenAIBackend(srv.url).start(1.0)  # the server is gone


def test_deep_merge_merges_named_items_and_drops():
    base = {"arms": [{"name": "a", "x": 1}, {"name": "b", "x": 2}], "k": {"p": 1, "q": 2}}
    over = {"arms": [{"name": "b", "x": 3}, {"name": "a", "drop": True}], "k": {"q": 5}}
    assert deep_merge(base, over) == {"arms": [{"name": "b", "x": 3}], "k": {"p": 1, "q": 5}}


def test_dry_run_refuses_an_engine_option_the_installed_llama_cpp_lacks(tmp_path, capsys):
    pytest.importorskip("xllamacpp")
    from specpilot.cli import main

    traces = default_pilot_path().parent.parent / "traces"
    cfg = (
        (EXAMPLES / "pilot-six-arms.yaml")
        .read_text()
        .replace(
            "spec_type: ngram-mod, draft_n_max: 3}",
            'spec_type: ngram-mod, draft_n_max: 3, extra: {"speculative.synth_rates": [1, 1, 1]}}',
        )
        .replace("../src/specpilot/data/traces/", f"{traces}/")
    )
    assert "synth_rates" in cfg
    path = tmp_path / "p.yaml"
    path.write_text(cfg)
    code = main(["pilot", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "arm 'llamacpp-ngram': extra: 'speculative.synth_rates' is not a setting" in err
    assert "valid:" in err and "Traceback" not in err


def test_resume_refuses_a_schedule_that_changed_under_it(tmp_path):
    # the config names its workload by path: an edited workload file keeps the config's hash,
    # but not the schedule's, and a resumed pilot would compare arms on different traffic
    import dataclasses

    from specpilot.pilot.config.file import PilotConfigError, default_pilot_path, load_pilot
    from specpilot.pilot.run.record import open_pilot
    from specpilot.pilot.run.runner import Pilot
    from specpilot.pilot.run.session import PilotSession
    from specpilot.store import Store

    path = default_pilot_path().resolve()
    cfg = load_pilot(path, quick=True)
    p = Pilot(cfg, tmp_path, base_dir=path.parent)
    prep = p.prepare()
    with Store(tmp_path / "pilot.duckdb") as st:
        s = PilotSession(cfg, store=st, gates=p.gates, plans=prep.plans, files=prep.files,
                         capacity=prep.capacity, level_schedule=prep.level_schedule,
                         schedule=prep.level_schedule, progress=p.progress,
                         admin_token="t", started=0.0)  # fmt: skip
        first = open_pilot(s, st, {})
        assert open_pilot(s, st, {}).pilot_id == first.pilot_id  # unchanged: it resumes
        edited = s.schedule.to_dict()
        edited["phases"][1]["requests"] += 3
        st.add_pilot(dataclasses.replace(first, schedule=edited))
        with pytest.raises(PilotConfigError, match=r"schedule changed since it started \(phase"):
            open_pilot(s, st, {})


def test_a_resume_refuses_a_target_file_whose_content_changed():
    """The pilot's identity covers the models: an arm recorded on one target file content and a
    plan whose file at the same path now hashes otherwise stop the resume, naming both."""
    from types import SimpleNamespace as NS

    from specpilot.pilot.plan.runplans import target_changed

    rec = NS(arm="base", manifest={"frozen": {"target": "sha256:aaaa1111"}})
    plan = NS(name="base", frozen={"target": "sha256:bbbb2222", "target_path": "/m/t.gguf"})
    why = target_changed([rec], [plan])
    assert why is not None and "/m/t.gguf" in why and "sha256:aaaa" in why and "sha256:bbbb" in why
    assert target_changed([rec], [NS(name="base", frozen={"target": "sha256:aaaa1111"})]) is None
    assert target_changed([NS(arm="base", manifest={})], [plan]) is None  # nothing recorded yet


def test_every_builtin_arm_runs_the_format_the_first_started_one_chose_also_after_a_resume(
    tmp_path,
):
    """The pinned weight format is read from the file (the first builtin arm's manifest), not
    kept in the running process: a resumed pilot starts its arms with the first run's format."""
    import dataclasses
    from types import SimpleNamespace

    from specpilot.pilot.run.session import PilotSession
    from specpilot.store import Store
    from test_store import _arm, _pilot

    with Store(tmp_path / "p.duckdb") as st:
        st.add_pilot(_pilot())
        holder = SimpleNamespace(store=st)
        assert (
            PilotSession.pinned_format(holder) is None
        )  # nothing started yet: the arm's own option

        def chose(fmt):
            return {"calibration": {"formats": {"target": fmt}}, "frozen": {"dtype": "auto"}}

        llama = dataclasses.replace(_arm("llamacpp-plain", 0, 0), engine="llamacpp",
                                    manifest=chose("q4_1"))  # fmt: skip
        silent = dataclasses.replace(_arm("control", 0, 1), manifest={"frozen": {"dtype": "auto"}})
        first = dataclasses.replace(_arm("baseline", 0, 2), manifest=chose("int8-bf16"))
        later = dataclasses.replace(_arm("speculative", 3, 3), manifest=chose("fp32"))
        for a in (later, llama, silent, first):
            st.add_arm(a)
        # the first builtin arm by run order that reported a choice ("auto" is no choice)
        assert PilotSession.pinned_format(holder) == "int8-bf16"


def test_a_workload_file_is_parsed_once_at_load_and_its_errors_name_it(tmp_path, capsys):
    from specpilot.cli import main

    wl = tmp_path / "wl.yaml"
    wl.write_text(
        "name: w\ngroups:\n  code: {weight: 1}\n"
        "phases:\n  - {name: peak, duration_s: 12, arrival: {kind: poisson, rate: 1}}\n"
    )
    pilot = tmp_path / "pilot.yaml"
    pilot.write_text(
        "name: p\nworkload: wl.yaml\n"
        "episodes: {per_level: 4, processes: 2}\n"
        "drill: {phase: peak}\n"
        "arms:\n"
        "  - {name: baseline, role: baseline, engine: builtin, options: {draft: null}}\n"
        "  - {name: speculative, role: speculative, engine: builtin,\n"
        "     options: {draft: 'shipped:smollm2-135m-instruct-d4', k: 3}}\n"
    )
    cfg = load_pilot(pilot)
    parsed = cfg.workload_config()
    assert cfg.workload_config() is parsed and [p.name for p in parsed.phases] == ["peak"]
    assert cfg.workload_dir("/elsewhere") == tmp_path
    # the planner reads the parsed workload (it read an inline workload's dict only)
    assert main(["pilot", str(pilot), "--dry-run"]) == 0
    assert "episodes: 2 processes per arm, 4 episodes per load level" in capsys.readouterr().out
    # an error in the workload file, and a drill phase it lacks: at load, naming the file
    wl.write_text(wl.read_text().replace("rate: 1", "rate: -1"))
    with pytest.raises(Exception, match=r"wl\.yaml"):
        load_pilot(pilot)
    wl.write_text(wl.read_text().replace("rate: -1", "rate: 1").replace("name: peak", "name: p2"))
    with pytest.raises(PilotConfigError, match="'peak' is not a phase of the workload"):
        load_pilot(pilot)


def test_every_pilot_runs_the_episode_design_and_the_retired_designs_are_refused():
    """A file without ``episodes:`` gets the design's defaults (1 process an arm where an arm
    is by URL: specpilot cannot start more of an endpoint); ``design:`` and ``repetitions:``
    name the retired designs and are refused with the fix, never run."""
    arms = _arms()[:2]
    plain = parse_pilot({"workload": "w.yaml", "arms": arms})
    assert (plain.episodes.processes, plain.episodes.per_level) == (3, 8)
    assert plain.episodes.planted == 0.15
    remote = [arms[0], {k: v for k, v in arms[1].items() if k != "options"}]
    remote[1] |= {"engine": "openai", "url": "http://h:1/v1"}
    by_url = parse_pilot({"workload": "w.yaml", "arms": remote})
    assert by_url.episodes.processes == 1
    # so does a mapping that leaves processes out, and null is the defaults
    sized = parse_pilot({"workload": "w.yaml", "arms": remote, "episodes": {"per_level": 4}})
    assert (sized.episodes.processes, sized.episodes.per_level) == (1, 4)
    assert parse_pilot({"workload": "w.yaml", "arms": arms, "episodes": None}).episodes == (
        plain.episodes
    )
    with pytest.raises(PilotConfigError, match=r"episodes\.processes 3: arm 's' is given by URL"):
        parse_pilot({"workload": "w.yaml", "arms": remote, "episodes": {"processes": 3}})
    for key, value, fix in (
        ("design", "sequential", "remove design:"),
        ("design", "interleaved", "remove design:"),
        ("repetitions", 3, "episodes.processes"),
    ):
        with pytest.raises(PilotConfigError) as exc:
            parse_pilot({"workload": "w.yaml", "arms": arms, key: value})
        assert "retired" in exc.value.message and fix in str(exc.value.fix)


@pytest.mark.parametrize(
    ("spec", "base", "needle"),
    [
        ({"extra_args": ["--kv-cache-dtype", "fp8"]}, {}, "differ in engine_args"),
        ({}, {"extra_args": ["--quantization", "fp8"]}, "(options.extra_args)"),
        ({"tensor_parallel_size": 2}, {}, "differ in tensor_parallel_size (2 vs None)"),
        # the speculative flags are the one switch: not a second
        ({"extra_args": ["--speculative-disable-by-batch-size", "8"]}, {}, None),
    ],
)
def test_vllm_arms_differing_in_flags_passed_verbatim_are_refused(spec, base, needle):
    """The one-switch rule (R6) covers every setting a vLLM arm passes: its ``extra_args``
    (less ``--speculative-*``) and ``tensor_parallel_size``, as well as the typed options."""
    model = {"model": "/models/llama-8b", "max_model_len": 4096}
    arms = [
        {"name": "b", "role": "baseline", "engine": "vllm", "options": {**model, **base}},
        {"name": "s", "role": "speculative", "engine": "vllm",
         "options": {**model, "draft": "/models/llama-1b", "k": 3, **spec}},
    ]  # fmt: skip
    plans = plan_arms(parse_pilot({"workload": "w.yaml", "arms": arms}), resolve_files=False)
    if needle is None:
        check_one_switch(plans)
        return
    with pytest.raises(PilotConfigError) as err:
        check_one_switch(plans)
    assert needle in err.value.describe()
