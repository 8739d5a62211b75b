"""What the runner decides about each arm's runs apart from running them: their order
(``matched_after``: an alternative starts after its matched arm), the
option changes a run gets beyond its arm's config (the drill's plain restart; the equal-budget
alternative's ``max_slots``, derived from the matched arm's measured memory) and the resume
check that every recorded arm's target file still holds what it ran on.
"""

from __future__ import annotations

from typing import Any

from specpilot.analysis.service.capacity import draft_as_kv_slots
from specpilot.backends.adapters import adapter_of
from specpilot.pilot.config.file import PilotConfigError
from specpilot.pilot.plan.arms import ArmPlan
from specpilot.records import ArmRecord
from specpilot.store import Store


def matched_after(arms: list[str], plans: dict[str, ArmPlan]) -> list[str]:
    """``arms`` in their order, but each equal-budget alternative whose derivation needs another
    arm's measurement (``derive: kv_slots`` reads the matched arm's memory) started right after
    that arm.

        >>> from types import SimpleNamespace as A
        >>> ps = {n: A(name=n, role=r, budget=A(matched_against=m)) for n, r, m in
        ...       (("a", "alternative", "s"), ("b", "baseline", None), ("s", "speculative", None))}
        >>> matched_after(["a", "b", "s"], ps)
        ['b', 's', 'a']
    """
    out = list(arms)
    for name in arms:
        p = plans[name]
        dep = p.budget.matched_against if p.role == "alternative" else None
        if dep in out:
            out.remove(name)
            out.insert(out.index(dep) + 1, name)
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
