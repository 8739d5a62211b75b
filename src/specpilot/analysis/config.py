"""What the analysis may be told: thresholds, bootstrap settings, cost inputs (pydantic, an edge).

The pilot config embeds ``AnalysisConfig`` under ``analysis:``; every field has a default, so an
empty mapping is valid. Unknown keys are refused with the field named (``extra="forbid"``).

    >>> cfg = AnalysisConfig.model_validate({"bootstrap_resamples": 500, "verdict": {"slo_attainment": 0.9}})
    >>> cfg.verdict.slo_attainment, cfg.tune_k.min_runs, cfg.seed
    (0.9, 3, 0)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specpilot.validation import FieldProblem, StrictModel

_Model = StrictModel  # unknown keys refused, frozen (specpilot.validation)


class TuneKConfig(_Model):
    """vLLM's ``tune_speculative_k`` method (benchmarks/sweep): defaults as vLLM's CLI."""

    min_runs: int = Field(
        default=3, ge=1, description="runs per (k, group, load level) after rejection"
    )
    uncertainty_penalty: float = Field(
        default=1.0, ge=0, description="score = median - p * 1.4826 * MAD"
    )
    relative_tolerance: float = Field(
        default=0.01, ge=0, lt=1, description="ties prefer the smaller k"
    )
    max_relative_mad: float = Field(
        default=0.1, ge=0, description="MAD / median above this: unstable"
    )
    objective: Literal["goodput", "output_tokens_per_s"] = "goodput"


class VerdictConfig(_Model):
    """The explicit thresholds of the verdict; SLOs themselves come from each request's group."""

    slo_attainment: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="on-time fraction a load level must reach to meet the SLOs",
    )
    min_e2e_gain: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="a direction needs the task-time CI entirely beyond this margin (either side)",
    )
    equivalence_margin: float = Field(
        default=0.10,
        ge=0,
        lt=1,
        description=(
            "'no difference' only when the deciding task-time interval lies inside +-this "
            "(an equivalence test); a cell neither beyond 0 nor inside it is undecided"
        ),
    )
    min_pairs: int = Field(
        default=8,
        ge=8,
        description=(
            "both-ok pairs a cell needs for a direction; fewer: insufficient. 8: the exact "
            "sign-flip test's smallest p-value is 2^(1-n), 0.0078 at 8 pairs, below 0.05/6 "
            "(Holm over the default pilot's testable cells); in a larger family Tarone's rule "
            "leaves out the cells too small to reach the threshold, so 8 never over-claims"
        ),
    )
    min_effect: float = Field(
        default=0.10,
        gt=0,
        lt=1,
        description="the smallest relative task-time change worth detecting (power, pairs needed)",
    )
    min_requests_per_group: int = Field(
        default=30, ge=1, description="fewer paired requests in a group: PILOT_HYPOTHESIS"
    )
    max_ci_halfwidth: float = Field(
        default=0.10,
        gt=0,
        description="relative task-time CI half-width above this: too few samples",
    )
    min_decode_share: float = Field(
        default=0.3, ge=0, le=1, description="decode share of task time below this: fix that first"
    )
    required_groups: list[str] = Field(
        default_factory=list, description="task groups the verdict must cover"
    )
    representative_traffic: bool | None = Field(
        default=None,
        description="None: judged from the pilot config (trace arrivals, imported prompts)",
    )


class TokenPrice(_Model):
    """A hosted API's bill for one arm: its price per million tokens."""

    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)
    currency: str | None = None  # None: the cost section's currency (another one is refused)


class CostConfig(_Model):
    """Inputs of the cost section (R8); none is required, and an item whose inputs are not
    given is shown as not priced (``analysis.service.ledger``), never as 0. Amounts are in
    ``currency``; hours are engineer hours."""

    device_hour_price: float | None = Field(default=None, ge=0)
    currency: str = "USD"
    business_value_per_on_time_task: float | None = Field(
        default=None,
        ge=0,
        description="a confirmed business value: only then may a latency gain be a saving",
    )
    devices_per_arm: dict[str, float] = Field(
        default_factory=dict,
        description="devices an arm holds (default: its budget's devices, or 1)",
    )
    target_peak_rate: float | None = Field(
        default=None,
        gt=0,
        description="req/s to provision for (default: the highest offered phase rate)",
    )
    monthly_tasks: float | None = Field(
        default=None, ge=0, description="tasks served a month (the monthly figures)"
    )
    engineer_hour_price: float | None = Field(default=None, ge=0)
    adaptation_hours: float | None = Field(
        default=None, ge=0, description="one-off: adapting and tuning the strategy (k, draft)"
    )
    regression_hours_per_upgrade: float | None = Field(
        default=None, ge=0, description="re-measuring after a target or engine upgrade"
    )
    upgrades_per_year: float | None = Field(default=None, ge=0)
    drills_per_year: float | None = Field(default=None, ge=0, description="rollback drills")
    hours_per_drill: float | None = Field(default=None, ge=0)
    on_call_hours_per_year: float | None = Field(
        default=None, ge=0, description="on-call time the rollback rules add"
    )
    token_prices: dict[str, TokenPrice] = Field(
        default_factory=dict, description="arm -> a hosted API's price per million tokens"
    )

    @model_validator(mode="after")
    def _one_currency(self) -> CostConfig:
        for arm, p in self.token_prices.items():
            if p.currency is not None and p.currency != self.currency:
                raise FieldProblem(
                    f"token_prices.{arm} is in {p.currency}, the cost section in {self.currency}",
                    fix=f"give every price in {self.currency} (or set cost.currency: "
                    f"{p.currency} and every price in it)",
                    path=("token_prices", arm, "currency"),
                )
        return self


class RollbackConfig(_Model):
    """How the rollback triggers are written as Prometheus alerting rules."""

    rate_window: str = Field(default="5m", pattern=r"^[0-9]+[smhd]$")
    hold_for: str = Field(default="10m", pattern=r"^[0-9]+[smhd]$")
    group_selectors: dict[str, str] = Field(
        default_factory=dict,
        description='task group -> PromQL label matcher that isolates it, e.g. model_name="svc-code"',
    )
    group_slowdown_tolerance: float = Field(default=0.10, ge=0)
    kv_usage_limit: float = Field(default=0.90, gt=0, le=1)
    key_failure_ratio: float = Field(default=0.0, ge=0, le=1)


class AnalysisConfig(_Model):
    """Everything the analysis may be told; the pilot config's ``analysis:`` section."""

    bootstrap_resamples: int = Field(default=1000, ge=100, le=100_000)
    ci_level: float = Field(default=0.95, gt=0.5, lt=1)
    episode_pooling: bool = Field(
        default=True,
        description="the episode design's estimator pools a process component it cannot tell "
        "from episode noise (analysis.episodes); the sequential looks test without it",
    )
    seed: int = 0
    decode_speedup_for_amdahl: float = Field(
        default=2.0, gt=0, description="decode speed-up assumed when recommending tasks from traces"
    )
    tune_k: TuneKConfig = Field(default_factory=lambda: TuneKConfig())
    verdict: VerdictConfig = Field(default_factory=lambda: VerdictConfig())
    cost: CostConfig = Field(default_factory=lambda: CostConfig())
    rollback: RollbackConfig = Field(default_factory=lambda: RollbackConfig())
