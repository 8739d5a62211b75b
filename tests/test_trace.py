"""Trace loading (Azure CSV, generic CSV/JSONL), scaling, and the window finder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specpilot.errors import ConfigError, InputFileError
from specpilot.workload import find_windows, load_trace
from specpilot.workload.trace import Trace, rate_series

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"


def _azure_csv(path: Path, stamps: list[str], ctx: list[int], gen: list[int]) -> Path:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"{s},{c},{g}" for s, c, g in zip(stamps, ctx, gen, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_azure_format_with_seven_fractional_digits(tmp_path):
    f = _azure_csv(
        tmp_path / "AzureLLMInferenceTrace_conv.csv",
        [
            "2023-11-16 18:15:46.6805900",
            "2023-11-16 18:15:50.9951690",
            "2023-11-16 18:15:51.2224670",
        ],
        [374, 396, 879],
        [44, 109, 55],
    )
    tr = load_trace(f)
    assert tr.n == 3
    assert tr.t.tolist() == pytest.approx([0.0, 4.314579, 4.541877], abs=1e-6)
    assert tr.input_tokens.tolist() == [374, 396, 879] and tr.output_tokens.tolist() == [
        44,
        109,
        55,
    ]
    assert tr.start_time.startswith("2023-11-16 18:15:46.68059")


def test_generic_csv_and_jsonl_and_unsorted_input(tmp_path):
    csv_f = tmp_path / "t.csv"
    csv_f.write_text("timestamp,input_tokens,output_tokens\n10.5,100,7\n10.0,50,3\n12.0,80,9\n")
    tr = load_trace(csv_f)
    assert tr.t.tolist() == [0.0, 0.5, 2.0] and tr.input_tokens.tolist() == [50, 100, 80]
    jl = tmp_path / "t.jsonl"
    jl.write_text(
        "\n".join(
            json.dumps({"timestamp_ms": ms, "prompt_tokens": 5, "completion_tokens": 6})
            for ms in (0, 250, 1000)
        )
    )
    assert load_trace(jl).t.tolist() == [0.0, 0.25, 1.0]
    iso = tmp_path / "iso.csv"
    iso.write_text(
        "time,context_tokens,generated_tokens\n2024-01-01T00:00:00Z,1,2\n2024-01-01T01:00:01.5+01:00,3,4\n"
    )
    assert load_trace(iso).t.tolist() == [0.0, 1.5]
    iso.write_text("time,context_tokens,generated_tokens\n2024-01-01T00:00:00,1,2\nyesterday,3,4\n")
    with pytest.raises(InputFileError, match="cannot parse timestamps") as err:
        load_trace(iso)
    assert err.value.fix == "use seconds or ISO 8601"


def test_missing_columns_name_the_accepted_names(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("when,in,out\n1,2,3\n")
    with pytest.raises(
        InputFileError, match=r"no timestamp column \(found: when, in, out\)"
    ) as err:
        load_trace(f)
    assert err.value.fix is not None and err.value.fix.startswith("name it one of timestamp, time")
    with pytest.raises(InputFileError, match="trace not found"):
        load_trace(tmp_path / "none.csv")


def test_malformed_jsonl_and_ragged_rows_name_the_line(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"t": 0, "input_tokens": 1, "output_tokens": 2}\n{"t": 1, "input_tokens": 1,\n')
    with pytest.raises(InputFileError, match=r"t\.jsonl:2: not valid JSON"):
        load_trace(f)
    f.write_text('{"t": 0, "input_tokens": 1, "output_tokens": 2}\n{"t": 1, "input_tokens": 1}\n')
    with pytest.raises(InputFileError, match="row 2 has no 'output_tokens'"):
        load_trace(f)
    f.write_text("[1, 2]")
    with pytest.raises(InputFileError, match="must be a JSON object"):
        load_trace(f)


def test_scaling_and_windows_of_a_synthetic_trace():
    rng = np.random.default_rng(0)
    # 20 min: quiet (1/s), busy (4/s), then 1/s with a 10-second burst of 20/s at t=900.
    t = np.concatenate(
        [
            np.sort(rng.uniform(0, 600, 600)),
            np.sort(rng.uniform(600, 780, 720)),
            np.sort(rng.uniform(780, 1200, 420)),
            np.sort(rng.uniform(900, 910, 200)),
        ]
    )
    tr = Trace.from_arrays(t, rng.integers(100, 2000, t.size), rng.integers(10, 500, t.size))
    w = find_windows(tr, window_s=120, burst_s=10, context_s=60)
    assert w["peak"].start_s >= 600 and w["peak"].end_s <= 790
    assert w["peak"].rate > 3.5 and w["peak"].ratio > 2
    assert w["off_peak"].rate < 1.4 and not (600 <= w["off_peak"].start_s < 780)
    b = w["burst"]
    assert 895 <= b.start_s <= 905 and b.rate > 15 and b.jump > 8 and b.baseline_rate < 2
    assert set(w) == {"off_peak", "peak", "burst"}
    sub = tr.window(w["peak"].start_s, w["peak"].end_s)
    assert sub.n == w["peak"].requests and sub.t.min() >= 0
    s = sub.scaled(time_scale=10, length_scale=0.1, max_input_tokens=150, max_output_tokens=20)
    assert s.t.max() == pytest.approx(sub.t.max() * 10)
    assert (
        s.input_tokens.max() <= 150 and s.output_tokens.max() <= 20 and s.output_tokens.min() >= 1
    )
    starts, rates = rate_series(tr, 60.0)
    assert starts[0] == 0 and rates.max() > 3.5
    with pytest.raises(ConfigError, match="longer than the trace"):
        find_windows(tr, window_s=5000)


def test_off_peak_skips_empty_windows():
    t = np.concatenate([np.arange(0, 100, 1.0), np.arange(400, 500, 0.5)])  # a 300 s gap
    w = find_windows(Trace.from_arrays(t, np.ones(t.size), np.ones(t.size)), window_s=50, step_s=10)
    # Windows inside the gap are empty: a gap is not a load level to replay.
    assert w["off_peak"].requests > 0 and w["off_peak"].rate < 1.0


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/data/traces not present")
def test_real_azure_conv_trace():
    tr = load_trace(SHARED_TRACES / "AzureLLMInferenceTrace_conv.csv")
    assert tr.n == 19366 and 3400 < tr.duration_s < 3600 and 5.0 < tr.rate < 6.0
    w = find_windows(tr, window_s=300, burst_s=10, context_s=120)
    assert w["off_peak"].rate < tr.rate < w["peak"].rate
    assert w["peak"].ratio > 1.2 and w["burst"].rate > tr.rate
    assert w["peak"].start_time.startswith("2023-11-16 18:")
