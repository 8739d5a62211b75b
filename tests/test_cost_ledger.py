"""The whole cost at equal quality and deadline (issue 51, item 1; ``analysis.service.ledger``):
every item R8 names has an input, a line in the report and a test; an item not given is "not
priced", never 0; a saving is said only when every item is priced and they come to less.

The pilots are seeded synthetic pilot files (``pilot_cases``), analysed and reported whole.
"""

from __future__ import annotations

import pytest

from pilot_cases import Cell, case
from specpilot.analysis import AnalysisConfig
from specpilot.analysis.config import CostConfig
from specpilot.analysis.service.capacity import MemoryBudget
from specpilot.analysis.service.cost import ArmCost
from specpilot.analysis.service.ledger import Tokens, ledger
from specpilot.pilot.config.file import PilotConfigError, parse_pilot
from specpilot.records import level_of
from specpilot.report import build_report
from specpilot.report.schema import validate

PRICED = {
    "target_peak_rate": 4.0,
    "device_hour_price": 2.0,
    "engineer_hour_price": 100.0,
    "adaptation_hours": 40.0,
    "regression_hours_per_upgrade": 8.0,
    "upgrades_per_year": 4.0,
    "drills_per_year": 4.0,
    "hours_per_drill": 2.0,
    "on_call_hours_per_year": 20.0,
}


def _fewer_devices_at_peak(cost: dict[str, float]) -> dict:
    """A pilot whose speculative arm sustains the peak the baseline misses (the baseline's
    peak answers 5 s late): 1 device instead of 4 at 4 req/s."""
    d = case({(g, p): Cell(spec=0.5) for g in ("code", "zh") for p in ("off_peak", "peak")})
    for r in d.requests:
        if r.arm in ("base", "alt") and level_of(r.phase) == "peak" and r.done_t is not None:
            r.done_t += 5.0
    base = AnalysisConfig(bootstrap_resamples=200)
    cfg = base.model_copy(
        update={
            "cost": CostConfig(**cost),
            "verdict": base.verdict.model_copy(update={"slo_attainment": 0.9}),
        }
    )
    doc = build_report(d, cfg, plots=False).document
    assert validate(doc) == []
    (spec,) = [x for x in doc["cost"]["ledgers"] if x["candidate_arm"] == "spec"]
    return spec


def test_fewer_devices_are_a_saving_only_once_every_item_is_priced() -> None:
    only_devices = _fewer_devices_at_peak({"target_peak_rate": 4.0, "device_hour_price": 2.0})
    items = {i["name"]: i for i in only_devices["items"]}
    assert items["devices at the peak"]["amount"] == pytest.approx(-3 * 8760 * 2.0)
    assert only_devices["kind"] == "not_priced" and only_devices["total"] is None
    for name in ("adaptation and tuning", "regression work after upgrades", "rollback maintenance"):
        assert items[name]["amount"] is None and items[name]["basis"].startswith("not priced")
    assert "could change the sign" in only_devices["text"]
    whole = _fewer_devices_at_peak(PRICED)
    items = {i["name"]: i for i in whole["items"]}
    assert (
        items["adaptation and tuning"]["amount"] == 4000.0
        and items["adaptation and tuning"]["one_off"]
    )
    assert items["regression work after upgrades"]["amount"] == 3200.0
    assert items["rollback maintenance"]["amount"] == (4 * 2 + 20) * 100.0
    assert whole["kind"] == "saving" and whole["not_priced"] == []
    assert whole["total"] == pytest.approx(sum(i["amount"] for i in whole["items"]))
    assert whole["text"].startswith("saving: ")


def test_tuning_that_costs_more_than_a_year_of_device_savings_says_so() -> None:
    dear = _fewer_devices_at_peak({**PRICED, "adaptation_hours": 1000.0})  # 100,000 one-off
    assert dear["kind"] == "cost_increase"
    assert "cost more than a year of the recurring" in dear["text"]
    assert dear["payback_months"] is not None and dear["payback_months"] > 12
    assert f"pays back after {dear['payback_months']:.0f} months" in dear["text"]


def test_the_report_shows_every_item_priced_or_not() -> None:
    d = case({(g, p): Cell(spec=0.5) for g in ("code",) for p in ("peak",)})
    cfg = AnalysisConfig(bootstrap_resamples=200)
    rep = build_report(d, cfg, plots=False)
    for text in (rep.html, rep.markdown):
        for name in (
            "devices at the peak",
            "capacity lost to the draft",
            "adaptation and tuning",
            "regression work after upgrades",
            "rollback maintenance",
        ):
            assert name in text
        assert "not priced" in text


