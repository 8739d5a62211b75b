"""The plots, drawn from the JSON document's ``figures`` as inline SVG (matplotlib, offline).

Baseline grey, the equal-budget alternative orange, candidates in colour. A figure without data
returns None and the report says so in its place.

    >>> svgs = render_all([{"id": "verify_cost", "title": "t", "caption": "c", "data": {"curves": [
    ...     {"arm": "spec", "source": "calibration", "batch_size": 1,
    ...      "points": [{"tokens": 1, "ratio": 1.0}, {"tokens": 4, "ratio": 2.2}]}], "hardware": "x"}}])
    >>> svgs["verify_cost"].startswith("<svg")
    True
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import numpy as np

GREY, ALT = "#7f7f7f", "#ff7f0e"
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _plt() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # an optional extra
        raise RuntimeError("plots need matplotlib: pip install 'specpilot[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "specpilot", "font.size": 9})
    return plt


def _integer_ticks() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


class _Colours:
    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, arm: str, role: str) -> str:
        if role == "baseline" or role == "plain":
            return GREY
        if role == "alternative":
            return ALT
        if arm not in self.seen:
            self.seen[arm] = PALETTE[len(self.seen) % len(PALETTE)]
        return self.seen[arm]


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # no XML prolog or DOCTYPE (an external DTD URL)


OUTCOME_COLOUR = {
    "faster": "#2ca02c",
    "slower": "#d62728",
    "no_difference": "#1f77b4",
    "insufficient": "#7f7f7f",
    "aa": "#7f7f7f",
}


def _forest(d: dict[str, Any]) -> Any:
    """One row per cell: the estimate, its deciding interval (arrow heads where it runs off the
    axis), the equivalence band; decided cells filled, undecided hollow; planted and A/A rows
    with a tick where they should land."""
    rows = [r for r in d["rows"] if r["estimate"] is not None]
    if not rows:
        return None
    plt = _plt()
    lim = 0.6  # +-60%: wider intervals are drawn to the edge with an arrow
    fig, ax = plt.subplots(figsize=(9, 0.7 + 0.24 * len(rows)))
    if d.get("margin"):
        ax.axvspan(-d["margin"] * 100, d["margin"] * 100, color="#1f77b4", alpha=0.10, lw=0)
    ax.axvline(0, color="black", lw=0.8)
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        colour = OUTCOME_COLOUR.get(r["outcome"], GREY)
        lo, hi = r["low"], r["high"]
        if lo is not None and hi is not None:
            a, b = max(lo, -lim), min(hi, lim)
            ax.plot([a * 100, b * 100], [y, y], color=colour, lw=1.6)
            for end, cut, sign in ((a, lo < -lim, -1), (b, hi > lim, 1)):
                if cut:
                    ax.annotate(
                        "",
                        xy=(end * 100 + sign * 2, y),
                        xytext=(end * 100, y),
                        arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.2},
                    )
        decided = r["outcome"] in ("faster", "slower", "no_difference")
        x = min(max(r["estimate"], -lim), lim) * 100
        ax.plot([x], [y], "o", ms=6, color=colour, mfc=colour if decided else "white", mew=1.5)
        if r.get("expected") is not None:
            ax.plot([r["expected"] * 100], [y], "|", ms=12, mew=2, color="#ff7f0e")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["label"] for r in reversed(rows)], fontsize=7)
    ax.set_xlim(-lim * 100 - 4, lim * 100 + 4)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("change in task time, % (negative: candidate faster)")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _latency(d: dict[str, Any]) -> Any:
    if not d["arms"]:
        return None
    plt, col = _plt(), _Colours()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, label in ((axes[0], "e2e", "E2E (s)"), (axes[1], "ttft", "TTFT (s)")):
        for arm in d["arms"]:
            pts = [(v, q) for v, q in zip(arm[key], arm["q"], strict=True) if v is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(
                    xs,
                    ys,
                    color=col(arm["arm"], arm["role"]),
                    label=f"{arm['arm']} ({arm['role']})",
                )
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of scheduled requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig


def _load(d: dict[str, Any]) -> Any:
    if not d["arms"]:
        return None
    plt, col = _plt(), _Colours()
    fig, (g, p) = plt.subplots(1, 2, figsize=(9, 3.4))
    for arm in d["arms"]:
        pts = sorted(
            (q for q in arm["points"] if q["offered_rps"] is not None),
            key=lambda q: q["offered_rps"],
        )
        x = [q["offered_rps"] for q in pts]
        c = col(arm["arm"], arm["role"])
        g.plot(x, [q["goodput_rps"] for q in pts], "o-", color=c, label=arm["arm"])
        p.plot(
            x,
            [q["e2e_p99_s"] if q["e2e_p99_s"] is not None else float("nan") for q in pts],
            "o-",
            color=c,
        )
    for cr in d["crossover"]:
        if cr["crossover_rps"] is not None:
            for ax in (g, p):
                ax.axvline(cr["crossover_rps"], color="black", ls="--", lw=1)
            g.annotate(
                f"crossover ({cr['candidate_arm']})",
                xy=(cr["crossover_rps"], 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(-3, -3),
                textcoords="offset points",
                rotation=90,
                fontsize=7,
                ha="right",
                va="top",
            )
    g.set(xlabel="offered load (req/s)", ylabel="goodput (on-time req/s)")
    p.set(xlabel="offered load (req/s)", ylabel="p99 E2E (s; gap = not reached)")
    for ax in (g, p):
        ax.grid(alpha=0.3)
    g.legend(fontsize=7)
    return fig


def _positions(d: dict[str, Any]) -> Any:
    if not d["series"]:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for i, s in enumerate(d["series"]):
        xs = list(range(1, len(s["per_position"]) + 1))
        ax.plot(
            xs,
            s["per_position"],
            "o-",
            color=PALETTE[i % len(PALETTE)],
            label=f"{s['arm']}: {s['task_group']}",
        )
    ax.set(xlabel="draft position i", ylabel="P(accepted >= i)", ylim=(0, 1.02))
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def _groups(d: dict[str, Any]) -> Any:
    bars = [b for b in d["bars"] if b["mean_acceptance_length"] is not None]
    if not bars:
        return None
    plt = _plt()
    fig, (m, h) = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = [f"{b['arm']}\n{b['task_group']}" for b in bars]
    m.bar(range(len(bars)), [b["mean_acceptance_length"] for b in bars], color=PALETTE[0])
    m.set_xticks(range(len(bars)), labels, fontsize=7)
    m.set_ylabel("mean acceptance length (tokens/round)")
    for i, b in enumerate(bars):
        total = sum(b["per_request_hist"]) or 1
        h.plot(
            [j / 10 + 0.05 for j in range(10)],
            [x / total for x in b["per_request_hist"]],
            "o-",
            color=PALETTE[i % len(PALETTE)],
            label=labels[i].replace("\n", ": "),
        )
    h.set(xlabel="per-request acceptance rate", ylabel="fraction of requests")
    h.legend(fontsize=7)
    for ax in (m, h):
        ax.grid(alpha=0.3)
    return fig


def _shade(metric: str, v: float) -> float:
    """0 (red) .. 1 (green): speed-ups around 1.0, pass rates as they are, acceptance length
    from 1 (nothing accepted) to 4."""
    if "speed-up" in metric:
        return min(max((v - 1.0) / 1.0 + 0.5, 0.0), 1.0)
    if "pass rate" in metric:
        return min(max(v, 0.0), 1.0)
    return min(max((v - 1.0) / 3.0, 0.0), 1.0)


def _matrix(d: dict[str, Any]) -> Any:
    if not d["groups"]:
        return None
    import numpy as np

    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.6 * len(d["metrics"]) + 1.5, 0.5 * len(d["groups"]) + 1.4))
    vals = [[np.nan if v is None else float(v) for v in row] for row in d["values"]]
    shade = np.array(
        [
            [
                np.nan if np.isnan(v) else _shade(m, v)
                for v, m in zip(row, d["metrics"], strict=True)
            ]
            for row in vals
        ]
    )
    ax.imshow(shade, cmap="RdYlGn", vmin=-0.3, vmax=1.3, aspect="auto")
    for i, row in enumerate(vals):
        for j, v in enumerate(row):
            ax.text(
                j, i, "n/a" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=8
            )
    ax.set_xticks(range(len(d["metrics"])), d["metrics"], fontsize=7, rotation=15)
    ax.set_yticks(range(len(d["groups"])), d["groups"])
    ax.set_title(f"candidate: {d['candidate_arm']}", fontsize=8)
    return fig


def _stack(d: dict[str, Any]) -> Any:
    if not d["bars"]:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(d["bars"]) + 2), 3.4))
    x = range(len(d["bars"]))
    bottom = [0.0] * len(d["bars"])
    for part, c in (("draft_ms", "#9467bd"), ("verify_ms", "#1f77b4"), ("overhead_ms", "#bcbd22")):
        vals = [b[part] for b in d["bars"]]
        ax.bar(
            x,
            vals,
            bottom=bottom,
            color=c,
            label=part.replace("_ms", ""),
            edgecolor=[GREY if b["role"] in ("baseline", "plain") else "black" for b in d["bars"]],
        )
        bottom = [s + v for s, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(list(x), [f"{b['arm']}\n{b['task_group']}" for b in d["bars"]], fontsize=7)
    ax.set_ylabel("ms per committed token")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    return fig


def _stages(d: dict[str, Any]) -> Any:
    if not d["groups"]:
        return None
    plt = _plt()
    names = sorted(
        {k for g in d["groups"] for k in g["mean_stage_s"]}, key=lambda k: (k == "decode", k)
    )
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(d["groups"]) + 1.5))
    left = [0.0] * len(d["groups"])
    colours = {"decode": "#1f77b4", "prefill": "#aec7e8", "queue": "#ffbb78", "other": "#c7c7c7"}
    for i, n in enumerate(names):
        vals = [g["mean_stage_s"].get(n, 0.0) for g in d["groups"]]
        ax.barh(
            range(len(vals)),
            vals,
            left=left,
            color=colours.get(n, PALETTE[(i + 2) % len(PALETTE)]),
            label=n,
        )
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_yticks(range(len(d["groups"])), [g["task_group"] for g in d["groups"]])
    ax.set_xlabel(f"mean seconds per task ({d['arm']})")
    ax.legend(fontsize=7, ncols=min(len(names), 6), loc="lower right")
    return fig


def verify_lines(curves: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the verify-cost plot draws. Calibration curves (each arm's engine measures the
    target at load): one line per batch size, the median over the arms at each n with their
    range as a band (the spread is the measurement's own noise). Curves from the rounds: one
    per batch size and set of arms with the same points, and only where they say something
    (a point past n = 1; a plain arm's single n = 1 point is 1 by definition).

    >>> c = [{"arm": a, "source": "calibration", "batch_size": 1,
    ...       "points": [{"tokens": 1, "ratio": 1.0}, {"tokens": 4, "ratio": r}]}
    ...      for a, r in (("x", 2.0), ("y", 2.4), ("z", 2.2))]
    >>> [(v["arms"], v["points"], v["low"], v["high"]) for v in verify_lines(c)]
    [(['x', 'y', 'z'], [(1, 1.0), (4, 2.2)], [1.0, 2.0], [1.0, 2.4])]
    """
    out: list[dict[str, Any]] = []
    cal: dict[int, dict[str, Any]] = {}
    for c in curves:
        if c["source"] == "calibration" and c["points"]:
            g = cal.setdefault(c["batch_size"], {"arms": [], "by_n": {}})
            g["arms"].append(c["arm"])
            for pt in c["points"]:
                g["by_n"].setdefault(pt["tokens"], []).append(pt["ratio"])
    for b, g in sorted(cal.items()):
        ns = sorted(g["by_n"])
        out.append(
            {
                "source": "calibration",
                "batch_size": b,
                "arms": g["arms"],
                "points": [(n, float(np.median(g["by_n"][n]))) for n in ns],
                "low": [float(min(g["by_n"][n])) for n in ns],
                "high": [float(max(g["by_n"][n])) for n in ns],
            }
        )
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for c in curves:
        pts = tuple((p["tokens"], round(p["ratio"], 6)) for p in c["points"])
        if c["source"] == "calibration" or not any(t > 1 for t, _ in pts):
            continue
        key = (c["batch_size"], pts)
        if key in seen:
            seen[key]["arms"].append(c["arm"])
        else:
            seen[key] = {
                "source": c["source"],
                "batch_size": c["batch_size"],
                "points": list(pts),
                "arms": [c["arm"]],
            }
    return out + sorted(seen.values(), key=lambda v: (v["batch_size"], v["arms"]))


