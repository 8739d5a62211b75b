"""Calibration: the choice rule over injected timing tables (both machine kinds), records and
cache, the hardware probe, measurements on a tiny model, and build_engine(dtype="auto")."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import tiny_model
from specpilot.engine.calibrate import CalibrationPlan, calibrate, complete_curve
from specpilot.engine.calibration import (
    CHOSEN,
    ELIGIBLE,
    OUT_OF_TOLERANCE,
    PRUNED,
    SLOW_PREFILL,
    Calibration,
    FormatResult,
    RoleCalibration,
    Tolerance,
    cache_key,
    choose_format,
    load_cached,
    resolve_mode,
    store,
)
from specpilot.engine.hardware import HardwareProbe, parse_cpuinfo, probe
from specpilot.engine.sampling import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")
POINTS = [(1, 1), (1, 4)]


def fr(
    name: str, t1: float, t4: float, top1: float = 0.99, kl: float = 0.005, **kw
) -> FormatResult:
    return FormatResult(name, top1=top1, kl=kl, curve={(1, 1): t1, (1, 4): t4}, **kw)


def avx2_table() -> list[FormatResult]:
    """Target forward ms as on the AVX2-only EPYC of issue 13: bf16 emulated (verify 2.19x),
    small-M fp32 slow, the int8 kernel with bf16 activations flat up to 4 rows."""
    return [
        fr("fp32", 0.040, 0.110, top1=1.0, kl=0.0),
        fr("bf16", 0.034, 0.0745, kl=0.002),
        fr("int8-bf16", 0.024, 0.029, kl=0.008),
        fr("int8-fp32", 0.300, 0.900, kl=0.006),
        fr("q4-bf16", 0.020, 0.026, top1=0.90, kl=0.04),
    ]


def avx512_table() -> list[FormatResult]:
    """As measured on the AVX-512 BF16 machine: bf16 flat, the int kernels linear in rows."""
    return [
        fr("fp32", 0.035, 0.067, top1=1.0, kl=0.0),
        fr("bf16", 0.0174, 0.0180, kl=0.002),
        fr("int8-bf16", 0.0120, 0.0260, kl=0.008),
    ]


def test_avx2_machine_chooses_int8_with_bf16_activations() -> None:
    table = avx2_table()
    name, reason = choose_format(table, Tolerance(), POINTS)
    assert name == "int8-bf16"
    status = {r.format: r.status for r in table}
    assert status == {
        "fp32": ELIGIBLE,
        "bf16": ELIGIBLE,
        "int8-bf16": CHOSEN,
        "int8-fp32": ELIGIBLE,
        "q4-bf16": OUT_OF_TOLERANCE,  # fastest of all, but 0.90 top-1
    }
    assert reason.startswith("int8-bf16: 53.0 ms at b=1,n=1 + b=1,n=4")
    assert "bf16 2.05x" in reason and "q4-bf16 out of tolerance (top-1 0.900" in reason


def test_avx512_machine_keeps_bf16() -> None:
    name, _ = choose_format(avx512_table(), Tolerance(), POINTS)
    assert name == "bf16"  # 35.4 ms against int8's 38.0: its verify of 4 costs 2.2x one step
    name, _ = choose_format(avx512_table(), Tolerance(), [(1, 1)])  # plain decoding only
    assert name == "int8-bf16"


def test_a_close_race_goes_to_the_format_nearer_fp32() -> None:
    table = [fr("bf16", 0.0174, 0.0180, kl=0.002), fr("int8-bf16", 0.0170, 0.0177, kl=0.008)]
    name, reason = choose_format(table, Tolerance(), POINTS)
    assert name == "bf16" and "within 5% of the fastest (int8-bf16;" in reason
    table = [fr("bf16", 0.0174, 0.0180, kl=0.002), fr("int8-bf16", 0.0170, 0.0177, kl=0.008)]
    assert choose_format(table, Tolerance(), POINTS, margin=0.0)[0] == "int8-bf16"


def test_a_gap_inside_the_timings_noise_does_not_decide() -> None:
    # q4-bf16 is 20% faster in these medians, but the repeated calls spread by 30%: a noisy
    # machine's draw. The choice stays with the format nearer fp32 (the same on every run).
    table = [fr("bf16", 0.020, 0.021, kl=0.002), fr("q4-bf16", 0.016, 0.017, kl=0.010)]
    for r in table:
        r.noise = 0.30
    name, reason = choose_format(table, Tolerance(), POINTS)
    assert name == "bf16" and "the timings' noise, 30%" in reason
    for r in table:
        r.noise = 0.05  # a quiet machine: the 20% is real and wins
    assert choose_format(table, Tolerance(), POINTS)[0] == "q4-bf16"


def test_prefill_guard_excludes_a_format_with_slow_time_to_first_token() -> None:
    table = [
        fr("bf16", 0.0174, 0.0180, prefill_s=0.09),
        fr("q4-bf16", 0.0100, 0.0150, prefill_s=0.40),
        fr("int8-bf16", 0.0120, 0.0160, prefill_s=0.15),
    ]
    name, reason = choose_format(table, Tolerance(), POINTS)
    assert name == "int8-bf16" and table[1].status == SLOW_PREFILL
    assert "q4-bf16 slow_prefill: prefill 4.4x the fastest format's" in reason
    assert choose_format(table, Tolerance(), POINTS, max_prefill_ratio=5.0)[0] == "q4-bf16"


def test_expected_speedup_by_hand() -> None:
    from specpilot.engine.calibration import expected_speedup

    # E[c] = (1 - 0.5^4) / 0.5 = 1.875; k c + v = 0.3 + 1.0
    assert expected_speedup(0.5, 3, 0.1, 1.0) == pytest.approx(1.875 / 1.3)
    assert expected_speedup(1.0, 3, 0.1, 1.3) == pytest.approx(4 / 1.6)  # every draft kept


def test_draft_format_trades_agreement_against_cost() -> None:
    """Target step 20 ms, v(4) = 1.3, k = 3. bf16 draft: 8.9 ms, agreement 0.50 -> 1.875 /
    (3 * 0.445 + 1.3) = 0.712x; int8: 3.3 ms, 0.47 -> 1.7947 / (0.495 + 1.3) = 1.000x."""
    from specpilot.engine.calibration import choose_draft

    def table(int8_agreement: float) -> list[FormatResult]:
        return [
            FormatResult("bf16", top1=0.50, kl=0.9, curve={(1, 1): 0.0089}),
            FormatResult("int8-bf16", top1=int8_agreement, kl=1.0, curve={(1, 1): 0.0033}),
            FormatResult("q4-bf16", status=PRUNED, note="slow"),
        ]

    name, reason = choose_draft(table(0.47), 0.020, 1.3, 3, "bf16")
    assert name == "int8-bf16" and "Leviathan factor 1.00 at k=3 with alpha = 0.470" in reason
    assert "bf16 0.71" in reason and "q4-bf16 pruned: slow" in reason
    # an int8 draft that agrees far less loses although it is cheaper: 1.111 / 1.795 = 0.62x
    assert choose_draft(table(0.10), 0.020, 1.3, 3, "bf16")[0] == "bf16"
    assert choose_draft([], 0.020, 1.3, 3, "bf16")[0] == "bf16"


def test_nothing_within_tolerance_falls_back_and_missing_points_prune() -> None:
    table = [fr("bf16", 0.01, 0.01, top1=0.5), FormatResult("int8-bf16", top1=1.0, kl=0.0)]
    name, reason = choose_format(table, Tolerance(), POINTS, fallback="bf16")
    assert name == "bf16" and reason.startswith("no format was measured within tolerance")
    assert table[1].status == PRUNED  # within tolerance but never timed


def test_tolerance_bounds_are_inclusive_and_need_both_figures() -> None:
    tol = Tolerance(min_top1=0.96, max_kl=0.02)
    assert tol.admits(0.96, 0.02) and not tol.admits(0.959, 0.0) and not tol.admits(1.0, 0.021)
    assert not tol.admits(None, 0.0)


def _calibration() -> Calibration:
    curve = {(1, 1): 0.020, (1, 2): 0.021, (1, 4): 0.025, (4, 1): 0.030, (4, 4): 0.045}
    target = RoleCalibration(
        "target",
        [FormatResult("bf16", 0.99, 0.002, 10, curve, 0.09, CHOSEN)],
        "bf16",
        "why",
        POINTS,
    )
    return Calibration("measured", "k" * 64, {"cpu_model": "x"}, Tolerance(), target)


def test_verify_ratio_and_round_trip() -> None:
    cal = _calibration()
    ratio = cal.verify_ratio()
    assert ratio[1] == pytest.approx({1: 1.0, 2: 1.05, 4: 1.25})
    assert ratio[4] == pytest.approx({1: 1.0, 4: 1.5})
    d = json.loads(json.dumps(cal.to_dict()))
    assert d["verify_ratio"]["4"]["4"] == pytest.approx(1.5)
    back = Calibration.from_dict(d)
    assert back.to_dict() == cal.to_dict() and back.target.results[0].curve[(4, 4)] == 0.045


def test_cache_store_load_and_refusals(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path))
    cal = _calibration()
    cal.key = cache_key({"target": "abc", "hardware": {"cpu_model": "x"}})
    assert cache_key({"target": "abc", "hardware": {"cpu_model": "y"}}) != cal.key
    assert load_cached(cal.key) is None
    path = store(cal)
    assert path is not None and path.parent == tmp_path / "calibration"
    got = load_cached(cal.key)
    assert got is not None and got.cached and got.target.chosen == "bf16"
    path.write_text("{not json")
    assert load_cached(cal.key) is None  # unreadable: measured again, never a crash


def test_mode_from_flag_or_environment(monkeypatch) -> None:
    monkeypatch.delenv("SPECPILOT_CALIBRATION", raising=False)
    assert resolve_mode(None) == "auto"
    monkeypatch.setenv("SPECPILOT_CALIBRATION", "skip")
    assert resolve_mode(None) == "skip" and resolve_mode("force") == "force"
    with pytest.raises(ValueError, match="--calibration must be one of auto, force, skip"):
        resolve_mode("sometimes")
    monkeypatch.setenv("SPECPILOT_CALIBRATION", "never")
    with pytest.raises(ValueError, match=r"\$SPECPILOT_CALIBRATION must be"):
        resolve_mode(None)


EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 avx fma f16c avx2 bmi2
physical id\t: 0
core id\t\t: 0

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 avx fma f16c avx2 bmi2
physical id\t: 0
core id\t\t: 0
"""
XEON = EPYC.replace("AMD EPYC 7B13", "Intel(R) Xeon(R) Processor").replace(
    "avx2 bmi2", "avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8"
)


