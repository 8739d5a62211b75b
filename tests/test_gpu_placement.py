"""GPU placement when specpilot starts the engines (issue 49 item 4): an arm's ``devices:``, the
placement's decisions as pure functions (``pilot.plan.placement``: m processes over devices,
tensor parallel, shared devices, free memory, the refusal with the largest m), each engine's
need (``EngineAdapter.gpu``), ``nvidia-smi``'s CSV read, the ``--dry-run`` lines, and the
environment reaching a process the pilot starts. No test needs a GPU: this machine has none."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

from specpilot.backends.adapters import ADAPTERS
from specpilot.backends.gpus import (
    ALLOWANCE,
    GIB,
    GpuInfo,
    GpuNeed,
    GpuReading,
    parse_gpu_csv,
    read_gpus,
)
from specpilot.pilot.config.file import PilotConfigError, parse_pilot
from specpilot.pilot.plan.arms import plan_arms
from specpilot.pilot.plan.devices import decide, placed_plans, summary
from specpilot.pilot.plan.engines import engine_options, make_backend
from specpilot.pilot.plan.placement import ArmGpus, largest_processes, place, refusal

VLLM = GpuNeed(per_process=1, basis="vLLM", share=0.9, declared=True)
TP2 = GpuNeed(per_process=2, basis="vLLM", share=0.9, declared=True)
HALF = GpuNeed(per_process=1, basis="vLLM", share=0.45, declared=True)
UNDECLARED = GpuNeed(per_process=1, basis="vLLM default", share=0.45, declared=False)


def h100s(n: int, used_gib: float = 0.0) -> list[GpuInfo]:
    """``n`` idle 80 GB H100s as nvidia-smi reports them (81559 MiB total)."""
    total = 81559 * 2**20
    return [GpuInfo(i, total, int(used_gib * GIB), total - int(used_gib * GIB)) for i in range(n)]


def _devices(p):  # (arm, process) -> devices
    return {(x.arm, x.process): x.devices for x in p.placed}


# -- the decisions, pure ------------------------------------------------------------------------


def test_auto_gives_every_process_of_every_arm_its_own_devices_in_order() -> None:
    arms = [ArmGpus("b", "auto", VLLM), ArmGpus("s", "auto", VLLM), ArmGpus("c", "auto", VLLM)]
    got = place(arms, 2, h100s(6))
    assert not got.problems
    assert _devices(got) == {
        ("b", 0): (0,), ("b", 1): (1,), ("s", 0): (2,), ("s", 1): (3,),
        ("c", 0): (4,), ("c", 1): (5,),
    }  # fmt: skip
    assert got.of("s") == ((2,), (3,))


def test_tensor_parallel_takes_that_many_devices_a_process_from_auto_and_from_a_flat_list() -> None:
    arms = [ArmGpus("b", (4, 5, 6, 7), TP2), ArmGpus("s", "auto", TP2)]
    got = place(arms, 2, h100s(8))
    assert not got.problems
    assert got.of("b") == ((4, 5), (6, 7))  # the flat list split in order
    assert got.of("s") == ((0, 1), (2, 3))  # auto skips what b named
    # one list per process, as written
    nested = place([ArmGpus("b", ((3, 1), (0, 2)), TP2)], 2, h100s(4))
    assert nested.of("b") == ((3, 1), (0, 2)) and not nested.problems


def test_auto_skips_a_device_someone_else_fills_and_one_outside_its_own_visible_set() -> None:
    gpus = h100s(4)
    gpus[1] = GpuInfo(1, gpus[1].total_bytes, 70 * GIB, gpus[1].total_bytes - 70 * GIB)
    got = place([ArmGpus("b", "auto", VLLM)], 2, gpus)
    assert got.of("b") == ((0,), (2,)), "device 1 has 9.6 GiB free, a process needs 71.7"
    # a scheduler gave the pilot itself devices 2 and 3 (its own CUDA_VISIBLE_DEVICES)
    assert place([ArmGpus("b", "auto", VLLM)], 2, h100s(4), allowed=(2, 3)).of("b") == ((2,), (3,))


def test_too_few_devices_is_refused_with_the_largest_m_that_fits() -> None:
    arms = [ArmGpus(a, "auto", VLLM) for a in ("b", "s", "alt", "c")]
    assert refusal(arms, 2, h100s(8)) is None
    msg = refusal(arms, 3, h100s(8))
    assert msg is not None
    assert msg.startswith("episodes.processes 3: 12 engine processes (4 arms x 3) cannot be placed")
    assert "on the 8 GPUs nvidia-smi lists (0-7)" in msg
    assert msg.endswith("-> set episodes.processes to at most 2")
    assert largest_processes(arms, 16, h100s(8)) == 2
    assert largest_processes(arms, 16, h100s(3)) == 0
    none = refusal(arms, 1, h100s(3))
    assert none is not None and "not even one process per arm can be placed" in none


def test_a_written_list_too_short_for_m_says_how_many_it_holds() -> None:
    arms = [ArmGpus("b", (0, 1, 2), TP2)]  # one process of 2 devices (device 2 is left over)
    msg = refusal(arms, 2, None)
    assert msg is not None and "arm b: devices [0, 1, 2] hold 1 process of 2 devices" in msg
    assert msg.endswith("at most 1") and "(free memory not read)" in msg


def test_a_device_named_by_two_processes_needs_a_declared_share_on_each() -> None:
    shared = [ArmGpus("b", ((0,), (1,)), HALF), ArmGpus("s", ((0,), (1,)), HALF)]
    assert not place(shared, 2, h100s(2)).problems
    undeclared = [ArmGpus("b", ((0,), (1,)), HALF), ArmGpus("s", ((0,), (1,)), UNDECLARED)]
    msg = refusal(undeclared, 2, h100s(2))
    assert (
        msg is not None
        and "device 0 is named for b p0, s p0, and s declares no memory share" in msg
    )
    # auto never shares: two auto arms on one device is a lack of devices, not a share
    assert refusal([ArmGpus("b", "auto", HALF), ArmGpus("s", "auto", HALF)], 1, h100s(1))


def test_shares_are_checked_against_each_devices_free_memory() -> None:
    arms = [ArmGpus(a, ((0,), (1,)), HALF) for a in ("b", "s", "c")]  # 3 x 0.45 on each
    msg = refusal(arms, 2, h100s(2))
    assert msg is not None
    assert "device 0: b p0, s p0, c p0 need 107.5 GiB (0.45 x 79.6 GiB = 35.8 GiB" in msg
    assert "79.6 GiB of its 79.6 GiB is free" in msg and "at most" not in msg.split("->")[1]
    # the same shares fit where one arm has a device of its own, and a busy device refuses
    fits = [ArmGpus("b", ((0,),), HALF), ArmGpus("s", ((0,),), HALF), ArmGpus("c", ((1,),), HALF)]
    assert refusal(fits, 1, h100s(2)) is None
    assert refusal(fits, 1, h100s(2, used_gib=20.0)) is not None
    # unread (no nvidia-smi): shares over the whole device are refused all the same
    assert "add up to more than the device" in (refusal(arms, 1, None) or "")


def test_a_device_nvidia_smi_does_not_list_is_refused_and_fewer_processes_may_fit() -> None:
    msg = refusal([ArmGpus("b", ((0,), (5,)), VLLM)], 2, h100s(4))
    assert msg is not None and "device 5 (b p1) is not one nvidia-smi lists (0, 1, 2, 3)" in msg
    assert msg.endswith("at most 1")


def test_an_arm_on_the_cpu_is_placed_but_takes_no_device_and_needs_no_memory() -> None:
    arms = [ArmGpus("cpu", ((0,), (1,)), None), ArmGpus("b", "auto", VLLM)]
    got = place(arms, 2, h100s(2))
    assert not got.problems and got.of("cpu") == ((0,), (1,)) and got.of("b") == ((0,), (1,))


# -- from the pilot file --------------------------------------------------------------------------


def _cfg(*arms: dict, processes: int = 2, **episodes: object) -> object:
    return parse_pilot(
        {"workload": "w.yaml", "episodes": {"processes": processes, **episodes}, "arms": list(arms)}
    )


def _vllm(name: str, role: str, devices: object, **options: object) -> dict:
    opts = {"model": "m", **({"draft": "d"} if role == "speculative" else {}), **options}
    return {"name": name, "role": role, "engine": "vllm", "devices": devices, "options": opts}


def test_devices_in_a_pilot_file_are_checked_for_shape_and_for_an_arm_by_url() -> None:
    for bad in ("all", [], [[0], []], [0, [1]], [-1], 3):
        with pytest.raises(PilotConfigError, match=r"arms\[0\]\.devices: .*give auto"):
            _cfg(_vllm("b", "baseline", bad), _vllm("s", "speculative", "auto"))
    for twice in ([[0, 1], [1, 1]], [0, 1, 1]):
        with pytest.raises(PilotConfigError, match="device 1 is listed twice"):
            _cfg(_vllm("b", "baseline", twice), _vllm("s", "speculative", "auto"))
    url = {
        "name": "b",
        "role": "baseline",
        "engine": "vllm",
        "url": "http://x:8000",
        "devices": [0],
    }
    with pytest.raises(PilotConfigError, match="devices are for an engine specpilot starts"):
        _cfg(url, _vllm("s", "speculative", "auto"), processes=1)


def test_devices_are_not_part_of_the_config_hash() -> None:
    """Where the processes run is decided again at every start (a resumed pilot starts every
    process anew): other devices resume the same pilot, and files without devices: keep the
    hashes they had before the field existed."""
    cfg = _cfg(_vllm("b", "baseline", "auto"), _vllm("s", "speculative", [[0], [1]]))
    same = _cfg(_vllm("b", "baseline", None), _vllm("s", "speculative", [4, 5]))
    other = _cfg(_vllm("b", "baseline", None), _vllm("s", "speculative", None, max_num_seqs=8))
    assert cfg.sha256() == same.sha256() != other.sha256()  # type: ignore[attr-defined]


def test_a_process_list_of_another_size_than_tensor_parallel_is_refused_at_its_line() -> None:
    cfg = _cfg(
        _vllm("b", "baseline", [[0], [1]], tensor_parallel_size=2),
        _vllm("s", "speculative", "auto", tensor_parallel_size=2),
    )
    with pytest.raises(PilotConfigError) as err:
        decide(plan_arms(cfg, resolve_files=False), cfg, GpuReading(tuple(h100s(8))))
    assert "arm b: process 0 is given 1 device ([0])" in err.value.message
    assert "takes 2 (its tensor parallel size)" in err.value.message
    assert err.value.at == ("arms", 0, "devices")


def test_the_run_places_every_process_and_each_gets_its_own_environment() -> None:
    cfg = _cfg(
        _vllm("b", "baseline", "auto"),
        _vllm("s", "speculative", "auto"),
        _vllm("c", "control", [[6], [7]]),
    )
    plans, lines = placed_plans(
        plan_arms(cfg, resolve_files=False), cfg, GpuReading(tuple(h100s(8)))
    )
    assert [p.devices for p in plans] == [((0,), (1,)), ((2,), (3,)), ((6,), (7,))]
    env = make_backend(plans[1], process=1).launch_env()  # type: ignore[attr-defined]
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "HF_HUB_OFFLINE" in env  # vLLM's own variables are kept
    assert any("device 6: c p0 need 71.7 GiB, 79.6 free" in x for x in lines)
    # refused before any start where a busy machine leaves too little room, with the largest m
    busy = h100s(8)
    busy[2:6] = h100s(8, used_gib=70.0)[2:6]  # someone else's job on GPUs 2-5
    with pytest.raises(PilotConfigError) as err:
        placed_plans(plan_arms(cfg, resolve_files=False), cfg, GpuReading(tuple(busy)))
    assert err.value.message.startswith("episodes.processes 2: 6 engine processes (3 arms x 2)")
    assert "arm s process 0: no free device left" in err.value.message
    assert err.value.message.endswith("-> set episodes.processes to at most 1")


def test_in_place_the_baseline_has_no_processes_to_place() -> None:
    base = {"name": "b", "role": "baseline", "engine": "builtin", "devices": "auto",
            "options": {"extra_args": ["--device", "cuda"]}}  # fmt: skip
    spec = {"name": "s", "role": "speculative", "engine": "builtin", "devices": "auto",
            "options": {"draft": "truncate:0,1", "k": 2, "extra_args": ["--device", "cuda"]}}  # fmt: skip
    cfg = _cfg(base, spec, in_place=True)
    plans, _ = decide(plan_arms(cfg, resolve_files=False), cfg, GpuReading(tuple(h100s(2))))
    assert [p.devices for p in plans] == [(), ((0,), (1,))]


def test_a_run_that_cannot_read_the_gpus_is_refused_and_a_dry_run_assumes_them() -> None:
    cfg = _cfg(_vllm("b", "baseline", "auto"), _vllm("s", "speculative", "auto"))
    plans = plan_arms(cfg, resolve_files=False)
    none = GpuReading(None, "no nvidia-smi on PATH")
    with pytest.raises(PilotConfigError, match=r"cannot be read \(no nvidia-smi on PATH\)"):
        placed_plans(plans, cfg, none)
    got = summary(plans, cfg, none)
    assert not got["checked"] and got["processes"] == {
        "b.p0": [0], "b.p1": [1], "s.p0": [2], "s.p1": [3]
    }  # fmt: skip
    assert got["lines"][0].startswith(
        "GPU placement (each process's CUDA_VISIBLE_DEVICES): free memory not checked "
        "(no nvidia-smi on PATH), the devices are assumed present and free"
    )
    assert (
        "  b                p0 -> 0, p1 -> 1; each needs 0.9 of its device's memory"
        in got["lines"][1]
    )


# -- each engine's need -----------------------------------------------------------------------


def test_each_engines_need_of_a_gpu() -> None:
    need = ADAPTERS["vllm"].gpu(engine_options("vllm", {"gpu_memory_utilization": 0.45}))
    assert need is not None and need.share == 0.45 and need.declared and need.per_process == 1
    default = ADAPTERS["vllm"].gpu(engine_options("vllm", {"extra_args": ["-tp", "4", "-pp", "2"]}))
    assert default is not None and default.share == 0.9 and not default.declared
    assert default.per_process == 8 and default.on(h100s(1)[0]) == int(0.9 * 81559 * 2**20)
    sg = ADAPTERS["sglang"].gpu(
        engine_options(
            "sglang", {"model": "m", "extra_args": ["--tp-size", "2", "--mem-fraction-static=0.6"]}
        )
    )
    assert sg is not None and (sg.per_process, sg.share, sg.declared) == (2, 0.6, True)
    assert ADAPTERS["builtin"].gpu(engine_options("builtin", {})) is None  # on the CPU
    assert (
        ADAPTERS["llamacpp"].gpu(engine_options("llamacpp", {"extra": {"n_gpu_layers": 0}})) is None
    )
    ll = ADAPTERS["llamacpp"].gpu(engine_options("llamacpp", {"model": "/not/here.gguf"}))
    assert ll is not None and ll.bytes is None and not ll.exact  # unknown: not checked


def test_the_builtin_engines_need_on_a_gpu_is_its_weights_at_bf16_plus_the_allowance(
    tmp_path,
) -> None:
    from specpilot.backends.gpus import gguf_bf16_bytes
    from specpilot.engine.loader import default_target_path

    target = str(default_target_path())
    o = engine_options("builtin", {"target": target, "extra_args": ["--device", "cuda"]})
    need = ADAPTERS["builtin"].gpu(o)
    params = gguf_bf16_bytes(target)
    assert need is not None and params is not None and need.per_process == 1 and need.exact
    assert 250 * 2**20 < params < 280 * 2**20, "SmolLM2-135M: 134.5M parameters x 2 bytes"
    assert need.bytes == params + ALLOWANCE
    f32 = ADAPTERS["builtin"].gpu(o.model_copy(update={"dtype": "float32"}))
    assert f32 is not None and f32.bytes == 2 * params + ALLOWANCE


# -- nvidia-smi -------------------------------------------------------------------------------

# ``nvidia-smi --query-gpu=index,memory.total,memory.used,memory.free
# --format=csv,noheader,nounits`` on a two-GPU H100 80GB node, one GPU busy: NVIDIA's documented
# CSV format (nvidia-smi(1), "--format=csv": comma separated, "noheader", "nounits": MiB)
SMI_OUTPUT = "0, 81559, 1, 81004\n1, 81559, 70313, 10692\n"


def _fake_smi(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_nvidia_smis_csv_is_read_in_mib() -> None:
    gpus = parse_gpu_csv(SMI_OUTPUT)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[1].total_bytes == 81559 * 2**20 and gpus[1].free_bytes == 10692 * 2**20
    with pytest.raises(ValueError, match="expected index, total, used, free"):
        parse_gpu_csv("index, memory.total [MiB]\n0, 81559 MiB\n")  # a header, units: not asked


def test_a_fake_nvidia_smi_on_path_is_asked_the_documented_query(tmp_path, monkeypatch) -> None:
    """A stand-in for ``nvidia-smi`` (this machine has no NVIDIA driver): a shell script on
    PATH that answers the exact query ``read_gpus`` must send with the output above, and fails
    on any other, as the real one would print something else."""
    (tmp_path / "output.csv").write_text(SMI_OUTPUT)
    query = "--query-gpu=index,memory.total,memory.used,memory.free"
    _fake_smi(
        tmp_path / "bin",
        f"""\
        if [ "$1" = "{query}" ] && [ "$2" = "--format=csv,noheader,nounits" ]; then
          cat "{tmp_path / "output.csv"}"
        else
          echo "unexpected arguments: $*" >&2; exit 2
        fi
        """,
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    got = read_gpus()
    assert got.gpus is not None and [g.free_bytes // 2**20 for g in got.gpus] == [81004, 10692]
    # the placement reads it: auto skips the busy device
    plan = place([ArmGpus("b", "auto", HALF)], 1, got.gpus)
    assert plan.of("b") == ((0,),)
    assert place([ArmGpus("b", "auto", HALF)], 2, got.gpus).problems


def test_an_nvidia_smi_that_fails_or_is_missing_says_why(tmp_path, monkeypatch) -> None:
    """The same stand-in, failing as a driver/library mismatch does (exit 9 with a message)."""
    _fake_smi(
        tmp_path / "bin",
        "echo 'Failed to initialize NVML: Driver/library version mismatch'\nexit 9\n",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    got = read_gpus()
    assert (
        got.gpus is None
        and got.why
        == "nvidia-smi exited 9: Failed to initialize NVML: Driver/library version mismatch"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert read_gpus() == GpuReading(None, "no nvidia-smi on PATH")


# -- --dry-run --------------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pilot-vllm-gpu.yaml"


def test_the_gpu_examples_dry_run_without_gpus_prints_the_placement_it_would_use(
    tmp_path, monkeypatch, capsys
) -> None:
    from specpilot.cli import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, whatever machine runs this
    assert main(["pilot", str(EXAMPLE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "free memory not checked (no nvidia-smi on PATH)" in out
    assert "baseline         p0 -> 0, p1 -> 1, p2 -> 2, p3 -> 3; each needs 0.45" in out
    assert "alternative      p0 -> 4, p1 -> 5, p2 -> 6, p3 -> 7; each needs 0.48" in out
    assert "device 0 shared: baseline p0 + speculative p0 (0.45 + 0.45)" in out
    assert "device 7 shared: alternative p3 + control p3 (0.48 + 0.45)" in out
    assert "4 processes per arm" in out and "a planted +15%" in out
    assert "no decision possible" not in out and "cannot reach a direction" not in out


def test_the_gpu_examples_dry_run_checks_free_memory_where_nvidia_smi_answers(
    tmp_path, monkeypatch, capsys
) -> None:
    """A stand-in ``nvidia-smi`` (no driver here) listing eight idle 80 GB H100s, then four:
    the example's 16 processes fit the eight, and on four it is refused as the run would be,
    with the largest episodes.processes that fits."""
    from specpilot.cli import main

    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "out.csv").write_text("".join(f"{i}, 81559, 1, 81004\n" for i in range(8)))
    _fake_smi(tmp_path / "bin", f'exec /bin/cat "{tmp_path / "out.csv"}"\n')
    assert main(["pilot", str(EXAMPLE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "checked against the free memory of the 8 GPUs nvidia-smi lists" in out
    assert "device 4: alternative p0 + control p0 need 74.1 GiB, 79.1 free" in out
    (tmp_path / "out.csv").write_text("".join(f"{i}, 81559, 1, 81004\n" for i in range(4)))
    assert main(["pilot", str(EXAMPLE), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "episodes.processes 4: 16 engine processes (4 arms x 4) cannot be placed" in err
    assert "device 4 (alternative p0) is not one nvidia-smi lists (0, 1, 2, 3)" in err
    assert "not even one process per arm can be placed" in err  # its lists name GPUs 4-7


# -- the environment reaches the process the pilot starts ---------------------------------------


@pytest.mark.slow
def test_a_started_process_gets_its_devices_in_its_environment_and_manifest(tmp_path) -> None:
    """The builtin server on the CPU (no GPU here: its devices only set the variables), started
    through the pilot's own start step (``ArmLife.start``) with the placement's devices: the
    running process's environment (``/proc/PID/environ``) and the arm's manifest say them."""
    import dataclasses

    from specpilot.pilot.config.settings import LoadSettings
    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.pilot.run.context import RunPlan, new_record
    from specpilot.pilot.run.one_arm import OneArm
    from specpilot.pilot.run.steps import ArmLife
    from specpilot.store import Store
    from specpilot.workload import build_schedule

    opts = {
        "threads": 1,
        "dtype": "float32",
        "max_slots": 1,
        "extra_args": ["--calibration", "skip"],
    }
    base = {"name": "b", "role": "baseline", "engine": "builtin", "options": opts}
    spec = {**base, "name": "s", "role": "speculative"}
    spec["options"] = {**opts, "draft": "truncate:0,1", "k": 2}
    cfg = _cfg({**base, "devices": [[3], [5]]}, spec)
    plans, lines = placed_plans(
        plan_arms(cfg, resolve_files=False), cfg, GpuReading(tuple(h100s(8)))
    )
    assert plans[0].devices == ((3,), (5,)) and plans[1].devices == ()
    assert any("b                p0 -> 3, p1 -> 5; on the CPU" in x for x in lines)
    assert any("s gives no devices: its processes see every GPU" in x for x in lines)
    wl = tmp_path / "w.yaml"
    wl.write_text(
        "seed: 1\ngroups: {code: {weight: 1}}\n"
        "phases: [{name: p, duration_s: 1, arrival: {kind: constant, rate: 1}}]\n"
    )
    with Store(tmp_path / "x.duckdb") as store:
        ctx = OneArm(
            store,
            build_schedule(str(wl)),
            LoadSettings(start_timeout_s=240),
            PilotProgress(quiet=True),
        )
        run = RunPlan(plans[0], 0, 0, "r.b.p1", process=1)
        life = ArmLife(ctx, run, dataclasses.replace(new_record(run, "pid"), status="running"))
        life.start()
        try:
            pid = life.held.engine().pid
            assert pid is not None
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert (
                b"CUDA_VISIBLE_DEVICES=5" in environ and b"CUDA_DEVICE_ORDER=PCI_BUS_ID" in environ
            )
        finally:
            life.stop()
        manifest = store.records("arms", run_id="r.b.p1")[0].manifest
    assert manifest["placement"] == {"CUDA_VISIBLE_DEVICES": "5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_a_pilot_that_cannot_be_placed_is_refused_before_any_engine_starts(
    tmp_path, monkeypatch
) -> None:
    """``Pilot.prepare`` places before the capacity probe, the assets and every start: a
    stand-in ``nvidia-smi`` (no driver here) lists one GPU, and two builtin arms on
    ``--device cuda`` with 2 processes each cannot be placed on it."""
    from specpilot.pilot.run.runner import Pilot

    cuda = {"threads": 1, "extra_args": ["--device", "cuda"]}
    cfg = _cfg(
        {"name": "b", "role": "baseline", "engine": "builtin", "devices": "auto", "options": cuda},
        {"name": "s", "role": "speculative", "engine": "builtin", "devices": "auto",
         "options": {**cuda, "draft": "truncate:0,1", "k": 2}},
    )  # fmt: skip
    (tmp_path / "w.yaml").write_text(
        "seed: 1\ngroups: {code: {weight: 1}}\n"
        "phases: [{name: p, duration_s: 1, arrival: {kind: constant, rate: 1}}]\n"
    )
    monkeypatch.chdir(tmp_path)  # the file's workload: w.yaml
    pilot = Pilot(cfg, tmp_path / "out", base_dir=tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(PilotConfigError, match=r"arm 'b' gives devices:, and this machine's GPUs"):
        pilot.prepare()
    (tmp_path / "out.csv").write_text("0, 81559, 1, 81004\n")
    _fake_smi(tmp_path / "bin", f'exec /bin/cat "{tmp_path / "out.csv"}"\n')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(PilotConfigError) as err:
        pilot.prepare()
    assert err.value.message.startswith("episodes.processes 2: 4 engine processes (2 arms x 2)")
    assert err.value.message.endswith("not even one process per arm can be placed")
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
