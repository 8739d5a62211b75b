"""What the runner decides about each arm's runs apart from running them: their order
(``run_order``: repetitions alternate direction, an alternative follows its matched arm), the
option changes a run gets beyond its arm's config (the drill's plain restart; the equal-budget
alternative's ``max_slots``, derived from the matched arm's measured memory) and the resume
check that every recorded arm's target file still holds what it ran on.
"""

from __future__ import annotations

from typing import Any

from specpilot.backends.adapters import adapter_of
from specpilot.pilot.arms import ArmPlan
from specpilot.pilot.config import PilotConfigError
from specpilot.pilot.context import RunPlan
from specpilot.records import ArmRecord
from specpilot.store import Store


def run_order(plans: list[ArmPlan], repetitions: int, pilot_id: str) -> list[RunPlan]:
    """Arms in config order, alternating direction per repetition (ABC, CBA, ABC...).

    Arms whose equal-budget derivation needs another arm's measurement run after it in every
    repetition: the alternative (``derive: kv_slots``) always follows its matched arm.

        >>> from types import SimpleNamespace as A
        >>> ps = [A(name=n, role=r, budget=A(matched_against=m)) for n, r, m in
        ...       (("b", "baseline", None), ("s", "speculative", None), ("a", "alternative", "s"))]
        >>> [(r.arm.name, r.repetition) for r in run_order(ps, 2, "p")]
        [('b', 0), ('s', 0), ('a', 0), ('s', 1), ('a', 1), ('b', 1)]
    """
    out: list[RunPlan] = []
    for rep in range(repetitions):
        arms = list(plans) if rep % 2 == 0 else list(reversed(plans))
        for p in list(arms):
            dep = p.budget.matched_against if p.role == "alternative" else None
            if dep is not None:
                arms.remove(p)
                arms.insert(arms.index(next(a for a in arms if a.name == dep)) + 1, p)
        for p in arms:
            out.append(RunPlan(p, rep, len(out), f"{pilot_id}.{p.name}.r{rep}"))
    return out


def target_changed(records: list[ArmRecord], plans: list[ArmPlan]) -> str | None:
    """Why a resume must stop, or None: an arm already recorded ran on a target file whose
    content hash (frozen in its manifest) differs from the file at that path now.

        >>> from types import SimpleNamespace as NS
        >>> rec = NS(arm="a", manifest={"frozen": {"target": "sha256:aa"}})
        >>> target_changed([rec], [NS(name="a", frozen={"target": "sha256:bb", "target_path": "t"})])
        "arm 'a' ran on another target file than t holds now (content sha256:aa then, sha256:bb now)"
        >>> target_changed([rec], [NS(name="a", frozen={"target": "sha256:aa"})]) is None
        True
    """
    plans_by = {p.name: p for p in plans}
    for rec in records:
        plan = plans_by.get(rec.arm)
        then = ((rec.manifest or {}).get("frozen") or {}).get("target")
        now = plan.frozen.get("target") if plan is not None else None
        if plan is not None and then and now and then != now:
            where = plan.frozen.get("target_path", "the target")
            return (
                f"arm {rec.arm!r} ran on another target file than {where} holds now "
                f"(content {str(then)[:12]} then, {str(now)[:12]} now)"
            )
    return None


def plain_overrides(plan: ArmPlan) -> dict[str, Any]:
    """Option changes that switch an arm's speculation off (the drill's plain restart)."""
    engine = adapter_of(plan.engine)
    return engine.plain() if engine is not None else {}


def derive_kv_slots(store: Store, plan: ArmPlan, plans: list[ArmPlan]) -> dict[str, Any]:
    """The alternative's ``max_slots``: its own plus the target KV slots the matched arm's
    draft memory (weights + KV) would buy, from that arm's scraped memory."""
    matched = plan.budget.matched_against
    snaps = [s for s in store.records("snapshots", arm=matched) if s.draft_weight_bytes]
    if not snaps:
        raise PilotConfigError(
            f"arm {plan.name!r}: budget.derive kv_slots needs the memory of arm {matched!r}, "
            "which has no snapshot with draft memory (did it run and expose memory?)"
        )
    from specpilot.analysis.capacity import draft_as_kv_slots

    s = snaps[-1]
    matched_plan = next(p for p in plans if p.name == matched)
    slots = int(matched_plan.capacity.get("max_slots") or 1)
    eq = draft_as_kv_slots(s, slots)
    if eq is None:
        raise PilotConfigError(f"arm {plan.name!r}: arm {matched!r} reported no target KV memory")
    draft, per_slot = eq.draft_bytes, eq.per_slot_bytes
    extra = int(eq.slots)
    base_slots = int(plan.capacity.get("max_slots") or slots)
    plan.budget.notes.append(
        f"derived from {matched}: draft weights {s.draft_weight_bytes} B + draft KV "
        f"{s.draft_kv_bytes} B = {draft} B = {draft / per_slot:.2f} target KV slots of "
        f"{per_slot:.0f} B: max_slots {base_slots} -> {base_slots + extra}"
    )
    plan.budget.memory_bytes = draft
    return {"max_slots": base_slots + extra, "max_batch_size": base_slots + extra}
