"""``specpilot trace-windows TRACE``: the off-peak, peak and sharpest-burst windows of a trace.

Reads an Azure LLM inference trace CSV, a generic CSV/JSONL trace (timestamp, input tokens,
output tokens), or a request log (OpenAI Batch lines, LiteLLM spend rows, vLLM's request log,
plain JSONL; input tokens estimated, output tokens as logged), told apart by the first line or
named with ``--shape``; see :mod:`specpilot.workload.trace` for the window definitions. A
log's windows are in its own seconds, as a ``request_log`` phase's ``window:`` takes them.
"""

from __future__ import annotations

import argparse
import json

# workload.logshapes.SHAPES, written out: the CLI imports no workload module until it runs
SHAPES = ("openai_batch", "litellm_spend", "vllm_log", "jsonl")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace-windows", help="find off-peak / peak / burst windows in an arrival trace"
    )
    p.add_argument(
        "trace",
        help="Azure trace CSV, CSV/JSONL with timestamp, input and output tokens, or a request log",
    )
    p.add_argument(
        "--shape",
        choices=("auto", "trace", *SHAPES),
        default="auto",
        help="what the file is (auto: from its first line; trace: an arrival trace)",
    )
    p.add_argument("--time-field", default=None, help="a request log's time field (dotted)")
    p.add_argument("--window-s", type=float, default=300.0, help="off-peak/peak window length (s)")
    p.add_argument("--burst-s", type=float, default=10.0, help="burst window length (s)")
    p.add_argument("--context-s", type=float, default=120.0, help="baseline before a burst (s)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specpilot.workload.requestlog import arrivals_trace
    from specpilot.workload.trace import find_windows

    tr = arrivals_trace(args.trace, shape=args.shape, time_field=args.time_field)
    wins = find_windows(tr, window_s=args.window_s, burst_s=args.burst_s, context_s=args.context_s)
    if args.json:
        print(
            json.dumps(
                {"trace": tr.describe(), "windows": {k: w.to_dict() for k, w in wins.items()}},
                indent=2,
            )
        )
        return 0
    d = tr.describe()
    print(
        f"{d['source']}: {d['requests']} requests over {d['duration_s']:.0f} s, mean {d['rate_per_s']:.3f} req/s"
        + (f", from {d['start_time'][:23]}" if d["start_time"] else "")
    )
    print(
        f"  tokens in  mean {d['input_tokens']['mean']:.0f} p50 {d['input_tokens']['p50']:.0f}"
        f" p90 {d['input_tokens']['p90']:.0f};  out mean {d['output_tokens']['mean']:.0f}"
        f" p50 {d['output_tokens']['p50']:.0f} p90 {d['output_tokens']['p90']:.0f}"
    )
    head = f"{'window':<9}{'start_s':>8}{'end_s':>8}{'requests':>9}{'rate/s':>9}{'x mean':>8}{'jump':>9}"
    print(f"{head}  {'wall clock':<24}{'in':>6}{'out':>6}")
    for w in wins.values():
        jump = "-" if w.jump is None else f"{w.jump:.1f}x"
        print(
            f"{w.kind:<9}{w.start_s:>8.0f}{w.end_s:>8.0f}{w.requests:>9}{w.rate:>9.3f}{w.ratio:>8.2f}{jump:>9}  "
            f"{(w.start_time or '-'):<24}{w.mean_input_tokens:>6.0f}{w.mean_output_tokens:>6.0f}"
        )
    print(
        f"x mean: rate / the trace's mean rate; jump: burst rate / the rate over the {args.context_s:g} s"
        " before it; in/out: mean tokens"
    )
    return 0
