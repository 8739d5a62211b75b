"""Quality gates (R7): business checks per task group, greedy consistency and sampled
distribution tests between arms, and the functional-compatibility suite.

    from specpilot.quality import QualityConfig, plan_quality, run_quality_pass, recheck

    cfg = QualityConfig()                                   # the pilot embeds it as quality:
    groups = resolve_groups(workload)                       # checks per group (YAML + built-in)
    plan = plan_quality([load_group("code"), ...], cfg)     # same plan for every arm
    outputs = run_quality_pass(url, model, plan, arm="speculative", cfg=cfg)
    records = recheck(pilot_data, groups)                   # QualityRecord per check per answer
    greedy = greedy_consistency(outputs, "baseline", "speculative", cfg.greedy_threshold)
    tests = distribution_tests(outputs, "baseline", "speculative")
    ni = non_inferiority(pass_rates(records), "baseline", cfg.margin, cfg.alpha)

Modules: ``checks`` (declarations, dispatch) over ``textchecks`` and ``structchecks``;
``sandbox`` (contained code execution); ``consistency`` (greedy); ``sampled`` and ``stats``
(pass rates, non-inferiority, distribution tests); ``runner`` (the quality pass);
``recheck`` (from a pilot file); ``summary`` (the gates' verdict); ``compat`` (the
compatibility suite). Acceptance rate is never a quality metric: nothing here reads it.
"""

from specpilot.quality.checks import (
    Check,
    CheckError,
    CheckResult,
    GroupChecks,
    evaluate,
    group_checks,
    verdict,
)
from specpilot.quality.config import QualityConfig, SandboxConfig
from specpilot.quality.consistency import GreedySummary, compare, greedy_consistency, summarise
from specpilot.quality.recheck import recheck, resolve_groups
from specpilot.quality.runner import QualityRequest, plan_quality, run_quality_pass
from specpilot.quality.sampled import (
    DistributionTest,
    NonInferiority,
    PassRate,
    distribution_tests,
    non_inferiority,
    pass_rates,
)
from specpilot.quality.sandbox import SandboxLimits, SandboxResult, available_isolation, run_tests

__all__ = [
    "Check",
    "CheckError",
    "CheckResult",
    "DistributionTest",
    "GreedySummary",
    "GroupChecks",
    "NonInferiority",
    "PassRate",
    "QualityConfig",
    "QualityRequest",
    "SandboxConfig",
    "SandboxLimits",
    "SandboxResult",
    "available_isolation",
    "compare",
    "distribution_tests",
    "evaluate",
    "greedy_consistency",
    "group_checks",
    "non_inferiority",
    "pass_rates",
    "plan_quality",
    "recheck",
    "resolve_groups",
    "run_quality_pass",
    "run_tests",
    "summarise",
    "verdict",
]
