"""Records: quality, compatibility and the rollback drill (R7, R8) (see ``specpilot.records``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# -- quality, compatibility and the rollback drill (R7, R8) --------------------------------

SEVERITIES = ("key", "minor")


@dataclass
class QualityRecord:
    """One business check on one output (R7). Acceptance rate is never a quality metric.

    kind: json_schema | code_tests | regex | required | forbidden | numeric | length | lines |
    consistency_only (no check declared for the group). ``reasons`` name the key errors
    ("amount field missing", "schema violation: /age not an integer", "tests fail:
    test_empty"); empty when the check passed. ``sample_index``/``seed``: which of the N
    seeded runs of a sampled prompt this output is. ``isolation``: what contained the code
    sandbox (bwrap | unshare | rlimits), None for other kinds.
    """

    run_id: str
    arm: str
    task_group: str
    prompt_id: str
    check_name: str
    kind: str
    severity: str  # key | minor
    passed: bool
    reasons: list[str] = field(default_factory=list)
    request_id: str | None = None
    sample_index: int = 0
    seed: int | None = None
    score: float | None = None
    manifest_sha256: str = ""
    isolation: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OutputRecord:
    """One generation made for the quality pass (not under load): text, tokens, log-probs.

    tokens: the output as the server's token strings (OpenAI ``logprobs.content[].token``);
    token_logprobs: their log-probs; top_logprobs: per position, [[token, logprob], ...] best
    first (the margin at a divergence comes from here).
    """

    run_id: str
    arm: str
    task_group: str
    prompt_id: str
    sample_index: int
    seed: int | None
    temperature: float
    text: str
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[list[Any]]] = field(default_factory=list)
    finish_reason: str | None = None
    manifest_sha256: str = ""
    error: str | None = None
    max_tokens: int | None = None  # the request's cap (a capped sample is not business-checked)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ConsistencyRecord:
    """A greedy prompt's output in a candidate arm against the baseline arm (R1, R7).

    identical: token for token. At the first divergence: the position, both tokens, the
    target's (baseline's) log-probs of both tokens there and its top-1 minus top-2 margin; a
    divergence whose margin exceeds ``margin_threshold`` is a ``defect`` to investigate, one
    below it a near-tie flip (float non-associativity), recorded not failed.
    """

    pilot_id: str
    task_group: str
    prompt_id: str
    baseline_arm: str
    candidate_arm: str
    identical: bool
    divergence_index: int | None = None
    baseline_token: str | None = None
    candidate_token: str | None = None
    baseline_logprob: float | None = None  # of the baseline's token, at the divergence
    candidate_logprob: float | None = None  # of the candidate's token, under the baseline
    margin: float | None = None
    margin_threshold: float | None = None
    defect: bool = False
    baseline_manifest_sha256: str = ""
    candidate_manifest_sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COMPAT_STATUSES = ("pass", "fail", "unsupported")


@dataclass
class CompatRecord:
    """One feature of the functional-compatibility suite against one arm (R7)."""

    run_id: str
    arm: str
    feature: str  # streaming | include_usage | stop_in_round | length | eos | tool_call | ...
    status: str  # pass | fail | unsupported
    evidence: str = ""
    duration_s: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DRILL_STATUSES = ("done", "failed", "not_possible", "not_drilled")
DRILL_PHASE = "drill"  # the drill replays a phase under this name: never in load comparisons


@dataclass
class DrillRecord:
    """The rollback drill of one arm (R8): speculation off under load, then back on.

    kind: runtime_switch (the builtin server's admin switch) | restart (engines that need
    one, e.g. llama.cpp) | none (``status`` not_possible: e.g. an arm given only by URL, with
    ``reason``). Times are monotonic like request times. ``interrupted`` counts requests that
    failed during the switch, ``delayed`` requests whose E2E exceeded their deadline in the
    drill window; ``switch_in_force_s`` = in force - requested; ``recovery_s`` = until goodput
    is back at ``goodput_baseline`` (None: it never recovered within the window).
    """

    run_id: str
    arm: str
    phase: str
    kind: str
    status: str  # done | failed | not_possible | not_drilled (not asked for: ``reason``)
    reason: str = ""
    requested_t: float | None = None
    in_force_t: float | None = None
    switch_in_force_s: float | None = None
    recovery_s: float | None = None
    goodput_baseline: float | None = None
    interrupted: int = 0
    delayed: int = 0
    switched_back_t: float | None = None
    switch_back_s: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # {"t": ..., "event": ...}
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
