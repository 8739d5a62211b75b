"""OpenAI response shapes: one envelope, the choices, logprobs, tool calls, and ``metrics``.

Every body the server sends for a generation, whole response or stream chunk, is built by
:func:`envelope` (``id``, ``object``, ``created``, ``model``, ``choices`` and, when asked,
``usage``); :func:`spec_metrics` is the per-request speculative record in its ``metrics``.

    >>> ctx = ReplyContext(state, ticket, "cmpl-1", chat=False, ...)        # doctest: +SKIP
    >>> envelope(ctx, [], stream=True, usage=ctx.usage(3))["object"]       # doctest: +SKIP
    'text_completion'
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from specpilot.definitions import acceptance_rate, mean_acceptance_length
from specpilot.engine.generate import TokenLogprob
from specpilot.engine.scheduler import FINISHED, QUEUE_TIMEOUT, TIMEOUT, Ticket
from specpilot.records import RoundRecord
from specpilot.serve.protocol import APIError
from specpilot.serve.state import ServerState
from specpilot.serve.toolcalls import ParsedOutput, ToolCall, parse_tool_calls


class Omit:
    """Marks a key that is left out (``usage`` is absent, null or an object in OpenAI's chunks)."""


OMIT = Omit()
_OBJECT = {
    (True, False): "chat.completion",
    (True, True): "chat.completion.chunk",
    (False, False): "text_completion",
    (False, True): "text_completion",
}


@dataclass
class ReplyContext:
    """What the response builders know about one admitted request."""

    state: ServerState
    ticket: Ticket
    rid: str
    chat: bool
    tools_on: bool
    k: int
    scope: str
    version: int
    detail: str  # off | summary | detailed
    model: str
    n_prompt: int
    stops: tuple[str, ...]
    include_usage: bool
    continuous_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def tokenizer(self) -> Any:
        return self.state.tokenizer

    @property
    def want_logprobs(self) -> bool:
        return self.ticket.logprobs is not None

    def usage(self, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.n_prompt,
            "completion_tokens": completion,
            "total_tokens": self.n_prompt + completion,
        }

    def metrics(self) -> dict[str, Any] | None:
        """The response's ``metrics`` object, or None when the request did not ask for it."""
        if self.detail == "off":
            return None
        draft = self.state.cfg.draft_name
        return spec_metrics(self.ticket, self.k, self.scope, draft, self.detail == "detailed")


def envelope(
    c: ReplyContext,
    choices: list[dict[str, Any]],
    *,
    stream: bool,
    usage: dict[str, int] | Omit | None = OMIT,
) -> dict[str, Any]:
    """The one place a response body (or stream chunk) gets its top-level fields."""
    out: dict[str, Any] = {
        "id": c.rid,
        "object": _OBJECT[(c.chat, stream)],
        "created": c.created,
        "model": c.model,
        "choices": choices,
    }
    if not isinstance(usage, Omit):
        out["usage"] = usage
    return out


def full_response(c: ReplyContext, text: str, output_tokens: int) -> tuple[dict[str, Any], str]:
    """The non-streamed body and its finish reason."""
    finish = c.ticket.finish_reason or "stop"
    lps = c.ticket.state.token_logprobs if c.ticket.state is not None else []
    tok = c.tokenizer
    choice: dict[str, Any]
    if c.chat:
        parsed = parse_tool_calls(text) if c.tools_on else ParsedOutput(text)
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.calls:
            message["tool_calls"] = [call_json(x, i, c.rid) for i, x in enumerate(parsed.calls)]
            finish = "tool_calls"
        choice = {
            "index": 0,
            "message": message,
            "logprobs": chat_logprobs(tok, lps) if c.want_logprobs else None,
            "finish_reason": finish,
        }
    else:
        choice = {
            "index": 0,
            "text": text,
            "finish_reason": finish,
            "logprobs": completion_logprobs(tok, lps, 0) if c.want_logprobs else None,
        }
    out = envelope(c, [choice], stream=False, usage=c.usage(output_tokens))
    metrics = c.metrics()
    if metrics is not None:
        out["metrics"] = metrics
    return out, finish


def stream_choice(
    c: ReplyContext, delta: dict[str, Any] | str, finish: str | None, logprobs: Any
) -> dict[str, Any]:
    """One chunk's choice: ``delta`` (chat) or ``text`` (completions)."""
    ch: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": logprobs}
    ch["delta" if c.chat else "text"] = delta
    return ch


def ended_badly(t: Ticket) -> APIError | None:
    """The error for a request that did not finish (None when it did)."""
    if t.status == FINISHED:
        return None
    if t.status == TIMEOUT:
        return APIError(
            504,
            "the request exceeded the server's timeout",
            type="timeout_error",
            code="request_timeout",
        )
    if t.status == QUEUE_TIMEOUT:
        return APIError(
            503,
            "the request waited in the queue longer than the queue timeout",
            type="server_error",
            code="queue_timeout",
            headers={"Retry-After": "5"},
        )
    if t.status == "error":
        return APIError(500, f"engine error: {t.error}", type="server_error", code="engine_error")
    return APIError(503, f"the request was {t.status}", type="server_error", code=t.status)


# ---------------------------------------------------------------------- pieces
def call_json(call: ToolCall, index: int, rid: str, stream: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": f"call_{rid[-12:]}_{index}",
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if stream:
        out["index"] = index
    return out


def token_str(tok: Any, token_id: int) -> str:
    return str(tok.decode([token_id]))


def chat_logprobs(tok: Any, lps: list[TokenLogprob]) -> dict[str, Any]:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        s = token_str(tok, token_id)
        return {"token": s, "logprob": _finite(logprob), "bytes": list(s.encode("utf-8"))}

    content = [
        {**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(i, v) for i, v in lp.top]}
        for lp in lps
    ]
    return {"content": content}


def completion_logprobs(tok: Any, lps: list[TokenLogprob], offset: int) -> dict[str, Any]:
    tokens, token_lps, tops, offsets = [], [], [], []
    pos = offset
    for lp in lps:
        s = token_str(tok, lp.token_id)
        tokens.append(s)
        token_lps.append(_finite(lp.logprob))
        tops.append({token_str(tok, i): _finite(v) for i, v in lp.top} if lp.top else None)
        offsets.append(pos)
        pos += len(s)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def _finite(x: float) -> float:
    # JSON has no -inf; a token with probability 0 under the target (possible after top-k/top-p
    # sampling, since log-probs are raw) is reported at float32's lowest.
    return x if math.isfinite(x) else -3.4028234663852886e38


# ---------------------------------------------------------------------- metrics
def spec_metrics(
    t: Ticket, k: int, scope: str, draft: str | None, detailed: bool
) -> dict[str, Any]:
    """The per-request record: vLLM's ``metrics.speculative_decoding`` plus specpilot's timings.

    vLLM fields (``--per-request-spec-decode-metrics``): num_spec_steps (rounds with k > 0),
    num_draft_tokens, num_accepted_draft_tokens (bonus token excluded), draft_acceptance_rate,
    mean_acceptance_length (committed / steps, bonus included: ``specpilot.definitions``, vLLM's
    1 + accepted / steps when no step was cut), acceptance_histogram (index
    j: steps that accepted exactly j drafts), num_spec_tokens (k).

    ``specpilot``: rounds (all decode rounds), drafted, accepted, committed (tokens the decode
    rounds appended, bonus included; the first output token comes from prefill), the request's
    share of round time (each round's draft/verify/overhead divided by its batch size),
    queue/prefill/decode seconds, the strategy that served it; ``detailed`` adds every round
    (``round_records``) and the prefill (``prefill_record``), times on the server's clock.
    """
    return {
        "speculative_decoding": _vllm_record(t.rounds, k, detailed),
        "specpilot": _own_record(t, k, scope, draft, detailed),
    }


def _vllm_record(rounds: list[RoundRecord], k: int, detailed: bool) -> dict[str, Any]:
    spec = [r for r in rounds if r.proposed > 0]
    drafted = sum(r.proposed for r in spec)
    accepted = sum(r.accepted for r in spec)
    hist = [0] * (max([k, *(r.proposed for r in spec)]) + 1)
    for r in spec:
        hist[r.accepted] += 1
    sd: dict[str, Any] = {
        "num_spec_steps": len(spec),
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "draft_acceptance_rate": acceptance_rate(spec),
        "mean_acceptance_length": mean_acceptance_length(spec),
        "acceptance_histogram": hist,
        "num_spec_tokens": k,
    }
    if detailed:
        sd["per_step_accepted"] = [r.accepted for r in spec]
    return sd


def _own_record(t: Ticket, k: int, scope: str, draft: str | None, detailed: bool) -> dict[str, Any]:
    rounds = t.rounds
    spec = [r for r in rounds if r.proposed > 0]
    own: dict[str, Any] = {
        "strategy": {"k": k, "draft": draft if k > 0 else None, "scope": scope},
        "rounds": len(rounds),
        "drafted": sum(r.proposed for r in spec),
        "accepted": sum(r.accepted for r in spec),
        "committed": sum(r.committed for r in rounds),
        "draft_s": sum(r.draft_s / r.batch_size for r in rounds),
        "verify_s": sum(r.verify_s / r.batch_size for r in rounds),
        "overhead_s": sum(r.overhead_s / r.batch_size for r in rounds),
        "mean_batch_size": sum(r.batch_size for r in rounds) / len(rounds) if rounds else None,
        "queue_s": t.queue_s,
        "prefill_s": t.prefill_s,
        "decode_s": t.decode_s,
        "status": t.status,
    }
    if detailed:
        own["round_records"] = [_round_json(r) for r in rounds]
        p = t.state.prefill if t.state is not None else None
        own["prefill_record"] = (
            None
            if p is None
            else {
                "prompt_tokens": p.prompt_tokens,
                "target_s": p.target_s,
                "draft_s": p.draft_s,
                "batch_size": p.batch_size,
                "t_start": p.t_start,
            }
        )
    return own


def _round_json(r: RoundRecord) -> dict[str, Any]:
    return {
        "round_index": r.round_index,
        "proposed": r.proposed,
        "accepted": r.accepted,
        "committed": r.committed,
        "draft_s": r.draft_s,
        "verify_s": r.verify_s,
        "overhead_s": r.overhead_s,
        "batch_size": r.batch_size,
        "truncated": r.truncated,
        "t_start": r.t_start,
    }
