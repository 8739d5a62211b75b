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


def test_only_an_engine_that_is_our_child_gets_the_cpu_measured(tmp_path):
    """One rule for the pilot and `specpilot load`: an endpoint given by URL is no child of
    ours, and its own CPU would read as other load."""
    from specpilot.store import PhaseRecorder, Store

    with Store(tmp_path / "p.duckdb") as st:
        assert PhaseRecorder(st, "r", "a", None, {}, local_engine=True).cpu is cpu_sample
        assert PhaseRecorder(st, "r", "a", None, {}).cpu is None


def test_an_arms_processes_are_compared_with_the_other_arms_not_with_each_other():
    """With several processes an arm, a run is named for load the other arms' runs of the
    phase did not have, not for what its own arm's other process had; and once per arm."""
    from types import SimpleNamespace as P

    from specpilot.analysis.comparison.contention import contended

    def ph(arm, run, cores):
        return P(arm=arm, run_id=run, phase="peak", warmup=False, other_cpu_cores=cores,
                 steal_fraction=0.0)  # fmt: skip

    own = [ph("b", "b0", 0.9), ph("b", "b1", 0.05)]
    assert contended(own, ["b"]) == ()  # b1 is b's own: not what b0 is compared with
    uneven = [ph("b", "b0", 0.9), ph("b", "b1", 0.6), ph("s", "s0", 0.1), ph("s", "s1", 0.05)]
    assert contended(uneven, ["b", "s"]) == (
        "b/peak: 0.90 cores used outside the pilot (0.05 beside s/peak)",
    )
