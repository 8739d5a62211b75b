"""The interleaved design's arm order: every phase on every arm, the order alternating."""

from __future__ import annotations

from specpilot.pilot.interleave import design_note, phase_orders


def test_each_phase_visits_every_arm_and_the_order_alternates() -> None:
    orders = phase_orders(["base", "spec", "alt", "ctl"], ["off_peak", "peak", "burst"])
    assert [p for p, _ in orders] == ["off_peak", "peak", "burst"]
    assert all(sorted(o) == ["alt", "base", "ctl", "spec"] for _, o in orders)
    # base runs before spec in one phase and after it in the next: drift changes sign
    first = [o.index("base") < o.index("spec") for _, o in orders]
    assert first == [True, False, True]


def test_the_design_is_stated_with_its_orders() -> None:
    note = design_note(["a", "b"], ["p", "q"])
    assert note.startswith("measurement design: interleaved (2 engines up at once")
    assert "p: a b; q: b a" in note
