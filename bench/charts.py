"""The bench's charts: matplotlib figures (Agg, no display, no pyplot state) from plain data.

Each `*_data` function turns the summary or the runs into exactly what its figure draws, so
a test can check the data and the axes without looking at pixels; each `*_figure` function
draws it; `save_png` writes one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from bench.methods import FIXED_KS
from bench.summary import acceptance_by_depth, itl_gaps

CODE_KINDS = ("code_edit", "completion")  # the code side of the acceptance heatmap; the rest is prose
Point = tuple[float, float]


def _x(summary_kind: Mapping[str, Any], method: str) -> float | None:
    e = summary_kind.get(method)
    return None if e is None else e.get("speedup_vs_plain")


def speedup_data(summary: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: speedup over plain at each K, for the fixed-K chains and the oracle chains
    (lines), and markers at their mean verified draft size for the adaptive controller, the
    oracle policy and llama-cpp-python's prompt lookup (at its K)."""
    out: dict[str, dict[str, Any]] = {}
    for kind, rows in summary.items():
        lines: dict[str, list[Point]] = {}
        for label, prefix in (("fixed K (ours)", "fixed"), ("oracle drafts, fixed K", "oracle")):
            pts = [(float(k), x) for k in FIXED_KS if (x := _x(rows, f"{prefix}{k}")) is not None]
            if pts:
                lines[label] = pts
        markers: dict[str, Point] = {}
        for label, method, at in (
            ("adaptive (ours)", "adaptive", None),
            ("exact (ours)", "exact", None),
            ("oracle, best K per step", "oracle", None),
            ("PLD K=2", "pld2", 2.0),
            ("PLD K=10", "pld10", 10.0),
        ):
            x = _x(rows, method)
            if x is None:
                continue
            k = at if at is not None else rows[method].get("k_mean_drafting")
            markers[label] = (float(k) if k else 1.0, x)
        if lines or markers:
            out[kind] = {"lines": lines, "markers": markers}
    return out


def speedup_figure(data: Mapping[str, Mapping[str, Any]]) -> Figure:
    kinds = list(data)
    cols = min(3, max(1, len(kinds)))
    rows = math.ceil(len(kinds) / cols) if kinds else 1
    fig = Figure(figsize=(4.6 * cols, 3.6 * rows), layout="constrained")
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(rows, cols, i + 1)
        for label, pts in data[kind]["lines"].items():
            style = "--" if label.startswith("oracle") else "-"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=4, label=label)
        for (label, (k, x)), marker in zip(data[kind]["markers"].items(), "*DsP^v", strict=False):
            ax.plot([k], [x], linestyle="none", marker=marker, ms=10, label=label)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(kind)
        ax.set_xlabel("K (draft tokens verified per step)")
        ax.set_ylabel("speedup over plain")
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    return fig


def acceptance_data(runs: Sequence[Mapping[str, Any]], chain: Any) -> dict[str, dict[str, list[float]]]:
    """{"code": {kind: rates}, "prose": {kind: rates}}: P(token at depth d accepted | reached),
    NaN where never reached, pooled over the single-chain methods' runs."""
    counts = acceptance_by_depth(list(runs), chain)  # type: ignore[arg-type]
    out: dict[str, dict[str, list[float]]] = {"code": {}, "prose": {}}
    for kind, c in counts.items():
        rates = [a / n if n else math.nan for a, n in zip(c["accepted"], c["reached"], strict=True)]
        out["code" if kind in CODE_KINDS else "prose"][kind] = rates
    return {group: kinds for group, kinds in out.items() if kinds}


def acceptance_figure(data: Mapping[str, Mapping[str, Sequence[float]]]) -> Figure:
    groups = list(data)
    depth = max((len(r) for g in data.values() for r in g.values()), default=1)
    fig = Figure(figsize=(max(6.0, 0.28 * depth * len(groups) + 3), 3.2), layout="constrained")
    if not groups:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no single-chain runs drafted anything", ha="center", va="center")
        ax.set_axis_off()
        return fig
    image = None
    for i, group in enumerate(groups):
        ax = fig.add_subplot(1, len(groups), i + 1)
        kinds = list(data.get(group, {}))
        grid = [[*data[group][k], *[math.nan] * (depth - len(data[group][k]))] for k in kinds]
        image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(kinds)), kinds)
        ticks = [d for d in range(depth) if (d + 1) in (1, 2, 4, 8, 16, 32, 64) or depth <= 8]
        ax.set_xticks(ticks, [str(d + 1) for d in ticks])
        ax.set_xlabel("draft depth d")
        ax.set_title(group)
    if image is not None:
        fig.colorbar(image, ax=fig.axes, shrink=0.9)
    fig.suptitle("P(drafted token at depth d accepted | depth d reached), single-chain drafts")
    return fig


def latency_data(runs: Sequence[Mapping[str, Any]], methods: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """Per method: every run's TTFT and every inter-token gap, in milliseconds."""
    out: dict[str, dict[str, list[float]]] = {}
    for m in methods:
        mine = [r for r in runs if r["method"] == m]
        if mine:
            out[m] = {
                "ttft_ms": [1000 * r["ttft_s"] for r in mine if r.get("ttft_s") is not None],
                "itl_ms": [1000 * g for r in mine for g in itl_gaps(dict(r))],
            }
    return out


def latency_figure(data: Mapping[str, Mapping[str, Sequence[float]]]) -> Figure:
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    names = list(data)
    ax1.boxplot([list(data[m]["ttft_ms"]) or [math.nan] for m in names], tick_labels=names, showfliers=True)
    ax1.set_ylabel("ms")
    ax1.set_title("time to first token (prefill included)")
    ax1.grid(alpha=0.3)
    for m in names:
        gaps = sorted(data[m]["itl_ms"])
        if gaps:
            ax2.step(gaps, [(i + 1) / len(gaps) for i in range(len(gaps))], where="post", label=m)
    ax2.set_xscale("log")
    ax2.xaxis.set_major_formatter(ScalarFormatter())
    ax2.xaxis.set_minor_formatter(NullFormatter())
    ax2.set_xlabel("ms between deliveries of tokens")
    ax2.set_ylabel("fraction of gaps <= x")
    ax2.set_title("inter-token latency (ECDF)")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    return fig


def cost_data(seconds: Mapping[int, float]) -> dict[str, list[float]]:
    """Batch sizes n, t(n)/t(1), and the ceiling n t(1)/t(n): the speedup if every drafted
    token of a batch of n were accepted."""
    sizes = sorted(seconds)
    t1 = seconds[1]
    return {
        "n": [float(n) for n in sizes],
        "relative": [seconds[n] / t1 for n in sizes],
        "ceiling": [n * t1 / seconds[n] for n in sizes],
    }


def cost_figure(data: Mapping[str, Sequence[float]]) -> Figure:
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    ax1.plot(data["n"], data["relative"], marker="o", label="t(n) / t(1), measured")
    ax1.plot(data["n"], data["n"], ":", color="grey", label="n (no batching gain)")
    ax1.set_xlabel("batch size n (tokens per llama_decode)")
    ax1.set_title("verify cost")
    ax1.legend(fontsize=8)
    ax2.plot(data["n"], data["ceiling"], marker="o", color="C2", label="n t(1) / t(n)")
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set_xlabel("batch size n")
    ax2.set_title("ceiling: speedup if every drafted token is accepted")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    return fig


def save_png(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)  # the Agg canvas: no display needed
    fig.savefig(path, format="png", dpi=110)
    return path
