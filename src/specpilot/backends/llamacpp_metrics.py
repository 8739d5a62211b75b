"""llama.cpp's ``/metrics`` and ``/slots`` in the normalised names (``backends.protocol``)."""

from __future__ import annotations

import json

from specpilot.backends import prom
from specpilot.backends.protocol import (
    CONTEXT,
    SLOTS,
    SLOTS_BUSY,
    SPEC_ACCEPTED,
    SPEC_COMMITTED,
    SPEC_POS,
    SPEC_PROPOSED,
    SPEC_ROUNDS,
)


def normalise_metrics(text: str) -> dict[str, float]:
    """llama.cpp ``/metrics`` -> our normalised names (both old and new counter spellings)."""
    s = prom.parse(text)
    p = "llamacpp:"
    out: dict[str, float] = {}
    rounds = prom.total(s, p + "spec_decode_num_drafts_total", p + "spec_decode_drafts_total")
    proposed = prom.total(s, p + "spec_decode_num_draft_tokens_total")
    accepted = prom.total(
        s, p + "spec_decode_num_accepted_tokens_total", p + "spec_decode_accepted_tokens_total"
    )
    if rounds is not None:
        out[SPEC_ROUNDS] = rounds
    if proposed is not None:
        out[SPEC_PROPOSED] = proposed
    if accepted is not None:
        out[SPEC_ACCEPTED] = accepted
        if rounds is not None:
            out[SPEC_COMMITTED] = accepted + rounds  # bonus token: one per verification step
    pos = prom.by_label(
        s,
        "position",
        p + "spec_decode_num_accepted_tokens_per_pos_total",
        p + "spec_decode_accepted_tokens_per_pos_total",
    )
    for k, n in pos.items():
        out[f"{SPEC_POS}{int(k) + 1}"] = n
    for ours, theirs in (
        ("generation_tokens", "tokens_predicted_total"),
        ("prompt_tokens", "prompt_tokens_total"),
        ("prompt_tokens_cached", "prompt_tokens_cached_total"),
        ("generation_seconds", "tokens_predicted_seconds_total"),
        ("prompt_seconds", "prompt_seconds_total"),
        ("decode_calls", "n_decode_total"),
        ("requests_running", "requests_processing"),
        ("requests_waiting", "requests_deferred"),
        ("kv_cache_usage", "kv_cache_usage_ratio"),
    ):
        v = prom.total(s, p + theirs)
        if v is not None:
            out[ours] = v
    return out


def normalise_slots(text: str) -> dict[str, float]:
    """``GET /slots`` -> slots in all, slots processing, and a slot's context (tokens).

    >>> normalise_slots('[{"id": 0, "n_ctx": 512, "is_processing": true},'
    ...                 ' {"id": 1, "n_ctx": 512, "is_processing": false}]')
    {'slots_total': 2.0, 'slots_busy': 1.0, 'context_tokens': 512.0}
    """
    try:
        slots = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(slots, list) or not all(isinstance(x, dict) for x in slots):
        return {}
    out = {
        SLOTS: float(len(slots)),
        SLOTS_BUSY: float(sum(bool(x.get("is_processing")) for x in slots)),
    }
    ctx = [x["n_ctx"] for x in slots if isinstance(x.get("n_ctx"), int | float)]
    if ctx:
        out[CONTEXT] = float(min(ctx))
    return out