def _arm(name: str, devices_at_peak: int | None = 4) -> ArmCost:
    return ArmCost(name, 1.0, 100.0, 100.0, 90, 1000.0, None, 1.0, devices_at_peak)


def _memory(forgone: float | None, kind: str = "draft_model") -> MemoryBudget:
    return MemoryBudget("s", "b", 1, 1, None, 2, 1, 3, 100.0, forgone, (), kind)


def test_the_drafts_memory_is_priced_as_the_devices_its_sequences_need() -> None:
    cfg = CostConfig(device_hour_price=1.0)
    got = ledger(_arm("b"), _arm("s"), _memory(2.0), 8, {}, cfg)
    (mem,) = [i for i in got.items if i.name == "capacity lost to the draft's memory"]
    # 4 devices holding 6 of 8 sequences each hold what 4 x 8/6 = 5.33 would: 2 more
    assert mem.amount == 2 * 8760.0 and "computed from the memory budget" in mem.basis
    ngram = ledger(_arm("b"), _arm("s"), _memory(None, "ngram"), 8, {}, cfg)
    assert [i.amount for i in ngram.items if i.name.startswith("capacity")] == [0.0]
    unknown = ledger(_arm("b"), _arm("s"), _memory(None), 8, {}, cfg)
    assert [i.amount for i in unknown.items if i.name.startswith("capacity")] == [None]


def test_a_hosted_apis_bill_is_its_tokens() -> None:
    cfg = CostConfig(
        monthly_tasks=1e6,
        token_prices={
            "b": {"input_per_million": 1.0, "output_per_million": 4.0},
            "s": {"input_per_million": 1.0, "output_per_million": 5.0},
        },
    )
    toks = {"b": Tokens(1000.0, 200.0), "s": Tokens(1000.0, 200.0)}
    got = ledger(_arm("b", None), _arm("s", None), None, None, toks, cfg)
    names = [i.name for i in got.items]
    assert "devices at the peak" not in names  # the provider's devices
    (bill,) = [i for i in got.items if i.name == "hosted API tokens"]
    # (1000 x 1 + 200 x 5) - (1000 x 1 + 200 x 4) = 200 per million tasks... per task 0.0002
    assert bill.amount == pytest.approx(200 * 1.0 / 1e6 * 1e6 * 12)


@pytest.mark.parametrize(
    ("cost", "needle"),
    [
        ({"device_hour_price": -1.0}, "cost.device_hour_price"),
        ({"adaptation_hours": -5}, "cost.adaptation_hours"),
        (
            {
                "currency": "EUR",
                "token_prices": {
                    "s": {"input_per_million": 1, "output_per_million": 2, "currency": "USD"}
                },
            },
            "token_prices.s is in USD, the cost section in EUR",
        ),
    ],
)
def test_bad_cost_inputs_name_the_field_and_the_fix(cost: dict, needle: str) -> None:
    data = {
        "workload": "w.yaml",
        "arms": [
            {"name": "b", "role": "baseline", "engine": "builtin"},
            {
                "name": "s",
                "role": "speculative",
                "engine": "builtin",
                "options": {"draft": "shipped:smollm2-135m-instruct-d4", "k": 3},
            },
        ],
        "analysis": {"cost": cost},
    }
    with pytest.raises(PilotConfigError) as err:
        parse_pilot(data, "p.yaml")
    text = err.value.describe()
    assert needle in text and ("->" in text or "fix:" in text), text


def test_the_drafts_memory_is_priced_from_measured_concurrency_where_the_engines_publish_it():
    from specpilot.analysis.service.capacity import DraftConcurrency

    cfg = CostConfig(device_hour_price=1.0)
    measured = DraftConcurrency("b", "s", 22.75, 20.0, 2.75, 2.0, "measured", 2.75, "")
    got = ledger(_arm("b"), _arm("s"), _memory(2.0), 8, {}, cfg, concurrency=measured)
    (mem,) = [i for i in got.items if i.name == "capacity lost to the draft's memory"]
    # 4 devices holding 22 - 2.75 of 22 sequences each: 4 x 22 / 19.25 = 4.57 -> 1 more
    assert "measured from the engines' KV capacity at start" in mem.basis
    assert mem.amount == 1 * 8760.0
    inferred = DraftConcurrency("b", "s", None, None, None, 2.0, "inferred", 2.0, "")
    got = ledger(_arm("b"), _arm("s"), _memory(2.0), 8, {}, cfg, concurrency=inferred)
    (mem,) = [i for i in got.items if i.name == "capacity lost to the draft's memory"]
    assert "computed from the memory budget" in mem.basis
