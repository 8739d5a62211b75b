"""The metric definitions the report prints next to its numbers (DESIGN.md, one place).

Wording rules the renderers follow (tests grep the rendered report for them): acceptance is
never called correctness; every speed-up names what it is of (decode only, or the whole task
end to end); a latency change is never called a cost reduction unless resources go down or a
business value was configured.
"""

from __future__ import annotations

DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("*", "in a group or phase column: all groups (or phases) pooled."),
    (
        "round",
        "One draft-and-verify step of one request: k proposed, a accepted (0..k), c committed = a + 1 "
        "(the correction or bonus token included) unless EOS, a stop string or max_tokens cut the round.",
    ),
    (
        "acceptance rate",
        "sum(accepted) / sum(proposed). It measures how often the target model keeps the "
        "draft's tokens; it says nothing about whether an answer is correct.",
    ),
    (
        "mean acceptance length",
        "sum(committed) / rounds, bonus token included (vLLM's 1 + accepted / drafts). "
        "Engines that exclude the bonus token are normalised on import.",
    ),
    (
        "acceptance at position i",
        "rounds that accepted at least i drafts / rounds that proposed at least i.",
    ),
    (
        "per-request acceptance",
        "each request's own acceptance rate; pooled figures lean toward long "
        "completions, so the distribution over requests is shown too.",
    ),
    (
        "alpha",
        "Leviathan's per-token acceptance: accepted / (accepted + rounds that rejected a draft).",
    ),
    (
        "decode cost per committed token",
        "sum(draft + verify + overhead time) / sum(committed), each batched "
        "round's time divided by its batch size; split into draft, verify and overhead shares.",
    ),
    (
        "decode speed-up",
        "plain decoding's cost per token / the speculative arm's, same group and phase: a "
        "local figure about decode only, never the task's end-to-end change.",
    ),
    (
        "verify-cost curve",
        "v(n) = median target forward time for n new tokens / for one token, per arm, "
        "source (calibration or rounds) and batch size. It depends on the hardware.",
    ),
    (
        "Leviathan bound",
        "E[c] / (k c + v(k+1)) with E[c] = (1 - alpha^(k+1)) / (1 - alpha) and c = draft time "
        "per proposed token / the target's one-token step; the gap to the measured decode speed-up is split "
        "into acceptance, verification, round overhead and plain overhead factors.",
    ),
    ("TTFT", "sent -> first chunk with content (text or a tool-call delta)."),
    ("E2E", "sent -> last byte of the response (status ok; anything else never finished)."),
    ("TPOT", "(E2E - TTFT) / (output tokens - 1)."),
    (
        "ITL",
        "a chunk's gap divided over the tokens in that chunk, one value per token; per-chunk gaps and "
        "tokens per chunk are reported too (speculative servers send bursts).",
    ),
    (
        "task time",
        "client stages (retrieval, tools) + E2E: what the user waits for. The paired comparison "
        "and the verdict use it.",
    ),
    (
        "on time",
        "status ok, no key check failed on the output, TTFT <= the group's TTFT SLO and E2E <= its "
        "deadline.",
    ),
    ("goodput", "on-time requests / phase duration."),
    (
        "SLO percentile condition",
        "p<P>(metric) <= threshold over one cell (arm, task group, load level), P one of 50, 90, "
        "99 and the metric TTFT, TPOT, ITL or E2E as defined here: the cell's own percentile in the "
        "load table, so one that falls among requests that never finished is not reached and fails. "
        "It passes or fails the cell, never a request: per request, on time stays TTFT and deadline.",
    ),
    (
        "percentiles",
        "p50/p90/p99 over every scheduled steady-state request; a failed, timed-out or unsent "
        "request counts as never finishing, so a percentile among them is 'not reached'. Every figure "
        "says how many requests it is over.",
    ),
    (
        "paired comparison",
        "the same schedule slot (same prompt) in both arms; relative task-time change = "
        "sum(candidate) / sum(baseline) - 1 over pairs that both ended ok; on-time difference over all "
        "pairs; percentile bootstrap confidence intervals over resampled pairs (method, resamples and seed "
        "stated with each table). Net slower: the interval excludes zero on the slow side.",
    ),
    (
        "end-to-end effect (Amdahl)",
        "task' = fixed + decode / s; end-to-end speed-up = task / task', "
        "shown next to the measured task-time change.",
    ),
    (
        "capacity",
        "the highest offered load at which the arm's on-time fraction (every scheduled request "
        "counted) reached the SLO attainment and every percentile condition of the SLO held, with "
        "every lower load level meeting both too.",
    ),
    (
        "crossover",
        "the lowest offered load from which speculation no longer pays in the paired comparison.",
    ),
    (
        "memory budget",
        "draft weights + draft KV + workspace (the rest of the extra peak memory over the "
        "baseline), and the target sequences that memory would hold at the baseline's KV bytes per sequence.",
    ),
    (
        "cost",
        "device-seconds per 1,000 on-time tasks at equal quality; devices needed at the target peak "
        "rate from each arm's capacity. A lower latency with the same devices is a latency change, not a "
        "cost reduction.",
    ),
    (
        "verdict",
        "ADOPT (named groups, a load range), ADOPT_IN_WINDOWS (below a load or in named phases), "
        "DO_NOT_ADOPT (a measured reason: the bottleneck to fix first), UNDECIDED (the pilot could "
        "not tell: no load level decided, with the pairs a decision needs; a fact about the pilot, "
        "not about speculation); a cell is 'no difference' only when its deciding interval lies "
        "inside the equivalence margin; quality gates first; PILOT_HYPOTHESIS when the "
        "traffic was not representative, samples were too few, groups were missing or only cold starts "
        "were measured.",
    ),
)
