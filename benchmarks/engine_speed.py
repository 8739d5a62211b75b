"""Engine speed: specpilot plain / speculative (k = 1..6) vs llama.cpp and transformers.

Default target (SmolLM2-135M-Instruct) with the best draft available, batch 1, greedy, 128 new
tokens, several prompts. First the verify-cost curve of every weight format on this machine
(target forward time for 1..8 new tokens at batch 1, and the ratio to one token), then for the
engine's format (``--dtype``, default ``auto``: what the calibration chose) every configuration's
end-to-end tokens/s (prefill included) and decode cost per committed token; for speculative
runs also the acceptance rate alpha, the measured cost ratio c = draft step / target step, the
Leviathan bound E[c] / (k c + 1) with E[c] = (1 - alpha^(k+1)) / (1 - alpha), and the efficiency
= measured decode speed-up / bound. llama.cpp (xllamacpp, the same GGUF, the same thread count)
decodes the same prompt tokens plainly; its decode ms/token is its own ``timings``. transformers
runs `generate()` and assisted generation on the same pair (our draft copied into a
LlamaForCausalLM), and every output is compared with ours.

    .venv/bin/python benchmarks/engine_speed.py --threads 2 --json out.json       # everything
    .venv/bin/python benchmarks/engine_speed.py --ks 2,3 --prompts 2 --max-tokens 64 --no-hf

Run it on an otherwise idle machine: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from typing import Any

import torch

from specpilot.analysis.mechanism.rounds import leviathan_alpha, leviathan_speedup, window_metrics
from specpilot.engine.calibrate import StepTimer
from specpilot.engine.formats import FORMATS, apply_format, parse_format
from specpilot.engine.loader import HF_LAYER_NAMES, default_target_path, load_model
from specpilot.engine.model import Transformer
from specpilot.engine.runtime import DEFAULT_DRAFT, build_engine, chat_prompt_ids
from specpilot.engine.sampling import SamplingParams

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    'Return a JSON object with keys "name", "age" and "city" for: Alice, 31, Paris.',
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "请写一份关于公司年会安排的通知，包括时间、地点和注意事项。",
]


def step_time(model: Transformer, width: int, ctx: int = 200, reps: int = 15) -> float:
    """Median seconds of one cached forward of ``width`` new tokens at context ``ctx``."""
    return StepTimer(model, 1, width, ctx).median(1, width, reps)


def verify_curves(formats: list[str], ctx: int = 200, reps: int = 9) -> dict[str, dict[int, float]]:
    """Target forward seconds for 1..8 new tokens at batch 1, per weight format."""
    ref = load_model(default_target_path(), dtype=torch.float32, tokenizer=False).model
    out = {}
    for name in formats:
        model = ref if name == "fp32" else apply_format(copy.deepcopy(ref), parse_format(name))
        timer = StepTimer(model, 1, 8, ctx)
        out[name] = {n: s for (_, n), s in timer.curve([(1, n) for n in range(1, 9)], reps).items()}
        del model
    return out


def llamacpp_plain(prompts: list[list[int]], max_tokens: int, threads: int) -> dict[str, Any]:
    """llama.cpp decoding the same prompt tokens plainly (greedy, EOS ignored)."""
    import httpx

    from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig

    cfg = LlamaCppConfig(model=default_target_path(), threads=threads, n_ctx=2048)
    tokens = wall = decode_ms = 0.0
    with LlamaCppBackend(cfg) as be:
        body = {"n_predict": max_tokens, "temperature": 0.0, "ignore_eos": True}
        httpx.post(be.endpoint + "/completion", json={**body, "prompt": prompts[0]}, timeout=300)
        for ids in prompts:
            t = time.perf_counter()
            r = httpx.post(
                be.endpoint + "/completion",
                json={**body, "prompt": ids, "cache_prompt": False},
                timeout=300,
            ).json()
            wall += time.perf_counter() - t
            tokens += r["timings"]["predicted_n"]
            decode_ms += r["timings"]["predicted_ms"]
        version = be.version()
    return {
        "engine": f"llama.cpp {version}",
        "config": "plain (xllamacpp)",
        "k": 0,
        "tokens_per_s": tokens / wall,
        "decode_ms_per_token": decode_ms / tokens,
    }


def to_hf_llama(model: Transformer, dtype: torch.dtype) -> Any:
    """Copy a specpilot Transformer into transformers' LlamaForCausalLM (same weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = model.cfg
    # transformers has no vocabulary-restricted head: a restricted draft gets the full tied head
    # there (same proposals wherever the restricted head's argmax is the full argmax; slower).
    head = model.embed.weight if hasattr(model.lm_head, "ids") else model.lm_head.weight
    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.dim,
        intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta,
        max_position_embeddings=cfg.context_length,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    hf = LlamaForCausalLM(hf_cfg)
    sd: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": model.embed.weight,
        "model.norm.weight": model.norm.weight,
        "lm_head.weight": head,
    }
    for i, layer in enumerate(model.layers):
        for theirs, ours in HF_LAYER_NAMES.items():
            sd[f"model.layers.{i}.{theirs}"] = layer.get_parameter(ours)
    missing, unexpected = hf.load_state_dict(
        {k: v.detach().clone() for k, v in sd.items()}, strict=False
    )
    if [m for m in missing if "rotary" not in m] or unexpected:
        raise RuntimeError(f"HF copy failed: missing={missing} unexpected={unexpected}")
    return hf.to(dtype).eval()


