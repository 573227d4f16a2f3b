"""The bench's report: summary JSON, markdown tables, PNG charts, one self-contained HTML page.

Everything is computed from the stored runs (`runs.jsonl`) and `meta.json`, so a report can
be written again from them without the model (`write(out, meta, runs)`).
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import charts
from bench.methods import FIXED_KS, is_chain
from bench.summary import acceptance_by_depth, markdown, noise, summarize

CHARTS = {
    "speedup_vs_k.png": "Speedup over plain decoding vs K, per task kind",
    "acceptance_by_depth.png": "Acceptance by draft depth (single-chain methods)",
    "latency.png": "Time to first token and inter-token latency",
    "verify_cost.png": "Verify cost t(n)/t(1) and the ceiling n t(1)/t(n)",
}


def best_fixed(summary: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The fixed-K chain with the best speedup over every prompt."""
    rows = summary.get("all", {})
    scored = [(rows[m].get("speedup_vs_plain") or 0.0, m) for m in (f"fixed{k}" for k in FIXED_KS) if m in rows]
    return max(scored)[1] if scored else None


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def header(meta: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> list[str]:
    m, c, cost = meta["machine"], meta["config"], meta["verify_cost"]
    commits = sorted({str(r.get("commit")) for r in runs}) or [str(meta.get("commit"))]
    rel = ", ".join(f"{n}: {float(r):.2f}" for n, r in cost["relative"].items() if n != "1")
    return [
        f"## lookahead bench: {Path(c['model']).name} ({c['model_file']})",
        "",
        f"`{meta['command']}`  ",
        f"{m['cpu']}, {c['threads']} threads of {m['cpus_usable']} usable CPUs, "
        f"llama-cpp-python {m['versions'].get('llama-cpp-python')}, commit {', '.join(commits)}, "
        f"{c['repeats']} repeats, {c['max_tokens']} max tokens, greedy, started {meta['started']}  ",
        f"verify cost t(n)/t(1): {rel} (t(1) = {cost['t1_ms']} ms); at best, every draft accepted: "
        f"{cost['ceiling']:.2f}x (batches of {cost['ceiling_at']})",
    ]


def noise_table(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "### The machine's noise: spread of plain decoding over repeats",
        "",
        "Per prompt (max - min) / median of plain's tok/s over its repeats; differences between "
        "methods smaller than this are not resolved.",
        "",
        "kind | prompts | repeats | median spread | max spread",
        "--- | --- | --- | --- | ---",
    ]
    for kind, e in noise(list(runs)).items():  # type: ignore[arg-type]
        med = "-" if e["spread_median"] is None else f"{e['spread_median']:.1%}"
        top = "-" if e["spread_max"] is None else f"{e['spread_max']:.1%}"
        lines.append(f"{kind} | {e['prompts']} | {e['repeats']} | {med} | {top}")
    return [*lines, ""]


def latency_table(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [
        "### Latency (every prompt)",
        "",
        "TTFT: from the request to the first token, prefill included (median over runs). ITL: the "
        "gap between successive deliveries of tokens (a step that accepts drafts delivers several at once).",
        "",
        "method | TTFT ms | ITL p50 ms | ITL p90 ms | ITL p99 ms",
        "--- | --- | --- | --- | ---",
    ]
    for m, e in summary.get("all", {}).items():
        lines.append(
            f"{m} | {_f(e.get('ttft_ms'))} | {_f(e.get('itl_ms_p50'))} | {_f(e.get('itl_ms_p90'))} | "
            f"{_f(e.get('itl_ms_p99'))}"
        )
    return [*lines, ""]


def acceptance_table(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    counts = acceptance_by_depth(list(runs), is_chain)  # type: ignore[arg-type]
    if not counts:
        return []
    depths = [d for d in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32) if any(len(c["reached"]) >= d for c in counts.values())]
    lines = [
        "### Acceptance by draft depth: P(accepted at d | reached d), single-chain methods",
        "",
        "kind | " + " | ".join(f"d={d}" for d in depths),
        " | ".join(["---"] * (len(depths) + 1)),
    ]
    for kind, c in counts.items():
        cells = []
        for d in depths:
            n = c["reached"][d - 1] if len(c["reached"]) >= d else 0
            cells.append(f"{c['accepted'][d - 1] / n:.2f} ({n})" if n else "-")
        lines.append(f"{kind} | " + " | ".join(cells))
    return [*lines, ""]


def cost_table(meta: Mapping[str, Any]) -> list[str]:
    data = charts.cost_data({int(n): float(t) for n, t in meta["verify_cost"]["seconds"].items()})
    return [
        "### Verify cost on this machine (calibrated)",
        "",
        "n | " + " | ".join(str(int(n)) for n in data["n"]),
        " | ".join(["---"] * (len(data["n"]) + 1)),
        "t(n)/t(1) | " + " | ".join(f"{r:.2f}" for r in data["relative"]),
        "n t(1)/t(n) | " + " | ".join(f"{c:.2f}" for c in data["ceiling"]),
        "",
    ]


def write_charts(out: Path, summary: Mapping[str, Mapping[str, Any]], runs: Sequence[Mapping[str, Any]],
                 meta: Mapping[str, Any]) -> list[str]:
    """The PNGs beside the runs; returns the file names written."""
    seconds = {int(n): float(t) for n, t in meta["verify_cost"]["seconds"].items()}
    best = best_fixed(summary)
    compared = [m for m in ("plain", "adaptive", best) if m]
    figures = {
        "speedup_vs_k.png": charts.speedup_figure(charts.speedup_data(summary)),
        "acceptance_by_depth.png": charts.acceptance_figure(charts.acceptance_data(runs, is_chain)),
        "latency.png": charts.latency_figure(charts.latency_data(runs, compared)),
        "verify_cost.png": charts.cost_figure(charts.cost_data(seconds)),
    }
    for name, fig in figures.items():
        charts.save_png(fig, out / name)
    return list(figures)


def write(out: Path, meta: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> str:
    """summary.json, report.md, the PNGs and report.html in `out`; returns the markdown."""
    methods = [m for m in meta["config"]["methods"] if any(r["method"] == m for r in runs)]
    summary = summarize(list(runs), methods)  # type: ignore[arg-type]
    (out / "summary.json").write_text(json.dumps({"summary": summary, "noise": noise(list(runs))}, indent=1))  # type: ignore[arg-type]
    pngs = write_charts(out, summary, runs, meta) if runs else []
    lines = header(meta, runs)
    lines += ["", markdown(summary, []).strip(), ""]
    lines += noise_table(runs) + latency_table(summary) + acceptance_table(runs) + cost_table(meta)
    lines += [f"![{CHARTS[name]}]({name})\n" for name in pngs]
    text = "\n".join(lines).rstrip() + "\n"
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(to_html(text, out, title=f"lookahead bench: {meta['config']['model']}"))
    return text


_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]+)\)$")


def _inline(text: str) -> str:
    """Escaped text with `code` spans."""
    parts = text.split("`")
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts))


def to_html(markdown_text: str, folder: Path, title: str) -> str:
    """The report's markdown as one HTML page, its PNGs embedded (base64): a file to mail."""
    body: list[str] = []
    lines = markdown_text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            body.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif " | " in line and set(nxt.replace("|", "").split()) == {"---"}:
            rows = [line]
            i += 2
            while i < len(lines) and " | " in lines[i]:
                rows.append(lines[i])
                i += 1
            cells = [[c.strip() for c in r.split(" | ")] for r in rows]
            head = "".join(f"<th>{_inline(c)}</th>" for c in cells[0])
            rest = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in cells[1:])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rest}</tbody></table>")
            continue
        elif m := _IMAGE.match(line):
            data = base64.b64encode((folder / m["src"]).read_bytes()).decode("ascii")
            body.append(f'<figure><img alt="{html.escape(m["alt"])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{html.escape(m['alt'])}</figcaption></figure>")
        elif line:
            body.append(f"<p>{_inline(line)}</p>")
        i += 1
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}"
        "th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}code{background:#f3f3f3}"
    )
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
