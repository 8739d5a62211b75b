"""Rollback rules (R8) written from the SLO's thresholds in each engine's own metric names
(``analysis.rollback.engines``): vLLM, SGLang and llama.cpp, checked by promtool where it is
installed (Debian package prometheus), a managed API with the application's rules only."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from pilot_cases import decode_stalled
from specpilot.analysis import AnalysisConfig, analyze

CFG = AnalysisConfig(bootstrap_resamples=200)

CONDITIONS = [
    {"metric": "ttft_ms", "percentile": 90, "max": 400},
    {"metric": "tpot_ms", "percentile": 99, "max": 20},
    {"metric": "itl_ms", "percentile": 90, "max": 30},
    {"metric": "e2e_s", "percentile": 99, "max": 2.5},
]
# engine -> (names its rules must read, prefixes they must not)
NAMES = {
    "vllm": (
        {
            "histogram_quantile(0.99, sum by (le) (rate(vllm:request_time_per_output_token_seconds_bucket",
            "histogram_quantile(0.9, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket",
            "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket",
            "histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket",
            "max(vllm:kv_cache_usage_perc)",
        },
        ("sglang:", "llamacpp:"),
    ),
    "sglang": (
        {
            "histogram_quantile(0.99, sum by (le) (rate(sglang:inter_token_latency_seconds_bucket",
            "histogram_quantile(0.9, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket",
            "histogram_quantile(0.99, sum by (le) (rate(sglang:e2e_request_latency_seconds_bucket",
            "max(sglang:token_usage)",
        },
        ("vllm:", "llamacpp:"),
    ),
    "llamacpp": (
        {
            "sum(rate(llamacpp:tokens_predicted_seconds_total",
            "sum(rate(llamacpp:tokens_predicted_total",
            "max(llamacpp:requests_deferred)",
        },
        ("vllm:", "sglang:", "histogram_quantile"),
    ),
}


@pytest.fixture(scope="module", params=sorted(NAMES))
def rules(request):
    engine = request.param
    cfg = CFG.model_copy(
        update={
            "rollback": CFG.rollback.model_copy(
                update={"group_selectors": {"code": 'model_name="svc-code"'}}
            )
        }
    )
    a = analyze(decode_stalled(CONDITIONS, engine), cfg)
    return engine, a.rollback_yaml["spec"]


def _condition_rules(text: str) -> dict[str, dict]:
    doc = yaml.safe_load(text)
    return {r["alert"]: r for r in doc["groups"][0]["rules"]}


def test_rules_read_the_engines_own_metric_names(rules) -> None:
    engine, text = rules
    want, never = NAMES[engine]
    exprs = "\n".join(r["expr"] for r in _condition_rules(text).values())
    for name in want:
        assert name in exprs, (engine, name)
    for name in never:
        assert name not in exprs, (engine, name)
    assert text.startswith(f"# specpilot rollback rules for spec: {engine}'s metric names")


def test_rules_carry_the_sla_thresholds_in_seconds(rules) -> None:
    engine, text = rules
    by = _condition_rules(text)
    tpot = by["SpecpilotP99TPOTOverSLOCode"]
    assert tpot["expr"].endswith("> 0.02") and 'model_name="svc-code"' in tpot["expr"]
    assert tpot["labels"] == {
        "severity": "page",
        "specpilot_trigger": "tail_latency",
        "task_group": "code",
    }
    if engine == "llamacpp":  # no histograms: a mean over the window where the counters allow
        assert "mean TPOT" in tpot["annotations"]["summary"]
        assert "a mean, not the percentile" in tpot["annotations"]["metrics"]
        assert "SpecpilotP90TTFTOverSLOCode" not in by and "SpecpilotE2EOverSLOCode" not in by
        assert "# not watched: TTFT: llama.cpp exports no TTFT" in text
        assert "# not watched: E2E (deadline, net slower): llama.cpp exports no request" in text
        assert "# not watched: group selectors: llamacpp's series carry no labels" in text
    else:
        assert by["SpecpilotP90TTFTOverSLOCode"]["expr"].endswith("> 0.4")
        assert by["SpecpilotP90ITLOverSLOCode"]["expr"].endswith("> 0.03")
        assert by["SpecpilotP99E2EOverSLOCode"]["expr"].endswith("> 2.5")
        assert "# not watched" not in text


def test_rules_pass_promtool(rules, tmp_path) -> None:
    engine, text = rules
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus); names checked above")
    f = tmp_path / f"rollback-{engine}.rules.yml"
    f.write_text(text)
    out = subprocess.run(
        [promtool, "check", "rules", str(f)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr
    f.write_text(text.replace("sum(rate(", "sum(rate((", 1))
    bad = subprocess.run(
        [promtool, "check", "rules", str(f)], capture_output=True, text=True, check=False
    )
    assert bad.returncode != 0  # promtool parses each expression


def test_a_managed_api_gets_only_the_applications_rules() -> None:
    a = analyze(decode_stalled(CONDITIONS, "openai"), CFG)
    by = _condition_rules(a.rollback_yaml["spec"])
    assert {r["labels"]["specpilot_trigger"] for r in by.values()} == {"key_business_regression"}
    assert "# not watched: memory pressure" in a.rollback_yaml["spec"]
