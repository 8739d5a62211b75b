"""``QualityConfig``: how much the quality pass sends per arm and the thresholds of the gates
(pydantic: the pilot config embeds it as ``quality:``).

Defaults are sized for the default pilot: about 6 arms on 2 CPU cores inside a 10-minute
pilot, so each arm's quality pass must stay near 30-60 s at SmolLM2 speed (~55 tokens/s at
batch 1). Per arm: 3 prompts x 2 greedy groups at the group's own length (~750 tokens
measured; the business checks need whole answers), and 2 prompts x 12 seeded samples x 2
sampled groups capped at 24 tokens (1,152 tokens, sent 4 at a time) for the distribution
tests: ~1,900 tokens, 123 s measured for the 3-prompt variant (2,463 tokens) on a loaded
machine (Intel Xeon, 2 cores, load ~5), so ~35 s on a quiet one: provisional.

Power at these sizes. Distribution tests: a wrong acceptance rule (min(1, q/p)) with the
shipped draft lowered the samples' mean target log-prob by 1.0-2.8 nats and their top-1 rate
from 0.51-0.74 to 0.30-0.50 (N = 12, 3 prompts per group, bf16): p at the permutation floor
(0.0005) in both sampled groups; the correct rule gave p >= 0.5 against plain (the tests in
``tests/test_quality_sampled.py`` keep this honest). The per-position token tests see only
large distortions at this N (position 0 comes from prefill and never differs). Key-error pass
rates of sampled groups come from the load phases' full answers (each scheduled request has
its own seed, the same in every arm); the Newcombe non-inferiority test with a 10-point
margin needs ~300 answers per arm at a 50% pass rate (~25 at 0% or 100%) for 80% power, so a
10-minute pilot usually reports ``underpowered`` with the n it would need.

    >>> QualityConfig().samples, QualityConfig(samples=4).sandbox.cpu_s
    (12, 10)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specpilot.quality.sandbox import SandboxLimits
from specpilot.validation import StrictModel

_Model = StrictModel  # unknown keys refused, frozen (specpilot.validation)


class SandboxConfig(_Model):
    isolation: Literal["auto", "bwrap", "unshare", "rlimits"] = "auto"
    cpu_s: int = Field(default=10, ge=1)
    wall_s: float = Field(default=20.0, gt=0)
    per_test_s: float = Field(default=5.0, gt=0)
    memory_mb: int = Field(default=1024, ge=64)
    file_mb: int = Field(default=1, ge=1)
    processes: int = Field(default=32, ge=4)

    def limits(self) -> SandboxLimits:
        return SandboxLimits(
            cpu_s=self.cpu_s,
            wall_s=self.wall_s,
            per_test_s=self.per_test_s,
            memory_bytes=self.memory_mb << 20,
            file_bytes=self.file_mb << 20,
            processes=self.processes,
        )


class QualityConfig(_Model):
    # the quality pass (per arm)
    greedy_prompts: int = Field(default=3, ge=0, description="eval prompts per greedy group")
    greedy_max_tokens: int | None = Field(
        default=None, ge=1, description="None: the group's own length"
    )
    sampled_prompts: int = Field(default=2, ge=0, description="eval prompts per sampled group")
    samples: int = Field(
        default=12, ge=1, description="N seeded samples per sampled prompt per arm"
    )
    sampled_max_tokens: int | None = Field(
        default=24, ge=2, description="cap for distribution samples"
    )
    top_logprobs: int = Field(default=5, ge=2, le=20)
    concurrency: int = Field(
        default=4, ge=1, description="sampled requests in flight (greedy: one)"
    )
    timeout_s: float = Field(default=120.0, gt=0)
    seed: int = 0
    # the gates
    margin: float = Field(default=0.10, gt=0, lt=1, description="non-inferiority margin (absolute)")
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    min_power: float = Field(default=0.8, gt=0, lt=1)
    uninformative_below: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description=(
            "a key check the baseline passes less often than this is uninformative: reported, "
            "never a gate (SmolLM2 fails most code tests and schemas itself)"
        ),
    )
    greedy_threshold: float = Field(
        default=0.5, ge=0, description="nats; a divergence above: defect"
    )
    positions: list[int] = Field(default_factory=lambda: [0, 1], min_length=1)
    span: int = Field(default=24, ge=1, description="tokens per sample for the log-prob statistics")
    permutations: int = Field(default=2000, ge=99)
    sandbox: SandboxConfig = Field(default_factory=lambda: SandboxConfig())
