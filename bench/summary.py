"""Turns the comparison's per-run records into per-kind figures and a markdown table.

Speed: per prompt, the median decode tokens/s over repeats; the ratio to the baseline's
median on the same prompt; then the median of those ratios over the kind's prompts.
Acceptance figures are pooled over every run of the kind (sums, then one division).
Output equality compares each method's first-repeat tokens with its baseline's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import median
from typing import Any

from bench.methods import LLAMA_METHODS

Record = dict[str, Any]


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where a and b differ (a length difference counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def baseline_of(method: str, methods: Sequence[str]) -> str | None:
    """The reference for speed ratios and equality: plain for lookahead methods; for the
    llama-cpp-python ones, plain_llama when it ran (same library, same context flags)."""
    if method in LLAMA_METHODS and "plain_llama" in methods and method != "plain_llama":
        return "plain_llama"
    return "plain" if "plain" in methods and method != "plain" else None


def _speed(runs: list[Record]) -> dict[tuple[str, str], float]:
    """Median tok/s over repeats, per (task, method)."""
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in runs:
        by[(r["task"], r["method"])].append(r["tok_s"])
    return {key: median(v) for key, v in by.items()}


def _ratios(
    speed: dict[tuple[str, str], float], tasks: list[str], method: str, base: str
) -> list[float]:
    """Per prompt: the method's median tok/s over the baseline's."""
    return [
        speed[(t, method)] / speed[(t, base)]
        for t in tasks
        if (t, method) in speed and speed.get((t, base), 0) > 0
    ]


def _pooled(runs: list[Record]) -> dict[str, float]:
    steps = sum(r["steps"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    accepted = sum(r["accepted"] for r in runs)
    k_all = [k for r in runs for k in r["k_trace"]]
    return {
        "accepted_per_step": accepted / steps if steps else 0.0,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "tokens_per_step": sum(r["decode_tokens"] for r in runs) / steps if steps else 0.0,
        "k_mean": sum(k_all) / len(k_all) if k_all else 0.0,
        "draft_share": sum(1 for k in k_all if k > 0) / len(k_all) if k_all else 0.0,
    }


def summarize(runs: list[Record], methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per kind (and "all"), per method: speed, ratios, acceptance, k_trace, equality."""
    speed = _speed(runs)
    first: dict[tuple[str, str], list[int]] = {}
    unstable: set[tuple[str, str]] = set()
    for r in sorted(runs, key=lambda r: r["repeat"]):
        key = (r["task"], r["method"])
        if key not in first:
            first[key] = r["tokens"]
        elif r["tokens"] != first[key]:
            unstable.add(key)
    kinds = sorted({r["kind"] for r in runs}, key=[r["kind"] for r in runs].index)
    out: dict[str, dict[str, Any]] = {}
    for kind in [*kinds, "all"]:
        kind_runs = [r for r in runs if kind in ("all", r["kind"])]
        tasks = list(dict.fromkeys(r["task"] for r in kind_runs))
        out[kind] = {}
        for m in methods:
            m_runs = [r for r in kind_runs if r["method"] == m]
            if not m_runs:
                continue
            entry: dict[str, Any] = {
                "prompts": len(tasks),
                "tok_s": median(speed[(t, m)] for t in tasks if (t, m) in speed),
                **_pooled(m_runs),
                "unstable_prompts": sorted(t for t in tasks if (t, m) in unstable),
            }
            if "plain" in methods and m != "plain":
                ratios = _ratios(speed, tasks, m, "plain")
                entry["speedup_vs_plain"] = median(ratios) if ratios else None
                entry["speedup_vs_plain_range"] = [min(ratios), max(ratios)] if ratios else None
            base = baseline_of(m, methods)
            entry["baseline"] = base
            if base is not None:
                if base != "plain":
                    own = _ratios(speed, tasks, m, base)
                    entry[f"speedup_vs_{base}"] = median(own) if own else None
                div = {t: first_divergence(first[(t, m)], first[(t, base)]) for t in tasks}
                entry["same_as_baseline"] = sum(d is None for d in div.values())
                entry["divergence"] = {t: d for t, d in div.items() if d is not None}
            out[kind][m] = entry
    return out


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(summary: dict[str, dict[str, Any]], header: list[str]) -> str:
    """One table per kind: a row per method."""
    lines = [*header, ""]
    cols = (
        "method | tok/s | x plain (min-max) | x own base | acc/step | acc rate | tok/step | "
        "mean k | steps drafting | same as base | first divergence"
    )
    for kind, rows in summary.items():
        n = next(iter(rows.values()))["prompts"] if rows else 0
        lines += [f"### {kind} ({n} prompts)", "", cols, " | ".join(["---"] * 11)]
        for m, e in rows.items():
            rng = e.get("speedup_vs_plain_range")
            vs_plain = _f(e.get("speedup_vs_plain"))
            if rng:
                vs_plain += f" ({rng[0]:.2f}-{rng[1]:.2f})"
            base = e.get("baseline")
            own = "-"
            if base and base != "plain":
                own = f"{_f(e.get(f'speedup_vs_{base}'))} vs {base}"
            same = f"{e['same_as_baseline']}/{e['prompts']} vs {base}" if base else "-"
            div = ", ".join(f"{t.split('/')[-1]}@{i}" for t, i in e.get("divergence", {}).items())
            if e["unstable_prompts"]:
                div += f" (differs across repeats: {len(e['unstable_prompts'])})"
            lines.append(
                f"{m} | {e['tok_s']:.1f} | {vs_plain} | {own} | {e['accepted_per_step']:.2f} | "
                f"{e['acceptance_rate']:.2f} | {e['tokens_per_step']:.2f} | {e['k_mean']:.1f} | "
                f"{e['draft_share']:.0%} | {same} | {div or '-'}"
            )
        lines.append("")
    return "\n".join(lines)
