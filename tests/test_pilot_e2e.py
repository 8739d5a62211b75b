"""``specpilot pilot --quick`` end to end on the real models (the embedded default's quick
profile: the three builtin arms, the A/A control and llama.cpp plain / n-gram, in the episode
design at its smallest: every engine up at once, one process an arm, each level cut into two
episodes replayed on every arm in a seeded balanced order), killed once in the middle of the
first episode's rotation and run again: the second run resumes from the file without redoing
the finished arm-episode, and the pilot ends with every scheduled request of every arm
accounted for, the drill recorded, the hardware in the manifests and a report whose verdict
block and A/A line are there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

pytestmark = pytest.mark.slow


def _pilot(out, *extra):
    return [sys.executable, "-m", "specpilot.cli", "pilot", "--quick", "--out", str(out), *extra]


def _env(tmp_path):
    return {
        **os.environ,
        "CI": "1",  # plain progress lines, one per step
        "PYTHONUNBUFFERED": "1",
        "SPECPILOT_CACHE": str(tmp_path / "cache"),
    }


def _kill_when(cmd, env, marker, after_s):
    """Start the pilot, SIGKILL it ``after_s`` after ``marker`` shows in its progress."""
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    seen = []
    assert p.stderr is not None
    for line in p.stderr:
        seen.append(line)
        if marker in line:
            time.sleep(after_s)
            p.send_signal(signal.SIGKILL)
            break
    p.wait(60)
    p.stderr.close()
    assert any(marker in s for s in seen), "".join(seen)[-2000:]
    return "".join(seen)


def test_quick_pilot_resumes_after_a_kill_and_accounts_for_every_request(tmp_path):
    from specpilot.store import read_pilot

    out = tmp_path / "run"
    env = _env(tmp_path)
    # killed in the first episode's rotation: one arm's off_peak~01 finished, the next arm's
    # running (every engine was started before the first episode)
    first = "off_peak~01"
    seen = _kill_when(_pilot(out), env, f": phase {first} complete", after_s=0.5)
    arm0 = next(ln for ln in seen.splitlines() if f": phase {first} complete" in ln).split(":")[0]

    cut = read_pilot(out / "pilot.duckdb")
    status = {a.arm: a.status for a in cut.arms}
    assert len(status) == 6 and set(status.values()) == {"running"}, status
    done = {
        (p.run_id, p.phase): p.actual_start_t
        for p in cut.phases
        if p.status == "complete" and not p.warmup
    }
    assert done and {k[1] for k in done} == {first}, done
    done_arms = {a.arm for a in cut.arms if (a.run_id, first) in done}
    assert arm0 in done_arms
    # the finished arm-episode, by arm: the next arm's cut one may already have stored
    # requests of the same schedule slots (the same request ids), and they are dropped and run
    # again on the resume
    kept = {r.request_id: r.sent_t for r in cut.requests if r.arm == arm0 and r.phase == first}
    assert kept and all(r.phase in ("warmup", first) for r in cut.requests)
    cut_arms = {r.arm for r in cut.requests if r.phase == first} - done_arms

    t0 = time.perf_counter()
    res = subprocess.run(_pilot(out), capture_output=True, text=True, env=env, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming pilot" in res.stderr
    # the status line's ETA follows the measured steps (it once read one guess all run long)
    etas = [line.rsplit("ETA", 1)[1].strip() for line in res.stderr.splitlines() if " ETA " in line]
    assert len(set(etas)) > 3, etas
    # the engines are started and warmed up again; the finished arm-episode is not run again,
    # the cut ones are, and the rotation goes on episode by episode
    assert f"{arm0}: phases peak~01" in res.stderr, res.stderr[-3000:]
    assert f"{arm0}: phase {first} complete" not in res.stderr
    for arm in set(status) - done_arms:
        assert f"{arm}: phase {first} complete" in res.stderr, arm
    notes = " ".join(read_pilot(out / "pilot.duckdb").pilot.notes)
    assert "measurement design: episodes (1 engine process per arm" in notes, notes
    print(f"resumed run: {time.perf_counter() - t0:.0f} s")

    data = read_pilot(out / "pilot.duckdb")
    after = {(p.run_id, p.phase): p.actual_start_t for p in data.phases}
    assert all(after[k] == t for k, t in done.items())  # the same phase record, same start
    assert {
        r.request_id: r.sent_t for r in data.requests if r.arm == arm0 and r.phase == first
    } == kept
    # the cut arm-episodes' stored requests were dropped and sent again: every other arm's
    # record of that episode is from the resumed run (sent_t is time.perf_counter(), the
    # system's monotonic clock, the same in this process)
    rerun = [r for r in data.requests if r.arm not in done_arms and r.phase == first]
    assert rerun and all(r.sent_t is not None and r.sent_t > t0 for r in rerun), sorted(cut_arms)
    print(f"arms with cut {first} requests at the kill: {sorted(cut_arms)}")

    # every scheduled request of every arm ends as exactly one record
    schedule = data.pilot.schedule
    assert schedule is not None
    # (the warm-up is played only where a process is not warm already: each process's
    # fingerprint warms it up, in the episode design)
    planned = Counter(r["phase"] for r in schedule["requests"] if r["phase"] != "warmup")
    arms = {a.arm for a in data.arms}
    assert arms == {
        "baseline",
        "speculative",
        "alternative",
        "control",
        "llamacpp-plain",
        "llamacpp-ngram",
    }
    assert all(a.status == "complete" for a in data.arms), [(a.arm, a.error) for a in data.arms]
    for arm in arms:
        got = Counter(
            r.phase for r in data.requests if r.arm == arm and r.phase not in ("drill", "warmup")
        )
        assert got == planned, (arm, got, planned)
        ids = [r.request_id for r in data.requests if r.arm == arm]
        assert len(ids) == len(set(ids))
    # rounds and prefills persisted for the builtin arms, the drill recorded with its events
    assert {r.arm for r in data.request_rounds} >= {"baseline", "speculative", "alternative"}
    drills = {d.arm: d for d in data.drills}
    assert drills["speculative"].status == "done" and drills["speculative"].kind == "runtime_switch"
    assert drills["speculative"].switch_in_force_s is not None
    assert any(r.phase == "drill" and r.served_k == 0 for r in data.requests)
    # the hardware in the pilot and every started arm's manifest
    assert data.pilot.hardware.cpu_model and data.pilot.hardware.cpu_flags
    assert all(a.manifest.get("hardware", {}).get("cpu_model") for a in data.arms)
    # quality gates ran: compat per arm, outputs, rechecked quality, greedy consistency
    # (the A/A control repeats the baseline's phases only)
    assert {c.arm for c in data.compat} == arms - {"control"}
    assert {o.arm for o in data.outputs} == arms - {"control"}
    assert data.quality and data.consistency
    # the n-gram arm labelled k=3 ran k=3: its ngram-mod settings read back from the engine,
    # and llama.cpp's own counters say no draft was longer than 3
    ngram = next(a for a in data.arms if a.arm == "llamacpp-ngram")
    assert ngram.manifest["speculative"]["effective"]["ngram-mod"]["n_max"] == 3
    counted = [
        s.metrics
        for s in data.snapshots
        if s.arm == "llamacpp-ngram" and s.metrics.get("spec_rounds")
    ]
    assert all(m["spec_proposed_tokens"] <= 3 * m["spec_rounds"] for m in counted)
    # the equal-budget alternative's slots were derived from the draft's measured memory
    alt = next(a for a in data.arms if a.arm == "alternative")
    assert any("derived from speculative" in n for n in alt.budget.notes)

    # the report: the three formats, the verdict block, the drill outside the load cells
    doc = json.loads((out / "report.json").read_text())
    assert doc["verdicts"] and {v["candidate_arm"] for v in doc["verdicts"]} >= {"speculative"}
    assert all(
        v["verdict"] in ("ADOPT", "ADOPT_IN_WINDOWS", "DO_NOT_ADOPT", "UNDECIDED")
        for v in doc["verdicts"]
    )
    assert "drill" not in {c["phase"] for c in doc["load"]["cells"]}
    html = (out / "report.html").read_text()
    assert 'id="verdict"' in html and (out / "report.md").is_file()
    # the real A/A pair (baseline and control, the same config twice) gives no direction, and
    # the report shows the A/A line next to every verdict
    aa = [c for c in doc["comparisons"] if c["candidate_arm"] == "control"]
    assert aa and all(c["outcome"] in ("no_difference", "insufficient") for c in aa), aa
    assert doc["aa_control"]["control_arm"] == "control"
    assert all(
        v["aa_control"].startswith("A/A control (control vs baseline") for v in doc["verdicts"]
    )
    assert "A/A: A/A control" in (out / "report.md").read_text() and "A/A:" in res.stdout
    # one answer per (candidate, group, level) across report.json, .md, .html and the terminal
    from test_one_answer import check_one_answer

    md_text = (out / "report.md").read_text()
    assert check_one_answer(doc, md_text, html, res.stdout)
    # the one-screen summary opens each candidate's block with its verdict
    assert any(
        ln.startswith(("ADOPT", "DO_NOT_ADOPT", "UNDECIDED")) for ln in res.stdout.splitlines()
    )
