"""The whole cost of adopting a candidate at equal quality and deadline, per year (R8): every item
the source document names, each priced from its inputs (``analysis.cost``) or shown as
"not priced", never as 0.

Items (a positive amount is a cost of adopting, a negative one a saving; currency per year
unless one-off):

- **devices at the peak**: (candidate's devices - baseline's devices) at the provisioned peak
  rate (``service.cost.ArmCost.devices_at_peak``, from each arm's measured capacity) x 8,760 h x
  ``device_hour_price``;
- **capacity lost to the draft's memory**: the extra devices the concurrency the draft's memory
  takes would need at that peak: the candidate's devices x S / (S - F) rounded up, less its
  devices, for S sequences an engine holds and F the sequences the draft's memory takes:
  measured where both arms' engines publish the KV capacity they were started with
  (``service.capacity.DraftConcurrency``, S the baseline's), computed from the memory budget
  otherwise (``MemoryBudget.sequences_forgone``, S from the manifest), and said which; 0 for a
  strategy without a draft model;
- **adaptation and tuning** (one-off): ``adaptation_hours`` x ``engineer_hour_price``;
- **regression work after upgrades**: ``regression_hours_per_upgrade`` x ``upgrades_per_year`` x
  ``engineer_hour_price``;
- **rollback maintenance**: (``drills_per_year`` x ``hours_per_drill`` +
  ``on_call_hours_per_year``) x ``engineer_hour_price``;
- **hosted API tokens** (where ``token_prices`` names both arms; then the devices are the
  provider's and the two device items do not apply): (candidate's - baseline's) mean cost per
  task (measured prompt and output tokens x the prices per million) x ``monthly_tasks`` x 12;
- **business value** (only where ``business_value_per_on_time_task`` is confirmed): minus the
  extra on-time tasks per hour x 8,760 x that value.

The total is a first year: the one-off items plus a year of the others. It is a **saving** only
when every item is priced and the total is below 0; a latency gain with the same devices and no
confirmed business value prices at 0 and is never a saving. Where a one-off item costs more than
a year of the recurring savings, the line says after how many months it pays back.

    >>> items = (CostItem("devices at the peak", -8760.0, False, "1 device fewer"),
    ...          CostItem("adaptation and tuning", 12000.0, True, "80 h x 150"))
    >>> verdict(items, "USD")[0]
    'cost_increase'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.config import CostConfig
from specpilot.analysis.service.capacity import DraftConcurrency, MemoryBudget
from specpilot.analysis.service.cost import ArmCost

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class CostItem:
    name: str
    amount: (
        float | None
    )  # currency per year (one-off: once); + a cost, - a saving; None: not priced
    one_off: bool
    basis: str  # how it was priced, with its inputs; or what would price it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Ledger:
    """A candidate's first-year cost against its baseline (module docstring)."""

    baseline_arm: str
    candidate_arm: str
    currency: str
    items: tuple[CostItem, ...]
    total: float | None  # first year, every item priced; None: some are not
    priced_total: float  # the priced items alone
    not_priced: tuple[str, ...]
    kind: str  # saving | cost_increase | no_change | not_priced | not_comparable
    text: str
    monthly: float | None = None  # the recurring items per month (None: some not priced)
    payback_months: float | None = None  # one-off items / monthly recurring saving
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "items": [i.to_dict() for i in self.items]}


@dataclass(frozen=True)
class Tokens:
    """An arm's measured mean tokens per answered task (hosted API pricing)."""

    prompt: float | None
    output: float | None


def ledger(
    base: ArmCost,
    cand: ArmCost,
    memory: MemoryBudget | None,
    slots: int | None,
    tokens: Mapping[str, Tokens],
    cfg: CostConfig,
    *,
    quality_failed: bool = False,
    extra_on_time_per_s: float = 0.0,
    concurrency: DraftConcurrency | None = None,
) -> Ledger:
    """Every item of ``cand`` against ``base`` (module docstring); ``slots``: sequences one
    engine of the candidate holds; ``tokens``: per arm; ``extra_on_time_per_s``: the
    candidate's on-time tasks per second less the baseline's."""
    hosted = base.arm in cfg.token_prices and cand.arm in cfg.token_prices
    items = (
        []
        if hosted
        else [_devices(base, cand, cfg), _memory(cand, memory, slots, cfg, concurrency)]
    )
    items += [_adaptation(cfg), _regression(cfg), _rollback(cfg)]
    if hosted:
        items.append(_tokens(base.arm, cand.arm, tokens, cfg))
    if cfg.business_value_per_on_time_task is not None and extra_on_time_per_s > 0:
        gain = extra_on_time_per_s * 3600 * HOURS_PER_YEAR * cfg.business_value_per_on_time_task
        basis = (
            f"{extra_on_time_per_s * 3600:.0f} more on-time tasks per hour x 8760 h x "
            f"{cfg.business_value_per_on_time_task:g} (the confirmed value per task)"
        )
        items.append(CostItem("business value", -gain, False, basis))
    return _summed(base.arm, cand.arm, tuple(items), cfg.currency, quality_failed)