def test_cpuinfo_parsing_and_machine_kind() -> None:
    amd = parse_cpuinfo(EPYC)
    assert amd == type(amd)("AMD EPYC 7B13", ("avx2", "fma", "f16c"), 1)  # 2 threads, 1 core
    intel = parse_cpuinfo(XEON.replace("core id\t\t: 0\n\n", "core id\t\t: 1\n\n", 1))
    assert intel.physical_cores == 2 and "amx_bf16" in intel.flags
    kinds = {name: _probe_with(info.flags).kind for name, info in (("amd", amd), ("intel", intel))}
    assert kinds == {"amd": "cpu-avx2", "intel": "cpu-amx"}
    assert _probe_with(("avx2", "avx512f", "avx512_bf16")).kind == "cpu-avx512-bf16"
    base = probe()
    assert base.torch_threads == torch.get_num_threads() and base.device == "cpu"


def _probe_with(flags: tuple[str, ...]) -> HardwareProbe:
    d = probe().to_dict()
    d.pop("kind")
    return HardwareProbe(**{**d, "cpu_flags": flags})


def test_skip_rule_follows_native_bf16() -> None:
    from specpilot.engine.autoformat import skip_rule

    assert skip_rule(_probe_with(("avx2", "fma"))) == "fp32"
    assert skip_rule(_probe_with(("avx2", "avx512_bf16"))) == "bf16"