def _verify(d: dict[str, Any]) -> Any:
    lines = verify_lines(d["curves"])
    if not lines:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.9))
    sizes = sorted({v["batch_size"] for v in lines})
    for v in lines:
        colour = PALETTE[sizes.index(v["batch_size"]) % len(PALETTE)]
        xs, ys = [t for t, _ in v["points"]], [r for _, r in v["points"]]
        if v["source"] == "calibration":
            n = len(v["arms"])
            who = v["arms"][0] if n == 1 else f"median of {n} arms, band their range"
            ax.plot(
                xs, ys, "o-", color=colour, ms=3, label=f"b={v['batch_size']} calibration ({who})"
            )
            if n > 1:
                ax.fill_between(xs, v["low"], v["high"], color=colour, alpha=0.15, lw=0)
        else:
            who = ", ".join(v["arms"]) if len(v["arms"]) <= 2 else f"{len(v['arms'])} arms"
            ax.plot(
                xs,
                ys,
                "s",
                color=colour,
                ms=6,
                mfc="none",
                label=f"b={v['batch_size']} rounds ({who})",
            )
    ax.axhline(1.0, color=GREY, ls=":", lw=1)
    ax.set(xlabel="tokens verified per row (k + 1)", ylabel="v(n): time / one-token time")
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_title(d.get("hardware", ""), fontsize=7)
    ax.grid(alpha=0.3)
    # the legend below the axes, never over the data
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, frameon=False)
    fig.subplots_adjust(bottom=0.34)
    return fig


DRAW: dict[str, Callable[[dict[str, Any]], Any]] = {
    "forest": _forest,
    "latency_cdf": _latency,
    "load_curves": _load,
    "acceptance_position": _positions,
    "acceptance_group": _groups,
    "group_matrix": _matrix,
    "round_time_stack": _stack,
    "stage_decomposition": _stages,
    "verify_cost": _verify,
}


def render_all(figures: list[dict[str, Any]]) -> dict[str, str | None]:
    """id -> inline SVG text (None: no data for that plot)."""
    out: dict[str, str | None] = {}
    for f in figures:
        fig = DRAW[f["id"]](f["data"])
        out[f["id"]] = None if fig is None else _strip(_svg(fig))
    return out


def _strip(svg: str) -> str:
    """Inline-ready: no RDF metadata block and no namespace declarations (HTML parses inline SVG
    without them), so the report holds no URL at all."""
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    return re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg)