def for_pair(
    b: ArmCost,
    c: ArmCost,
    memory: MemoryBudget | None,
    slots: int | None,
    table: RequestTable,
    cfg: CostConfig,
    quality_failed: bool,
    concurrency: DraftConcurrency | None = None,
) -> Ledger:
    """``ledger`` of a pilot's pair: the tokens and the extra on-time rate from its requests."""
    extra = (
        c.on_time / c.measured_s - b.on_time / b.measured_s
        if c.measured_s and b.measured_s
        else 0.0
    )
    tokens = {x: tokens_of(table, x) for x in (b.arm, c.arm)}
    return ledger(
        b,
        c,
        memory,
        slots,
        tokens,
        cfg,
        quality_failed=quality_failed,
        extra_on_time_per_s=extra,
        concurrency=concurrency,
    )


def tokens_of(table: RequestTable, arm: str) -> Tokens:
    """Mean prompt and output tokens of the arm's answered steady-state requests."""
    ok = (table.arm == arm) & (table.status == "ok") & ~table.cold_start
    prompt = table.prompt_tokens[ok]
    prompt = prompt[~np.isnan(prompt)]
    out = table.output_tokens[ok]
    return Tokens(
        float(prompt.mean()) if len(prompt) else None, float(out.mean()) if len(out) else None
    )


def _devices(base: ArmCost, cand: ArmCost, cfg: CostConfig) -> CostItem:
    name = "devices at the peak"
    b, c = base.devices_at_peak, cand.devices_at_peak
    if b is None or c is None:
        return CostItem(name, None, False, "not priced: an arm's capacity was not measured")
    if cfg.device_hour_price is None:
        return CostItem(
            name, None, False, f"not priced: {c} vs {b} devices; give device_hour_price"
        )
    amount = (c - b) * HOURS_PER_YEAR * cfg.device_hour_price
    return CostItem(
        name, amount, False, f"{c} vs {b} devices at the peak x 8760 h x {cfg.device_hour_price:g}"
    )


def _memory(
    cand: ArmCost,
    memory: MemoryBudget | None,
    slots: int | None,
    cfg: CostConfig,
    concurrency: DraftConcurrency | None = None,
) -> CostItem:
    name = "capacity lost to the draft's memory"
    if memory is not None and memory.resource_class != "draft_model":
        return CostItem(name, 0.0, False, f"no draft model ({memory.resource_class}): no memory")
    forgone = memory.sequences_forgone if memory is not None else None
    how = "computed from the memory budget"
    c = concurrency
    if c is not None and c.used == "measured" and c.measured is not None and c.baseline_sequences:
        # the engines' own KV capacity as started (analysis.service.fleet): measured, not inferred
        forgone, how = c.measured, "measured from the engines' KV capacity at start"
        slots = math.floor(c.baseline_sequences) or slots
    if forgone is None or not slots or cand.devices_at_peak is None:
        return CostItem(
            name, None, False, "not priced: the memory budget does not say how many sequences "
            "the draft's memory takes, or the candidate's capacity was not measured"
        )  # fmt: skip
    if forgone >= slots:
        return CostItem(name, None, False, f"not priced: the draft takes all {slots} sequences")
    devices = cand.devices_at_peak
    extra = math.ceil(devices * slots / (slots - forgone) - 1e-9) - devices
    basis = (
        f"{how}: the draft takes {forgone:.2f} of {slots} sequences, "
        f"so {devices} devices hold what {devices} x {slots}/{slots - forgone:.2f} would: "
        f"{extra} more"
    )
    if cfg.device_hour_price is None:
        return CostItem(name, None, False, f"not priced: {basis}; give device_hour_price")
    return CostItem(name, extra * HOURS_PER_YEAR * cfg.device_hour_price, False, basis)


