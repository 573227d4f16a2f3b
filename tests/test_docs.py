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
