"""Turns the bench's per-run records into per-kind figures and markdown tables.

Speed: per prompt, the median decode tokens/s over repeats; the ratio to the baseline's
median on the same prompt; then the median of those ratios over the kind's prompts. The
same figure per repeat (each run against plain's run of the same repeat) gives the min-max
over repeats. Acceptance figures are pooled over every run of the kind (sums, then one
division). Output equality compares each method's first-repeat tokens with its baseline's,
and every run's tokens with plain's first run of the prompt.

Latency: time to first token (TTFT) is from the request (tokens in hand) to the first
token reaching the caller, prefill included; inter-token latency (ITL) is the gap between
successive deliveries of tokens: a verify step that accepts drafts delivers several tokens
at once, so its gap counts once (as a streaming client sees it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from statistics import median
from typing import Any

from bench.methods import LLAMA_METHODS, SERVER_METHODS

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
    if method in SERVER_METHODS and "server_plain" in methods and method != "server_plain":
        return "server_plain"
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


def _per_repeat(runs: list[Record], method: str) -> list[float]:
    """Per repeat: the median over prompts of the method's tok/s over plain's in that repeat."""
    tok = {(r["task"], r["method"], r["repeat"]): r["tok_s"] for r in runs}
    out = []
    for rep in sorted({r["repeat"] for r in runs}):
        ratios = [
            tok[(t, method, rep)] / tok[(t, "plain", rep)]
            for t in dict.fromkeys(r["task"] for r in runs)
            if (t, method, rep) in tok and tok.get((t, "plain", rep), 0) > 0
        ]
        if ratios:
            out.append(median(ratios))
    return out


def itl_gaps(run: Record) -> list[float]:
    """Seconds between successive deliveries of tokens (the first delivery is the TTFT)."""
    times = [t for t, n in zip(run.get("step_t") or [], run.get("step_tokens") or [], strict=False) if n > 0]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def percentile(xs: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between order statistics; None for no data."""
    if not xs:
        return None
    ys = sorted(xs)
    pos = (len(ys) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _latency(runs: list[Record]) -> dict[str, float | None]:
    ttft = [r["ttft_s"] for r in runs if r.get("ttft_s") is not None]
    gaps = [g for r in runs for g in itl_gaps(r)]
    drafting = [k for r in runs for k in r["k_trace"] if k > 0]

    def ms(x: float | None) -> float | None:
        return None if x is None else 1000 * x

    return {
        "ttft_ms": ms(median(ttft)) if ttft else None,
        "itl_ms_p50": ms(percentile(gaps, 50)),
        "itl_ms_p90": ms(percentile(gaps, 90)),
        "itl_ms_p99": ms(percentile(gaps, 99)),
        "k_mean_drafting": sum(drafting) / len(drafting) if drafting else None,
    }


def noise(runs: list[Record]) -> dict[str, dict[str, Any]]:
    """The machine's noise, per kind: for each prompt, the spread of plain's tok/s over its
    repeats, (max - min) / median; its median and max over the kind's prompts."""
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in runs:
        if r["method"] == "plain":
            by[(r["kind"], r["task"])].append(r["tok_s"])
    out: dict[str, dict[str, Any]] = {}
    for kind in [*dict.fromkeys(k for k, _ in by), "all"]:
        spreads = [
            (max(v) - min(v)) / median(v)
            for (k, _), v in by.items()
            if kind in ("all", k) and len(v) > 1 and median(v) > 0
        ]
        out[kind] = {
            "prompts": sum(1 for k, _ in by if kind in ("all", k)),
            "repeats": max((len(v) for (k, _), v in by.items() if kind in ("all", k)), default=0),
            "spread_median": median(spreads) if spreads else None,
            "spread_max": max(spreads) if spreads else None,
        }
    return out


def acceptance_by_depth(runs: list[Record], chain: Callable[[str], bool]) -> dict[str, dict[str, list[int]]]:
    """Per kind: at each draft depth d (index d - 1), how often a drafted token was reached
    and how often accepted, pooled over the runs of single-chain methods (`chain(method)`).
    A step that drafted k and accepted m: depths 1..m reached and accepted, depth m + 1
    (if m < k) reached and rejected, deeper ones not reached."""
    out: dict[str, dict[str, list[int]]] = {}
    for r in runs:
        if not chain(r["method"]):
            continue
        entry = out.setdefault(r["kind"], {"reached": [], "accepted": []})
        reached, accepted = entry["reached"], entry["accepted"]
        for k, m in zip(r["k_trace"], r.get("step_accepted") or [], strict=False):
            if k == 0:
                continue
            depth = min(m + 1, k)
            if len(reached) < depth:
                reached.extend([0] * (depth - len(reached)))
                accepted.extend([0] * (depth - len(accepted)))
            for d in range(depth):
                reached[d] += 1
            for d in range(m):
                accepted[d] += 1
    return {kind: c for kind, c in out.items() if c["reached"]}


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
            entry.update(_latency(m_runs))
            plain_first = {t: first[(t, "plain")] for t in tasks if (t, "plain") in first}
            entry["runs"] = len(m_runs)
            entry["same_runs"] = sum(r["tokens"] == plain_first.get(r["task"]) for r in m_runs)
            if "plain" in methods and m != "plain":
                ratios = _ratios(speed, tasks, m, "plain")
                entry["speedup_vs_plain"] = median(ratios) if ratios else None
                entry["speedup_vs_plain_range"] = [min(ratios), max(ratios)] if ratios else None
                per_repeat = _per_repeat(kind_runs, m)
                entry["speedup_repeats_range"] = [min(per_repeat), max(per_repeat)] if per_repeat else None
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
    cols = [
        "method", "tok/s", "x plain", "min-max over repeats", "min-max over prompts", "x own base",
        "acc/step", "acc rate", "tok/step", "mean k", "steps drafting", "same as base", "runs same as plain",
        "first divergence",
    ]  # fmt: skip
    for kind, rows in summary.items():
        n = next(iter(rows.values()))["prompts"] if rows else 0
        lines += [f"### {kind} ({n} prompts)", "", " | ".join(cols), " | ".join(["---"] * len(cols))]
        for m, e in rows.items():
            base = e.get("baseline")
            own = "-"
            if base and base != "plain":
                own = f"{_f(e.get(f'speedup_vs_{base}'))} vs {base}"
            same = f"{e['same_as_baseline']}/{e['prompts']} vs {base}" if base else "-"
            div = ", ".join(f"{t.split('/')[-1]}@{i}" for t, i in e.get("divergence", {}).items())
            if e["unstable_prompts"]:
                div += f" (differs across repeats: {len(e['unstable_prompts'])})"
            lines.append(" | ".join([
                m, f"{e['tok_s']:.1f}", _f(e.get("speedup_vs_plain")), _range(e.get("speedup_repeats_range")),
                _range(e.get("speedup_vs_plain_range")), own, f"{e['accepted_per_step']:.2f}",
                f"{e['acceptance_rate']:.2f}", f"{e['tokens_per_step']:.2f}", f"{e['k_mean']:.1f}",
                f"{e['draft_share']:.0%}", same, f"{e.get('same_runs', 0)}/{e.get('runs', 0)}", div or "-",
            ]))  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def _range(r: Sequence[float] | None) -> str:
    return "-" if not r else f"{r[0]:.2f}-{r[1]:.2f}"