def _hours(name: str, hours: float | None, what: str, cfg: CostConfig, one_off: bool) -> CostItem:
    if hours is None:
        return CostItem(name, None, one_off, f"not priced: give {what}")
    if cfg.engineer_hour_price is None:
        return CostItem(name, None, one_off, f"not priced: {hours:g} h; give engineer_hour_price")
    basis = f"{hours:g} h x {cfg.engineer_hour_price:g}"
    return CostItem(name, hours * cfg.engineer_hour_price, one_off, basis)


def _adaptation(cfg: CostConfig) -> CostItem:
    return _hours("adaptation and tuning", cfg.adaptation_hours, "adaptation_hours", cfg, True)


def _regression(cfg: CostConfig) -> CostItem:
    per, n = cfg.regression_hours_per_upgrade, cfg.upgrades_per_year
    hours = per * n if per is not None and n is not None else None
    what = "regression_hours_per_upgrade and upgrades_per_year"
    return _hours("regression work after upgrades", hours, what, cfg, False)


def _rollback(cfg: CostConfig) -> CostItem:
    n, each, on_call = cfg.drills_per_year, cfg.hours_per_drill, cfg.on_call_hours_per_year
    given = n is not None and each is not None and on_call is not None
    hours = (n or 0.0) * (each or 0.0) + (on_call or 0.0) if given else None
    what = "drills_per_year, hours_per_drill and on_call_hours_per_year"
    return _hours("rollback maintenance", hours, what, cfg, False)


def _tokens(b: str, c: str, tokens: Mapping[str, Tokens], cfg: CostConfig) -> CostItem:
    name = "hosted API tokens"
    per_task = {a: _per_task(tokens.get(a), cfg, a) for a in (b, c)}
    if per_task[b] is None or per_task[c] is None:
        return CostItem(name, None, False, "not priced: an arm's token counts were not measured")
    if cfg.monthly_tasks is None:
        return CostItem(name, None, False, "not priced: give monthly_tasks")
    diff = (per_task[c] or 0.0) - (per_task[b] or 0.0)
    basis = (
        f"{per_task[c]:.6f} vs {per_task[b]:.6f} per task (measured tokens x the prices per "
        f"million) x {cfg.monthly_tasks:g} tasks a month x 12"
    )
    return CostItem(name, diff * cfg.monthly_tasks * 12, False, basis)


def _per_task(t: Tokens | None, cfg: CostConfig, arm: str) -> float | None:
    price = cfg.token_prices[arm]
    if t is None or t.prompt is None or t.output is None:
        return None
    return (t.prompt * price.input_per_million + t.output * price.output_per_million) / 1e6


def _summed(
    b: str, c: str, items: tuple[CostItem, ...], currency: str, quality_failed: bool
) -> Ledger:
    kind, text = verdict(items, currency, quality_failed)
    missing = tuple(i.name for i in items if i.amount is None)
    priced = sum(i.amount for i in items if i.amount is not None)
    recurring = [i.amount for i in items if not i.one_off]
    monthly = None if None in recurring else sum(x or 0.0 for x in recurring) / 12
    once = sum(i.amount or 0.0 for i in items if i.one_off)
    payback = once / -monthly if monthly is not None and monthly < 0 and once > 0 else None
    total = None if missing else priced
    return Ledger(b, c, currency, items, total, priced, missing, kind, text, monthly, payback)


def verdict(
    items: Sequence[CostItem], currency: str, quality_failed: bool = False
) -> tuple[str, str]:
    """(kind, sentence) of a first-year ledger (module docstring)."""
    if quality_failed:
        return "not_comparable", (
            "not compared: the candidate failed a quality gate (cost is compared at equal quality)"
        )
    missing = [i.name for i in items if i.amount is None]
    priced = sum(i.amount for i in items if i.amount is not None)
    if missing:
        return "not_priced", (
            f"not priced: {', '.join(missing)}; the priced items come to "
            f"{_money(priced, currency)} in the first year, and each item not priced could change "
            "the sign"
        )
    once = sum(i.amount or 0.0 for i in items if i.one_off)
    yearly = priced - once
    pays = ""
    if yearly < 0 < once and once > -yearly:
        pays = (
            f"; the one-off items ({_money(once, currency)}) cost more than a year of the "
            f"recurring saving ({_money(-yearly, currency)}): it pays back after "
            f"{once / -yearly * 12:.0f} months"
        )
    if priced < 0:
        return "saving", f"saving: {_money(-priced, currency)} in the first year, every item priced"
    if priced > 0:
        return "cost_increase", (
            f"cost increase: {_money(priced, currency)} in the first year, every item priced{pays}"
        )
    return "no_change", "no cost change: every item priced, and they come to 0"


def _money(x: float, currency: str) -> str:
    return f"{x:,.0f} {currency}"
