"""Who else used the CPU while a phase ran (``backends.facts.cpu_sample``, ``PhaseRecord``'s
``other_cpu_cores`` / ``steal_fraction``), measured on real processes: a busy process outside
the pilot's tree shows as other load, a busy child of it does not."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from specpilot.backends.facts import CpuSample, cpu_contention, cpu_sample

pytestmark = pytest.mark.skipif(cpu_sample() is None, reason="no /proc/stat (not Linux)")

BURN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass\n"


@pytest.fixture
def outside():
    """Start CPU-bound processes that are not our descendants (``sh`` starts each in the
    background and exits, so it is reparented away from this tree); killed at the end."""
    pids = []

    def start(seconds: float) -> None:
        out = subprocess.run(
            ["sh", "-c", f'{sys.executable} -c "$0" >/dev/null 2>&1 & echo $!', BURN.format(s=seconds)],
            check=True, capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        pids.append(int(out.stdout.strip()))

    yield start
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_busy_child_counts_as_the_tree_and_an_outside_process_as_other_load(outside):
    a = cpu_sample()
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=1.5)])
    time.sleep(1.2)  # sampled while the child is alive: its time is the tree's
    b = cpu_sample()
    child.wait(10)
    assert a is not None and b is not None
    assert b.tree_s - a.tree_s >= 0.5, (a, b)

    outside(2.5)
    time.sleep(0.3)  # it has started
    c = cpu_sample()
    time.sleep(1.5)
    d = cpu_sample()
    use = cpu_contention(c, d)
    assert use is not None
    other, steal = use
    # at least half a core (the other test worker may share the 2 cores with it); the tree idle
    assert other >= 0.5 and 0.0 <= steal <= 1.0, use
    assert d is not None and c is not None and d.tree_s - c.tree_s < 0.3


def test_no_figure_without_two_samples_or_time_between_them():
    s = CpuSample(1.0, 5.0, 0.0, 1.0)
    assert cpu_contention(None, s) is None and cpu_contention(s, None) is None
    assert cpu_contention(s, s) is None  # no time between them: no rate


def test_a_complete_phase_carries_the_other_load_and_none_without_a_sampler(tmp_path, outside):
    from specpilot.loadgen import LoadConfig, LoadRunner
    from specpilot.loadgen.testserver import TestServer, TestServerConfig
    from specpilot.records import ScheduledRequest
    from specpilot.store import PhaseRecorder, Store

    msg = [{"role": "user", "content": "hi"}]
    items = [ScheduledRequest(i, i * 0.1, "steady", "g", "p", msg, 4) for i in range(15)]
    with Store(tmp_path / "p.duckdb") as st, TestServer(TestServerConfig(itl_s=0.01)) as srv:
        cfg = LoadConfig.build(srv.url, run_id="r", arm="a", progress=False)
        runner = LoadRunner(items, cfg, st.sink)
        PhaseRecorder(st, "r", "a", None, {"steady": 1.5}, cpu=cpu_sample).attach(runner)
        outside(2.5)
        runner.run()
        (phase,) = st.records("phases")
        # with no sampler (the default: an engine given by URL is no child of ours): nothing
        # measured, the phase still written
        cfg2 = LoadConfig.build(srv.url, run_id="r2", arm="a", progress=False)
        runner2 = LoadRunner(items, cfg2, st.sink)
        PhaseRecorder(st, "r2", "a", None, {"steady": 1.5}).attach(runner2)
        runner2.run()
        plain = next(p for p in st.records("phases") if p.run_id == "r2")
    assert phase.status == "complete"
    assert phase.other_cpu_cores is not None and phase.other_cpu_cores >= 0.4, phase
    assert phase.steal_fraction is not None and 0.0 <= phase.steal_fraction <= 1.0
    assert plain.status == "complete" and plain.other_cpu_cores is None


def test_a_run_probes_the_machine_around_it_and_each_complete_phase_gets_the_mean(tmp_path):
    """The speed probe runs before the load and after it (never inside: it would stall the
    open-loop timeline); a failed probe loses the figure, not the phase."""
    from specpilot.backends.facts import SpeedProbe
    from specpilot.loadgen import LoadConfig, LoadRunner
    from specpilot.loadgen.testserver import TestServer, TestServerConfig
    from specpilot.records import ScheduledRequest
    from specpilot.store import PhaseRecorder, Store

    msg = [{"role": "user", "content": "hi"}]
    items = [ScheduledRequest(i, i * 0.05, ph, "g", "p", msg, 4)
             for i, ph in enumerate(["a"] * 4 + ["b"] * 4)]  # fmt: skip
    calls: list[str] = []

    def probe() -> SpeedProbe:
        calls.append(
            "running" if getattr(runner, "t_run", None) is not None and not done else "idle"
        )
        return SpeedProbe(0.004 + 0.002 * len(calls) - 0.002, 0.0004)

    def broken() -> SpeedProbe:
        raise RuntimeError("no torch")

    done = False
    with Store(tmp_path / "p.duckdb") as st, TestServer(TestServerConfig(itl_s=0.01)) as srv:
        cfg = LoadConfig.build(
            srv.url, run_id="r", arm="x", progress=False, phase_timing="back_to_back"
        )
        runner = LoadRunner(items, cfg, st.sink)
        rec = PhaseRecorder(st, "r", "x", None, {"a": 0.2, "b": 0.2}, probe=probe).attach(runner)
        runner.run()
        done = True
        rec.close()
        cfg2 = LoadConfig.build(
            srv.url, run_id="r2", arm="x", progress=False, phase_timing="back_to_back"
        )
        runner2 = LoadRunner(items, cfg2, st.sink)
        rec2 = PhaseRecorder(st, "r2", "x", None, {"a": 0.2, "b": 0.2}, probe=broken)
        rec2.attach(runner2)
        runner2.run()
        rec2.close()
        phases = {(p.run_id, p.phase): p for p in st.records("phases")}
    assert calls == ["idle", "idle"]
    for name in ("a", "b"):
        p = phases[("r", name)]
        assert p.status == "complete" and p.probe_memory_s == pytest.approx(0.005), p
        assert p.probe_compute_s == pytest.approx(0.0004)
        q = phases[("r2", name)]
        assert q.status == "complete" and q.probe_memory_s is None and q.probe_compute_s is None


def test_the_speed_probe_times_its_kernels_on_one_thread_and_restores_the_callers():
    import torch

    from specpilot.backends.facts import speed_probe

    before = torch.get_num_threads()
    p = speed_probe(reps=3)
    assert torch.get_num_threads() == before
    # 96 MB streamed from memory vs a 16 MFLOP product in cache: both real, both timed
    assert 0 < p.compute_s < 1.0 and 0 < p.memory_s < 1.0, p