def hf_generate(
    model: Any, ids: list[int], max_new: int, assistant: Any = None, k: int = 0
) -> tuple[list[int], float]:
    x = torch.tensor([ids])
    kw: dict[str, Any] = {"max_new_tokens": max_new, "do_sample": False, "pad_token_id": 2}
    if assistant is not None:
        assistant.generation_config.num_assistant_tokens = k
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        kw["assistant_model"] = assistant
    t = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(x, **kw)
    return out[0, len(ids) :].tolist(), time.perf_counter() - t


def engine_rows(
    engine: Any, prompts: list[list[int]], ks: list[int], max_tokens: int, c_ratio: float,
    verify: dict[int, float],
) -> tuple[list[dict[str, Any]], list[list[int]]]:  # fmt: skip
    """Plain and speculative runs over the prompts; -> rows, plain outputs."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    engine.generate(prompts[0], SamplingParams(max_tokens=8), 2)  # warm-up
    rows: list[dict[str, Any]] = []
    plain_out: list[list[int]] = []
    for k in [0, *ks]:
        rounds, outs, wall, tokens = [], [], 0.0, 0
        for ids in prompts:
            t = time.perf_counter()
            r = engine.generate(ids, params, k)
            wall += time.perf_counter() - t
            tokens += r.output_tokens
            rounds += r.rounds
            outs.append(r.output_ids)
        w = window_metrics(rounds)
        row = {
            "engine": f"specpilot {engine.target.weight_format}",
            "config": "plain" if k == 0 else f"spec k={k}",
            "k": k,
            "tokens_per_s": tokens / wall,
            "decode_ms_per_token": w.cost_per_token_s * 1e3,
            "acceptance_rate": w.acceptance_rate,
            "alpha": leviathan_alpha(rounds),
            "mean_acceptance_length": w.mean_acceptance_length,
            "draft_share": w.draft_s / w.time_s,
            "overhead_share": w.overhead_s / w.time_s,
        }
        if k == 0:
            plain_out = outs
        else:
            alpha = row["alpha"] or 0.0
            row["speedup"] = rows[0]["decode_ms_per_token"] / row["decode_ms_per_token"]
            row["leviathan_bound"] = leviathan_speedup(alpha, k, c_ratio)
            row["efficiency"] = row["speedup"] / row["leviathan_bound"]
            # the same bound with the measured verify cost of k+1 tokens instead of 1 step
            row["bound_measured_verify"] = (
                row["leviathan_bound"] * (k * c_ratio + 1) / (k * c_ratio + verify[k])
            )
        row["same_as_plain"] = sum(a == b for a, b in zip(outs, plain_out, strict=True)) / len(outs)
        rows.append(row)
    return rows, plain_out


def hf_rows(
    target_path: str, draft: Transformer, prompts: list[list[int]], max_tokens: int,
    plain_out: list[list[int]], best_k: int, dtype: torch.dtype,
) -> list[dict[str, Any]]:  # fmt: skip
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    p = Path(target_path)
    hf_t = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=dtype)
    hf_t = hf_t.eval()
    hf_d = to_hf_llama(draft, dtype)
    hf_generate(hf_t, prompts[0], 4)  # warm-up
    rows = []
    for label, assistant, k in [
        ("hf plain", None, 0),
        *[(f"hf assisted k={kk}", hf_d, kk) for kk in sorted({1, best_k, 3})],
    ]:
        wall = first = 0.0
        tokens = same = 0
        for i, ids in enumerate(prompts):
            out, dt = hf_generate(hf_t, ids, max_tokens, assistant, k)
            _, dt1 = hf_generate(hf_t, ids, 1)
            wall += dt
            first += dt1
            tokens += len(out)
            same += out == plain_out[i]
        rows.append(
            {
                "engine": "transformers",
                "config": label,
                "k": k,
                "tokens_per_s": tokens / wall,
                "decode_ms_per_token": (wall - first) / (tokens - len(prompts)) * 1e3,
                "same_as_plain": same / len(prompts),
            }
        )
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    nan = float("nan")
    print(
        f"{'engine':<22}{'config':<20}{'tok/s':>8}{'ms/tok':>9}{'alpha':>7}{'E[c]':>6}"
        f"{'speedup':>9}{'bound':>7}{'eff':>6}{'same':>6}"
    )
    for r in rows:
        a = r.get("alpha")
        print(
            f"{r['engine']:<22}{r['config']:<20}{r['tokens_per_s']:>8.1f}"
            f"{r['decode_ms_per_token']:>9.1f}{'' if a is None else f'{a:.2f}':>7}"
            f"{r.get('mean_acceptance_length', nan):>6.2f}{r.get('speedup', nan):>9.2f}"
            f"{r.get('leviathan_bound', nan):>7.2f}{r.get('efficiency', nan):>6.2f}"
            f"{r.get('same_as_plain', nan):>6.2f}"
        )


def print_curves(curves: dict[str, dict[int, float]]) -> None:
    print(f"{'format':<11}{'1 token ms':>11}" + "".join(f"{f'v({n})':>7}" for n in range(2, 9)))
    for name, c in curves.items():
        print(
            f"{name:<11}{c[1] * 1e3:>11.2f}" + "".join(f"{c[n] / c[1]:>7.2f}" for n in range(2, 9))
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--dtype", default="auto", help="auto or a weight format (engine.formats)")
    ap.add_argument("--formats", default=",".join(FORMATS), help="verify curves of these formats")
    ap.add_argument("--threads", type=int, default=None, help="torch and llama.cpp threads")
    ap.add_argument("--ks", default="1,2,3,4,5,6")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers comparison")
    ap.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp comparison")
    ap.add_argument("--json", default=None, help="write all figures to this file")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]
    formats = [f for f in args.formats.split(",") if f]
    curves = verify_curves(formats) if formats else {}
    print_curves(curves)
    engine, spec = build_engine(None, args.draft, dtype=args.dtype, max_seq_len=1024, k=3)
    assert engine.draft is not None
    print(f"engine: target {spec.dtype}, draft {spec.draft_dtype}")
    if engine.calibration:
        print(
            f"calibration ({engine.calibration['mode']}): {engine.calibration['target']['reason']}"
        )
    prompts = [chat_prompt_ids(engine.tokenizer, p) for p in PROMPTS[: args.prompts]]
    t_target = step_time(engine.target, 1)
    t_draft = step_time(engine.draft, 1)
    verify = {k: step_time(engine.target, k + 1) / t_target for k in ks}
    engine.target.setup_cache(engine.max_seq_len, engine.max_slots)
    engine.draft.setup_cache(engine.max_seq_len, engine.max_slots)
    c_ratio = t_draft / t_target
    print(
        f"target step {t_target * 1e3:.1f} ms, draft step {t_draft * 1e3:.1f} ms (c = {c_ratio:.3f}); "
        + ", ".join(f"verify k+1={k + 1}: {verify[k]:.2f}x" for k in ks)
    )
    rows, plain_out = engine_rows(engine, prompts, ks, args.max_tokens, c_ratio, verify)
    if not args.no_llamacpp:
        rows.append(llamacpp_plain(prompts, args.max_tokens, torch.get_num_threads()))
        rows[-1]["ours_vs_llamacpp"] = (
            rows[0]["decode_ms_per_token"] / rows[-1]["decode_ms_per_token"]
        )
        print(f"plain decoding: {rows[-1]['ours_vs_llamacpp']:.2f}x llama.cpp's ms/token")
    if not args.no_hf and parse_format(spec.dtype).quantized:
        print(f"transformers comparison skipped: it has no {spec.dtype} weights")
    elif not args.no_hf:
        best_k = max(
            (r for r in rows if r["k"] > 0 and "alpha" in r), key=lambda r: r["tokens_per_s"]
        )["k"]
        dtype = (
            parse_format(spec.dtype).act_dtype
            if not parse_format(spec.dtype).quantized
            else torch.bfloat16
        )
        rows += hf_rows(
            spec.target_path, engine.draft, prompts, args.max_tokens, plain_out, best_k, dtype
        )
    print_rows(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "draft": args.draft,
                    "dtype": spec.dtype,
                    "draft_dtype": spec.draft_dtype,
                    "threads": torch.get_num_threads(),
                    "max_tokens": args.max_tokens,
                    "t_target_s": t_target,
                    "t_draft_s": t_draft,
                    "c_ratio": c_ratio,
                    "verify_ratio": verify,
                    "verify_curves_s": curves,
                    "calibration": engine.calibration,
                    "rows": rows,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
