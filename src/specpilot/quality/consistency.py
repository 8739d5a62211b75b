"""Greedy consistency between arms (R1, R7): same prompt, baseline vs candidate, token by token.

At the first divergence the baseline's log-probs tell a near-tie flip (float
non-associativity: the two tokens were within ``threshold`` nats under the target) from a real
defect (the candidate emitted a token the target ranked clearly lower). ``margin`` is the
baseline's top-1 minus top-2 log-prob there; the defect rule uses the gap between the
baseline's token and the candidate's token under the baseline (equal to the margin when the
candidate took the baseline's second choice); a candidate token outside the baseline's
reported top log-probs is a defect.

    >>> from specpilot.records import OutputRecord
    >>> b = OutputRecord("r", "base", "code", "p1", 0, None, 0.0, "ab", tokens=["a", "b"],
    ...     token_logprobs=[-0.1, -0.2], top_logprobs=[[["a", -0.1]], [["b", -0.2], ["c", -0.3]]])
    >>> c = OutputRecord("r", "spec", "code", "p1", 0, None, 0.0, "ac", tokens=["a", "c"])
    >>> rec = compare(b, c, threshold=0.5)
    >>> rec.divergence_index, round(rec.margin, 3), rec.defect
    (1, 0.1, False)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specpilot.records import ConsistencyRecord, OutputRecord

DEFAULT_THRESHOLD = 0.5  # nats: bf16 drift between a 1-token and a multi-token pass stays below


def _top(rec: OutputRecord, i: int) -> list[tuple[str, float]]:
    if i >= len(rec.top_logprobs):
        return []
    return [(str(t), float(lp)) for t, lp, *_ in rec.top_logprobs[i]]


def compare(
    base: OutputRecord, cand: OutputRecord, threshold: float = DEFAULT_THRESHOLD, pilot_id: str = ""
) -> ConsistencyRecord:
    """One prompt's greedy outputs in two arms."""
    out = ConsistencyRecord(
        pilot_id=pilot_id,
        task_group=base.task_group,
        prompt_id=base.prompt_id,
        baseline_arm=base.arm,
        candidate_arm=cand.arm,
        identical=False,
        margin_threshold=threshold,
        baseline_manifest_sha256=base.manifest_sha256,
        candidate_manifest_sha256=cand.manifest_sha256,
    )
    bt, ct = list(base.tokens), list(cand.tokens)
    if not bt and not ct:  # no token strings reported: compare the text only
        out.identical = base.text == cand.text
        out.defect = not out.identical
        return out
    i = next(
        (j for j, (x, y) in enumerate(zip(bt, ct, strict=False)) if x != y), min(len(bt), len(ct))
    )
    if i == len(bt) == len(ct):
        out.identical = True
        return out
    out.divergence_index = i
    out.baseline_token = bt[i] if i < len(bt) else None
    out.candidate_token = ct[i] if i < len(ct) else None
    if i < len(base.token_logprobs):
        out.baseline_logprob = float(base.token_logprobs[i])
    top = _top(base, i)
    if len(top) >= 2:
        out.margin = top[0][1] - top[1][1]
    if out.candidate_token is not None:
        out.candidate_logprob = next((lp for t, lp in top if t == out.candidate_token), None)
    if out.baseline_token is None or out.candidate_token is None:
        # one arm stopped where the other went on: EOS was a near-tie or not
        stop_gap = out.margin
        out.defect = stop_gap is None or stop_gap > threshold
    elif out.baseline_logprob is None or out.candidate_logprob is None:
        out.defect = True  # the candidate's token is outside the baseline's reported top list
    else:
        out.defect = out.baseline_logprob - out.candidate_logprob > threshold
    return out


def greedy_consistency(
    outputs: Iterable[OutputRecord],
    baseline_arm: str,
    candidate_arm: str,
    threshold: float = DEFAULT_THRESHOLD,
    pilot_id: str = "",
) -> list[ConsistencyRecord]:
    """Pair the greedy outputs (temperature 0) of two arms by (group, prompt, sample)."""
    by_key: dict[tuple[str, str, int], dict[str, OutputRecord]] = defaultdict(dict)
    for o in outputs:
        if o.temperature == 0.0 and o.error is None and o.arm in (baseline_arm, candidate_arm):
            by_key[(o.task_group, o.prompt_id, o.sample_index)][o.arm] = o
    return [
        compare(pair[baseline_arm], pair[candidate_arm], threshold, pilot_id)
        for _, pair in sorted(by_key.items())
        if baseline_arm in pair and candidate_arm in pair
    ]


@dataclass
class GreedySummary:
    """One group, one candidate arm against the baseline."""

    task_group: str
    baseline_arm: str
    candidate_arm: str
    prompts: int
    identical: int
    near_ties: int  # diverged within the threshold: recorded, not failed
    defects: list[str] = field(default_factory=list)  # prompt ids to investigate
    threshold: float = DEFAULT_THRESHOLD

    @property
    def identical_rate(self) -> float | None:
        return self.identical / self.prompts if self.prompts else None

    @property
    def passed(self) -> bool:
        return not self.defects


def summarise(records: Sequence[ConsistencyRecord]) -> list[GreedySummary]:
    groups: dict[tuple[str, str, str], list[ConsistencyRecord]] = defaultdict(list)
    for r in records:
        groups[(r.task_group, r.baseline_arm, r.candidate_arm)].append(r)
    out = []
    for (g, b, c), rs in sorted(groups.items()):
        out.append(
            GreedySummary(
                task_group=g,
                baseline_arm=b,
                candidate_arm=c,
                prompts=len(rs),
                identical=sum(r.identical for r in rs),
                near_ties=sum(not r.identical and not r.defect for r in rs),
                defects=[r.prompt_id for r in rs if r.defect],
                threshold=rs[0].margin_threshold or DEFAULT_THRESHOLD,
            )
        )
    return out
