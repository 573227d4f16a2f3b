"""`lookahead doctor`: this machine and what it allows, as text or as JSON for a bug report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from lookahead.apps import doctor
from lookahead.cli.models_cmd import _RichProgress


def run_doctor(*, model: str, cache_dir: Path, threads: int, exact: bool, as_json: bool) -> int:
    err = Console(stderr=True)
    with _RichProgress(err) as progress:
        data = doctor.report(model, cache_dir=cache_dir, threads=threads, exact=exact, progress=progress)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
    else:
        show(data, Console())
    return 1 if "error" in data["model"] else 0


def show(data: dict[str, Any], out: Console) -> None:
    m = data["machine"]
    out.print(f"[bold]machine[/bold]  {m['cpu']} ({m['arch']}), {m['cpus_usable']} usable CPUs", highlight=False)
    out.print(f"  key CPU flags: {' '.join(m['key_flags']) or '(none known)'}", highlight=False)
    out.print(f"[bold]llama.cpp[/bold]  {data['llama_cpp']['build']}", highlight=False)
    out.print(f"[bold]threads[/bold]  {data['threads']}", highlight=False)
    entry = data["model"]
    out.print(f"[bold]model[/bold]  {entry['model']}", highlight=False)
    if "backend" in entry:
        b = entry["backend"]
        how = "cached verdict" if b["cached"] else "probed now"
        out.print(f"  backend: {b['choice']}: {b['description']} ({how})", highlight=False)
        for t in b["trials"]:
            out.print(f"    tried {t['candidate']}: {t['detail']} ({t['seconds']:.1f} s)", highlight=False)
    if "verify_cost" in entry:
        c = entry["verify_cost"]
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=f"verify cost, t(1) = {c['t1_ms']:.1f} ms")
        table.add_column("n", justify="right")
        table.add_column("t(n)/t(1)", justify="right")
        table.add_column("n t(1)/t(n)", justify="right")
        for n, r in c["relative"].items():
            table.add_row(n, f"{r:.2f}", f"{int(n) / r:.2f}")
        out.print(table)
        out.print(
            f"  ceiling: {c['ceiling']:.2f}x at n = {c['ceiling_at']} "
            "(the best speedup possible here, with every drafted token accepted)",
            highlight=False,
        )
    if "exact_batch" in entry:
        sizes = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in entry["exact_batch"].items())
        out.print(f"  bit-exact verify batch sizes (--exact): {sizes}", highlight=False)
    if "error" in entry:
        out.print(f"  [red]error:[/red] {entry['error']}", highlight=False)
    out.print("[bold]caches[/bold]")
    for name, c in data["caches"].items():
        out.print(f"  {name}: {c['path']} ({c['bytes'] / 1e6:,.1f} MB)", highlight=False)
    installed = [x["name"] for x in data["models"] if x["cached"]]
    out.print(f"[bold]models installed[/bold]  {', '.join(installed) or 'none'}", highlight=False)
