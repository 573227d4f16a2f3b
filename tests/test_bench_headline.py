"""`python -m bench.headline`: the README's headline table, written from one bench folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import headline

FRESH = Path(__file__).resolve().parent.parent / "bench" / "results" / "fresh"


def folder_like_fresh(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    for name in ("meta.json", "summary.json"):
        shutil.copy(FRESH / name, out / name)
    return out


def test_the_table_gives_absolute_speeds_beside_ratios_and_names_its_run(tmp_path: Path) -> None:
    out = folder_like_fresh(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nintro\n\n" + headline.OPENING + ": old table\n\n## Quick start\n\nrest\n")
    block = headline.write(out, "a test machine", "b1234", readme)
    summary = json.loads((out / "summary.json").read_text())["summary"]
    edit = summary["code_edit"]
    row = next(line for line in block.splitlines() if line.startswith("| code edit"))
    assert f"{edit['plain']['tok_s']:.1f}" in row and f"{edit['adaptive']['tok_s']:.1f}" in row
    assert f"{edit['adaptive']['speedup_vs_plain']:.2f}x" in row
    assert f"{edit['server_ngram_simple']['speedup_vs_server_plain']:.2f}x" in row
    meta = json.loads((out / "meta.json").read_text())
    assert "a test machine" in block and meta["commit"] in block and "b1234" in block
    assert "--spec-type ngram-simple" in block and "llama-cpp-python 0.3.36 (CPU:" in block
    text = readme.read_text()
    assert "old table" not in text and text.startswith("# x\n\nintro\n\n") and text.endswith("## Quick start\n\nrest\n")
    assert headline.readme_block(text) == block == (out / headline.TABLE_FILE).read_text()


def test_from_a_folder_keeps_the_recorded_peer_version(tmp_path: Path) -> None:
    out = folder_like_fresh(tmp_path)
    (out / headline.INFO_FILE).write_text(json.dumps({"machine": "old", "peer_version": "b42"}))
    assert headline.main(["--from", str(out), "--machine", "m", "--no-readme"]) == 0
    assert json.loads((out / headline.INFO_FILE).read_text()) == {"machine": "m", "peer_version": "b42"}


def test_a_run_without_the_peer_is_refused_before_any_model_loads(tmp_path: Path) -> None:
    assert headline.main(["--machine", "m", "--out", str(tmp_path / "x"), "--no-readme"]) == 2
