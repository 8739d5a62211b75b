"""Engine speed: specpilot plain / speculative (k = 1..6) vs Hugging Face transformers.

Default target (SmolLM2-135M-Instruct) with the best draft available, batch 1, greedy, 128 new
tokens, several prompts. For every configuration: end-to-end tokens/s (prefill included) and
decode cost per committed token; for speculative runs also the acceptance rate alpha, the
measured cost ratio c = draft step / target step, the Leviathan bound
E[c] / (k c + 1) with E[c] = (1 - alpha^(k+1)) / (1 - alpha), and the efficiency
= measured decode speed-up / bound. transformers runs `generate()` and
`generate(assistant_model=draft, num_assistant_tokens=k, schedule constant)` on the same pair
(our draft is copied into a LlamaForCausalLM), and every output is compared with ours.

    .venv/bin/python benchmarks/engine_speed.py                   # bf16, all k, HF comparison
    .venv/bin/python benchmarks/engine_speed.py --ks 2,3 --prompts 2 --max-tokens 64 --json out.json

Run it on an otherwise idle machine: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

from specpilot.analysis.rounds import leviathan_alpha, leviathan_speedup, window_metrics
from specpilot.engine.loader import HF_LAYER_NAMES
from specpilot.engine.model import Transformer
from specpilot.engine.runtime import DEFAULT_DRAFT, build_engine, chat_prompt_ids, parse_dtype
from specpilot.engine.sampling import SamplingParams

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    'Return a JSON object with keys "name", "age" and "city" for: Alice, 31, Paris.',
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "请写一份关于公司年会安排的通知，包括时间、地点和注意事项。",
]


def step_time(model: Transformer, width: int, ctx: int = 200, reps: int = 15) -> float:
    """Median seconds of one cached forward of ``width`` new tokens at context ``ctx``."""
    model.setup_cache(ctx + width + 8, 1)
    slot = torch.tensor([0])
    model(torch.arange(100, 100 + ctx)[None], torch.arange(ctx)[None], slot)
    tokens = torch.arange(500, 500 + width)[None]
    pos = torch.arange(ctx, ctx + width)[None]
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        model(tokens, pos, slot, torch.tensor([width - 1]))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--ks", default="1,2,3,4,5,6")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers comparison")
    ap.add_argument("--json", default=None, help="write all figures to this file")
    args = ap.parse_args()
    torch.manual_seed(0)
    ks = [int(k) for k in args.ks.split(",")]
    dtype = parse_dtype(args.dtype)
    engine, spec = build_engine(None, args.draft, dtype=args.dtype, max_seq_len=1024)
    assert engine.draft is not None
    tok = engine.tokenizer
    prompts = [chat_prompt_ids(tok, p) for p in PROMPTS[: args.prompts]]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)

    t_target = step_time(engine.target, 1)
    t_draft = step_time(engine.draft, 1)
    verify = {k: step_time(engine.target, k + 1) for k in ks}
    engine.target.setup_cache(engine.max_seq_len, engine.max_slots)
    engine.draft.setup_cache(engine.max_seq_len, engine.max_slots)
    c_ratio = t_draft / t_target
    print(
        f"target step {t_target * 1e3:.1f} ms, draft step {t_draft * 1e3:.1f} ms (c = {c_ratio:.3f}); "
        + ", ".join(f"verify k+1={k + 1}: {verify[k] / t_target:.2f}x" for k in ks)
    )

    engine.generate(prompts[0], SamplingParams(max_tokens=8), 2)  # warm-up
    rows: list[dict[str, Any]] = []
    plain_out: list[list[int]] = []

    def run(label: str, k: int) -> dict[str, Any]:
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
            "engine": "specpilot",
            "config": label,
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
            plain_out.extend(outs)
            row["same_as_plain"] = 1.0
        else:
            row["same_as_plain"] = sum(a == b for a, b in zip(outs, plain_out, strict=True)) / len(
                outs
            )
        rows.append(row)
        return row

    base = run("plain", 0)
    for k in ks:
        row = run(f"spec k={k}", k)
        alpha = row["alpha"] or 0.0
        row["speedup"] = base["decode_ms_per_token"] / row["decode_ms_per_token"]
        row["leviathan_bound"] = leviathan_speedup(alpha, k, c_ratio)
        row["efficiency"] = row["speedup"] / row["leviathan_bound"]
        # the same bound with the measured verify cost of k+1 tokens instead of 1 step
        row["bound_measured_verify"] = (
            row["leviathan_bound"] * (k * c_ratio + 1) / (k * c_ratio + verify[k] / t_target)
        )

    if not args.no_hf:
        from pathlib import Path

        from transformers import AutoModelForCausalLM

        p = Path(spec.target_path)
        hf_t = AutoModelForCausalLM.from_pretrained(
            str(p.parent), gguf_file=p.name, dtype=dtype
        ).eval()
        hf_d = to_hf_llama(engine.draft, dtype)
        hf_generate(hf_t, prompts[0], 4)  # warm-up
        best_k = max((r for r in rows if r["k"] > 0), key=lambda r: r["tokens_per_s"])["k"]
        for label, assistant, k in [
            ("hf plain", None, 0),
            *[(f"hf assisted k={kk}", hf_d, kk) for kk in sorted({1, best_k, 3})],
        ]:
            wall = first = 0.0
            tokens = same = 0
            for i, ids in enumerate(prompts):
                out, dt = hf_generate(hf_t, ids, args.max_tokens, assistant, k)
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

    hdr = f"{'engine':<13}{'config':<20}{'tok/s':>8}{'ms/tok':>9}{'alpha':>7}{'E[c]':>6}{'speedup':>9}{'bound':>7}{'eff':>6}{'same':>6}"
    print(hdr)
    for r in rows:
        a = r.get("alpha")
        print(
            f"{r['engine']:<13}{r['config']:<20}{r['tokens_per_s']:>8.1f}{r['decode_ms_per_token']:>9.1f}"
            f"{'' if a is None else f'{a:.2f}':>7}{r.get('mean_acceptance_length', float('nan')):>6.2f}"
            f"{r.get('speedup', float('nan')):>9.2f}{r.get('leviathan_bound', float('nan')):>7.2f}"
            f"{r.get('efficiency', float('nan')):>6.2f}{r['same_as_plain']:>6.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "draft": args.draft,
                    "dtype": args.dtype,
                    "max_tokens": args.max_tokens,
                    "t_target_s": t_target,
                    "t_draft_s": t_draft,
                    "c_ratio": c_ratio,
                    "verify_ratio": {k: verify[k] / t_target for k in ks},
                    "rows": rows,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
