"""The user documents: a README that stays a manual, links that lead somewhere, and no
word about how the project is run (they speak to users)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_a_manual_not_a_notebook() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert 250 <= len(lines) <= 350, len(lines)
    headings = [ln for ln in lines if ln.startswith("## ")]
    assert headings[0] == "## Quick start"  # what it is and what it gains come first, then how to start


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_links_between_documents_lead_somewhere(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path = (doc.parent / target).resolve()
        if path.name == "deploy.md" and not path.exists():
            continue  # the deployment guide is written separately
        assert path.exists(), f"{doc.name} links to {target}, which does not exist"


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_user_documents_speak_to_users(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for word in (r"\bissue\b", r"\bsession\b", r"\bintegrator\b", r"\bwhat changed\b"):
        assert not re.search(word, text, re.IGNORECASE), (doc.name, word)


def test_the_readme_headline_is_the_run_it_names() -> None:
    """The README's headline table is `python -m bench.headline`'s rendering of the one folder
    it names as its source: no figure from another run, none copied by hand."""
    from bench.headline import readme_block, render

    block = readme_block((ROOT / "README.md").read_text(encoding="utf-8"))
    source = re.search(r"Source: `(bench/results/[^`]+)/`", block)
    assert source, "the headline names no result folder"
    assert block == render(ROOT / source.group(1)), "README's headline differs: run python -m bench.headline --from"


RESULT = re.compile(r"bench/results/[\w.+\-*/{},]+")
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)x\b")
NUMBER = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")


def cited_files(block: str) -> list[Path]:
    """The result files a paragraph or table names (a folder: its tables and summary)."""
    out: list[Path] = []
    for ref in RESULT.findall(block):
        ref = ref.rstrip(".,/")
        alts = re.match(r"(.*)\{([^}]*)\}(.*)", ref)
        names = [alts.group(1) + a + alts.group(3) for a in alts.group(2).split(",")] if alts else [ref]
        for name in names:
            for path in ROOT.glob(name) if "*" in name else [ROOT / name]:
                if path.is_dir():
                    out += [p for p in path.iterdir() if p.suffix in (".md", ".json")]
                elif path.exists():
                    out.append(path)
                else:
                    for ext in (".md", ".json"):  # `results/soak-*.md` style stems
                        if path.with_suffix(ext).exists():
                            out.append(path.with_suffix(ext))
    return out


def figures_in(files: list[Path]) -> set[str]:
    """Every number in the files, as written and rounded to two decimals."""
    seen: set[str] = set()
    for f in files:
        for number in NUMBER.findall(f.read_text(encoding="utf-8", errors="replace")):
            seen.add(number)
            seen.add(f"{float(number):.2f}")
    return seen


def blocks(text: str) -> list[str]:
    """Paragraphs, each table joined to the paragraph above it (its caption names its file)."""
    out: list[str] = []
    for part in re.split(r"\n\s*\n", text):
        if part.lstrip().startswith("|") and out:
            out[-1] += "\n" + part
        else:
            out.append(part)
    return out


FIGURE_CHECKED = ["README.md", "docs/choosing.md", "docs/troubleshooting.md", "docs/benchmarks.md", "docs/design.md"]


@pytest.mark.parametrize("name", FIGURE_CHECKED)
def test_quoted_figures_are_in_the_files_they_name(name: str) -> None:
    """A ratio quoted next to a result file (in the same paragraph, or a table and its caption)
    is one that file records: a figure copied wrong, or from another run, fails here."""
    missing = []
    for block in blocks((ROOT / name).read_text(encoding="utf-8")):
        files = cited_files(block)
        if not files:
            continue
        known = figures_in(files)
        missing += [(f, block[:60]) for f in FIGURE.findall(block) if f not in known]
    assert not missing, f"{name}: figures not in the result files they name: {missing}"


def test_a_misquoted_figure_is_caught(tmp_path: Path) -> None:
    block = "The report kind ran 1.53x faster (`bench/results/fresh/`), and 9.87x faster."
    files = cited_files(block)
    assert files and [f for f in FIGURE.findall(block) if f not in figures_in(files)] == ["9.87"]
