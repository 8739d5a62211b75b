"""Sampled groups (R7): key-error pass rates with intervals, non-inferiority, and direct tests
that the candidate arm samples the same distribution as the baseline.

Pass rates: an output passes when every *key* check passed (``consistency_only`` records do
not count). ``non_inferiority`` states the test (Newcombe hybrid score bound, one-sided
``alpha``), the margin, the exact power at the n used and the n that 80% power needs; with
too little power the conclusion is ``underpowered`` rather than a pass.

Distribution tests compare seeded samples of the same prompts in two arms, stratified by
prompt (labels permuted within a prompt), Holm-adjusted over the family:

- ``token@P`` (one per position P, e.g. 0 and 1): the emitted token at output position P
  (summed chi-square). Position 0 comes from prefill in most engines; position 1 is the first
  token a speculative round decides, where a wrong acceptance rule shows first.
- ``mean_logprob``: each sample's mean target log-prob over its first ``span`` tokens (the
  engine's raw log-probs); ``top1_rate``: how often the sample took the target's argmax.
  Under the same distribution both statistics have the same law in both arms; they use every
  token, so they see a biased sampler that one position alone misses. They assume both arms
  report log-probs of the same target numerics (same weights and dtype).

    >>> from specpilot.records import QualityRecord
    >>> recs = [QualityRecord("r", "base", "g", f"p{i}", "c", "regex", "key", i % 4 != 0) for i in range(8)]
    >>> pr = pass_rates(recs)[0]
    >>> pr.passed, pr.n
    (6, 8)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specpilot.quality import stats
from specpilot.records import OutputRecord, QualityRecord


@dataclass
class PassRate:
    arm: str
    task_group: str
    n: int
    passed: int
    ci: tuple[float, float]
    manifest_sha256: str = ""
    reasons: dict[str, int] = field(default_factory=dict)  # key error -> outputs with it

    @property
    def rate(self) -> float | None:
        return self.passed / self.n if self.n else None


def _unit(r: QualityRecord) -> tuple[str, str, str, str, str, int]:
    return (r.run_id, r.arm, r.task_group, r.prompt_id, r.request_id or "", r.sample_index)


def output_verdicts(
    records: Iterable[QualityRecord],
) -> dict[tuple[str, str, str, str, str, int], tuple[bool, list[str]]]:
    """Per output (run, arm, group, prompt, request, sample): passed all key checks, key errors."""
    out: dict[tuple[str, str, str, str, str, int], tuple[bool, list[str]]] = {}
    for r in records:
        if r.kind == "consistency_only":
            continue
        ok, reasons = out.get(_unit(r), (True, []))
        if r.severity == "key" and not r.passed:
            ok, reasons = False, [*reasons, *(r.reasons or [r.check_name])]
        out[_unit(r)] = (ok, reasons)
    return out


def pass_rates(records: Iterable[QualityRecord], alpha: float = 0.05) -> list[PassRate]:
    """Key-error pass rate per (arm, group) with a Wilson interval."""
    recs = list(records)
    sha = {(r.arm, r.task_group): r.manifest_sha256 for r in recs}
    cells: dict[tuple[str, str], list[tuple[bool, list[str]]]] = defaultdict(list)
    for unit, v in output_verdicts(recs).items():
        cells[(unit[1], unit[2])].append(v)
    out = []
    for (arm, group), vs in sorted(cells.items()):
        k = sum(ok for ok, _ in vs)
        counts: dict[str, int] = defaultdict(int)
        for _, reasons in vs:
            for reason in set(reasons):
                counts[reason] += 1
        top = dict(sorted(counts.items(), key=lambda kv: -kv[1])[:10])
        out.append(
            PassRate(
                arm,
                group,
                len(vs),
                k,
                stats.wilson(k, len(vs), alpha),
                sha.get((arm, group), ""),
                top,
            )
        )
    return out


@dataclass
class NonInferiority:
    task_group: str
    baseline_arm: str
    candidate_arm: str
    n_baseline: int
    n_candidate: int
    diff: float | None  # candidate rate - baseline rate
    lower_bound: float | None  # one-sided 1 - alpha
    margin: float
    alpha: float
    power: float  # exact, at the n used, planning rate = pooled observed rate
    n_for_80: int | None  # per arm
    # non_inferior | inferior (significantly below the baseline, whatever the power) |
    # inferior_not_excluded | underpowered | uninformative (the baseline itself passes less
    # often than the floor: the check cannot tell a worse arm from the current service)
    conclusion: str
    test: str = "Newcombe hybrid score bound for p_cand - p_base, one-sided; H0: diff <= -margin"
    upper_bound: float | None = None  # one-sided 1 - alpha upper bound of diff


def non_inferiority(
    rates: Sequence[PassRate],
    baseline_arm: str,
    margin: float = 0.10,
    alpha: float = 0.05,
    min_power: float = 0.8,
    floor: float = 0.0,
) -> list[NonInferiority]:
    """Each candidate arm's key-error pass rate against the baseline's, per group.

    In order: the baseline below ``floor``: uninformative; the lower bound above -margin:
    non-inferior; the upper bound below 0 (the candidate passes significantly less often):
    inferior, at any power; too little power: underpowered; else inferior not excluded.
    """
    base = {r.task_group: r for r in rates if r.arm == baseline_arm}
    out = []
    for c in rates:
        b = base.get(c.task_group)
        if c.arm == baseline_arm or b is None:
            continue
        pooled = (b.passed + c.passed) / max(b.n + c.n, 1)
        n = min(b.n, c.n)
        power = stats.ni_power(n, pooled, margin, alpha) if n else 0.0
        lower: float | None = None
        upper: float | None = None
        diff: float | None = None
        if b.n and c.n:
            lower = stats.ni_lower(c.passed, c.n, b.passed, b.n, alpha)
            upper = -stats.ni_lower(b.passed, b.n, c.passed, c.n, alpha)
            diff = c.passed / c.n - b.passed / b.n
        if b.rate is not None and b.rate < floor:
            concl = "uninformative"
        elif lower is not None and lower > -margin:
            concl = "non_inferior"
        elif upper is not None and upper < 0:
            concl = "inferior"
        elif power < min_power:
            concl = "underpowered"
        else:
            concl = "inferior_not_excluded"
        out.append(
            NonInferiority(
                c.task_group,
                baseline_arm,
                c.arm,
                b.n,
                c.n,
                diff,
                lower,
                margin,
                alpha,
                power,
                stats.n_for_power(pooled, margin, alpha, min_power),
                concl,
                upper_bound=upper,
            )
        )
    return out


@dataclass
class DistributionTest:
    task_group: str
    baseline_arm: str
    candidate_arm: str
    test: str  # token@P | mean_logprob | top1_rate
    statistic: float
    p_value: float
    p_holm: float
    prompts: int
    samples: tuple[int, int]  # baseline, candidate
    alpha: float
    differs: bool


def _features(o: OutputRecord, positions: Sequence[int], span: int) -> dict[str, object]:
    f: dict[str, object] = {}
    for p in positions:
        f[f"token@{p}"] = o.tokens[p] if p < len(o.tokens) else "<end>"
    lps = o.token_logprobs[:span]
    if lps:
        f["mean_logprob"] = float(np.mean(lps))
    tops = o.top_logprobs[:span]
    # only when every position lists alternatives (llama.cpp omits them for drafted tokens)
    if tops and all(tops) and len(tops) == len(o.tokens[:span]):
        hits = [str(t[0][0]) == tok for t, tok in zip(tops, o.tokens[:span], strict=True)]
        f["top1_rate"] = float(np.mean(hits))
    return f


def distribution_tests(
    outputs: Iterable[OutputRecord],
    baseline_arm: str,
    candidate_arm: str,
    positions: Sequence[int] = (0, 1),
    span: int = 32,
    alpha: float = 0.05,
    permutations: int = 2000,
    seed: int = 0,
    logprob_tests: bool = True,
) -> list[DistributionTest]:
    """Two-sample tests of the sampled outputs (temperature > 0) of two arms, per group;
    ``logprob_tests`` False: the emitted-token tests only (Holm over those), for arms whose
    reported log-probs are not comparable (``quality.summary.gate``)."""
    cells: dict[str, dict[str, list[tuple[int, dict[str, object]]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for o in outputs:
        if (
            o.temperature > 0
            and o.error is None
            and o.arm in (baseline_arm, candidate_arm)
            and o.tokens
        ):
            cells[o.task_group][o.prompt_id].append(
                (int(o.arm == candidate_arm), _features(o, positions, span))
            )
    out: list[DistributionTest] = []
    for group in sorted(cells):
        prompts = cells[group]
        names = [f"token@{p}" for p in positions]
        names += ["mean_logprob", "top1_rate"] if logprob_tests else []
        results = []
        for i, name in enumerate(names):
            strata = []
            for pid in sorted(prompts):
                rows = [(lab, f[name]) for lab, f in prompts[pid] if name in f]
                if len({lab for lab, _ in rows}) == 2:  # both arms, or nothing to compare
                    strata.append(([lab for lab, _ in rows], [v for _, v in rows]))
            if not strata:
                continue
            kind = "categorical" if name.startswith("token@") else "numeric"
            rng = np.random.default_rng([seed, i])
            stat, p = stats.stratified_permutation(strata, kind, rng, permutations)
            n1 = sum(sum(lab) for lab, _ in strata)
            n0 = sum(len(lab) for lab, _ in strata) - n1
            results.append((name, stat, p, len(strata), (n0, n1)))
        adj = stats.holm([p for _, _, p, _, _ in results])
        for (name, stat, p, k, ns), pa in zip(results, adj, strict=True):
            out.append(
                DistributionTest(
                    group, baseline_arm, candidate_arm, name, stat, p, pa, k, ns, alpha, pa < alpha
                )
            )
    return out