def test_calibrate_measures_a_tiny_model_and_prunes() -> None:
    target = tiny_model(4, n_layers=2, dim=64)
    plan = CalibrationPlan(
        candidates=("fp32", "bf16", "int8-bf16"), batches=(1, 2), k=2, reps=1,
        curve_tokens=(1, 2, 3), ctx=16, prune_factor=100.0,  # timing noise prunes nothing
    )  # fmt: skip
    cal = calibrate(target, None, plan, key="k", hardware={})
    role = cal.target
    fp32 = role.result("fp32")
    assert fp32 is not None and fp32.top1 == 1.0 and fp32.kl == 0.0
    assert set(fp32.curve) == {(1, 1), (1, 3), (2, 1), (2, 3)} and fp32.prefill_s is not None
    assert role.chosen in plan.candidates and role.result(role.chosen).status == CHOSEN
    assert all(r.top1 is not None and r.top1 > 0.5 for r in role.results)
    complete_curve(role, target, plan)
    assert set(role.result(role.chosen).curve) == {(b, n) for b in (1, 2) for n in (1, 2, 3)}
    # prune_factor 0: every format after the first is slower than 0 x the best: pruned at its
    # first (warm-up) call, before any point is recorded or its quality compared
    strict = CalibrationPlan(**{**plan.__dict__, "prune_factor": 0.0})
    roles = calibrate(tiny_model(4, n_layers=2, dim=64), None, strict, key="k", hardware={}).target
    assert [r.status for r in roles.results][1:] == [PRUNED, PRUNED] and roles.chosen == "fp32"
    assert all(r.curve == {} and r.top1 is None for r in roles.results[1:])
    assert roles.results[0].top1 == 1.0  # fp32 itself was measured in full


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A 2-layer Llama checkpoint directory with the default target's tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specpilot.engine.loader import default_target_path, load_tokenizer

    tok = load_tokenizer(default_target_path())
    d = tmp_path_factory.mktemp("tiny_llama")
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)  # test-only weight init
    LlamaForCausalLM(cfg).eval().save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_build_engine_auto_calibrates_once_then_reads_the_cache(
    tiny_checkpoint, tmp_path, monkeypatch
) -> None:
    from specpilot.engine.runtime import build_engine

    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECPILOT_CALIBRATION", raising=False)
    kw = {"max_slots": 2, "max_seq_len": 256, "k": 2}
    first, spec = build_engine(tiny_checkpoint, "truncate:0", **kw)
    cal = first.calibration
    assert cal is not None and cal["mode"] == "measured" and not cal["cached"]
    assert spec.dtype == cal["target"]["chosen"] == first.target.weight_format
    assert spec.draft_dtype == cal["draft"]["chosen"] == first.draft.weight_format
    act = {"fp32": "fp32", "int8-fp32": "fp32"}.get(spec.dtype, "bf16")  # shared embedding
    assert {"fp32": "fp32", "int8-fp32": "fp32"}.get(spec.draft_dtype, "bf16") == act
    assert set(cal["verify_ratio"]) == {"1", "2"} and len(cal["verify_ratio"]["2"]) == 8
    second, _ = build_engine(tiny_checkpoint, "truncate:0", **kw)
    assert second.calibration["cached"] and second.calibration["key"] == cal["key"]
    assert second.target.weight_format == spec.dtype
    other, _ = build_engine(tiny_checkpoint, "truncate:0", **{**kw, "max_slots": 1})
    assert other.calibration["key"] != cal["key"]  # the server's batch is part of the key
    fixed, fspec = build_engine(tiny_checkpoint, None, dtype="fp32", calibration="skip", **kw)
    assert fixed.calibration["mode"] == "skipped" and fspec.dtype == "fp32"
    forced, _ = build_engine(tiny_checkpoint, None, dtype="bf16", calibration="force", **kw)
    fc = forced.calibration
    assert fc["mode"] == "fixed" and not fc["cached"] and fc["target"]["chosen"] == "bf16"
    out = forced.generate([1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True))
    assert out.output_tokens == 4


def test_server_metrics_expose_the_calibration() -> None:
    from specpilot.serve.metrics import ServerMetrics

    m = ServerMetrics("m")
    cal = _calibration().to_dict()
    cal["hardware"]["kind"] = "cpu-amx"
    m.calibration(cal)
    text = m.exposition().decode()
    assert (
        'specpilot_calibration_verify_cost_ratio{batch="4",model_name="m",tokens="4"} 1.5' in text
    )
    assert (
        'specpilot_weight_format_info{format="bf16",hardware="cpu-amx",mode="measured",'
        'model_name="m",role="target"} 1.0'
    ) in text
    assert (
        'specpilot_calibration_forward_seconds{batch="1",model_name="m",tokens="2"} 0.021' in text
    )
    cal["target"]["chosen"] = "int8-bf16"
    cal["key"] = "another"
    m.calibration(cal)  # a new calibration replaces the old series
    text = m.exposition().decode()
    assert 'format="int8-bf16"' in text and 'format="bf16"' not in text
