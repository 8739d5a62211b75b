"""The quality pass: send a fixed set of prompts to one arm's endpoint, keep every output with
its token log-probs (``OutputRecord``), off the load (the pilot calls it once per arm).

Greedy groups: each chosen prompt once, temperature 0, one request at a time (batch
composition moves bf16 numerics), at the group's own length. Sampled groups: each chosen
prompt ``samples`` times with per-sample seeds that are the same in every arm, up to
``concurrency`` in flight, capped at ``sampled_max_tokens``. Every request asks for
``logprobs`` with ``top_logprobs`` alternatives (the greedy margin and the sampled
statistics need them). A failed request becomes an ``OutputRecord`` with ``error`` set.

    >>> from specpilot.workload.groups import load_group
    >>> plan = plan_quality([load_group("code"), load_group("longform")], QualityConfig())
    >>> sum(r.temperature == 0 for r in plan), sum(r.temperature > 0 for r in plan)
    (3, 24)
    >>> outs = run_quality_pass("http://127.0.0.1:8000", "m", plan, arm="baseline")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from specpilot.quality.config import QualityConfig
from specpilot.records import OutputRecord
from specpilot.workload.groups import TaskGroup


@dataclass(frozen=True)
class QualityRequest:
    task_group: str
    prompt_id: str
    messages: tuple[dict[str, Any], ...]
    sample_index: int
    seed: int | None
    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...] = ()


def _order(seed: int, group: str, pid: str) -> str:
    return hashlib.sha256(f"{seed}/{group}/{pid}".encode()).hexdigest()


def sample_seed(seed: int, group: str, prompt_id: str, index: int) -> int:
    """The seed of sample ``index`` of a prompt: the same in every arm."""
    h = hashlib.sha256(f"specpilot-quality/{seed}/{group}/{prompt_id}/{index}".encode()).digest()
    return int.from_bytes(h[:4], "big")


def plan_quality(groups: Sequence[TaskGroup], cfg: QualityConfig) -> list[QualityRequest]:
    """Which prompts, seeds and limits each arm gets (eval split, a seeded stable choice)."""
    out = []
    for g in groups:
        greedy = g.sampling.greedy
        prompts = sorted(
            g.split("eval") or g.split("all"), key=lambda p: _order(cfg.seed, g.name, p.id)
        )
        prompts = prompts[: cfg.greedy_prompts if greedy else cfg.sampled_prompts]
        own = g.output.upper if g.output.dist != "fixed" else g.output.mean
        cap = cfg.greedy_max_tokens if greedy else cfg.sampled_max_tokens
        max_tokens = min(own, cap) if cap else own
        for p in prompts:
            for i in range(1 if greedy else cfg.samples):
                out.append(
                    QualityRequest(
                        task_group=g.name,
                        prompt_id=p.id,
                        messages=p.messages,
                        sample_index=i,
                        seed=None if greedy else sample_seed(cfg.seed, g.name, p.id, i),
                        temperature=g.sampling.temperature,
                        top_p=g.sampling.top_p,
                        max_tokens=max_tokens,
                        stop=g.sampling.stop,
                    )
                )
    return out


def parse_choice(
    choice: dict[str, Any],
) -> tuple[str, list[str], list[float], list[list[list[Any]]]]:
    """(text, tokens, their log-probs, top log-probs) of a chat completion choice."""
    msg = choice.get("message") or {}
    text = str(msg.get("content") or "")
    content = ((choice.get("logprobs") or {}).get("content")) or []
    tokens = [str(c.get("token", "")) for c in content]
    lps = [float(c.get("logprob", 0.0)) for c in content]
    tops = [
        [
            [str(t.get("token", "")), float(t.get("logprob", 0.0))]
            for t in c.get("top_logprobs") or []
        ]
        for c in content
    ]
    return text, tokens, lps, tops


def _one(
    client: httpx.Client, url: str, model: str, req: QualityRequest, cfg: QualityConfig
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": list(req.messages),
        "max_tokens": req.max_tokens,
        "temperature": req.temperature,
        "logprobs": True,
        "top_logprobs": cfg.top_logprobs,
        "stream": False,
    }
    if req.top_p != 1.0:
        body["top_p"] = req.top_p
    if req.seed is not None:
        body["seed"] = req.seed
    if req.stop:
        body["stop"] = list(req.stop)
    try:
        r = client.post(url.rstrip("/") + "/v1/chat/completions", json=body, timeout=cfg.timeout_s)
    except httpx.HTTPError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if r.status_code != 200:
        return {"error": f"HTTP {r.status_code}: {r.text[:200]}"}
    try:
        return dict(r.json())
    except ValueError:
        return {"error": "the response is not JSON"}


def run_quality_pass(
    url: str,
    model: str,
    plan: Sequence[QualityRequest],
    *,
    arm: str,
    run_id: str = "",
    manifest_sha256: str = "",
    cfg: QualityConfig | None = None,
    headers: Mapping[str, str] | None = None,
) -> list[OutputRecord]:
    """Send the plan to ``url`` and return one ``OutputRecord`` per request, in plan order;
    ``headers``: the endpoint's credentials, sent with every request."""
    cfg = cfg or QualityConfig()
    results: list[dict[str, Any] | None] = [None] * len(plan)
    with httpx.Client(headers=dict(headers or {})) as client:
        for i, req in enumerate(plan):  # greedy ones, one at a time
            if req.temperature == 0:
                results[i] = _one(client, url, model, req, cfg)
        sampled = [i for i, req in enumerate(plan) if req.temperature > 0]
        with ThreadPoolExecutor(max_workers=cfg.concurrency) as pool:
            for i, res in zip(
                sampled,
                pool.map(lambda j: _one(client, url, model, plan[j], cfg), sampled),
                strict=True,
            ):
                results[i] = res
    return [
        _record(req, res or {}, arm, run_id, manifest_sha256)
        for req, res in zip(plan, results, strict=True)
    ]


def _record(
    req: QualityRequest, res: dict[str, Any], arm: str, run_id: str, sha: str
) -> OutputRecord:
    rec = OutputRecord(
        run_id=run_id,
        arm=arm,
        task_group=req.task_group,
        prompt_id=req.prompt_id,
        sample_index=req.sample_index,
        seed=req.seed,
        temperature=req.temperature,
        text="",
        manifest_sha256=sha,
        max_tokens=req.max_tokens,
    )
    if "error" in res:
        rec.error = str(res["error"])
        return rec
    choices = res.get("choices") or []
    if not choices:
        rec.error = "the response has no choices"
        return rec
    rec.text, rec.tokens, rec.token_logprobs, rec.top_logprobs = parse_choice(choices[0])
    rec.finish_reason = choices[0].get("finish_reason")
    return rec
