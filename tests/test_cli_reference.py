"""docs/cli.md is generated from the typer app (`python -m lookahead.cli.reference`): this
fails when a flag, default or help text changed and the page was not regenerated."""

from __future__ import annotations

from pathlib import Path

import typer

from lookahead.cli.main import app
from lookahead.cli.reference import reference

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_docs_cli_md_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == reference(), (
        "docs/cli.md is stale: regenerate it with `python -m lookahead.cli.reference > docs/cli.md`"
    )


def test_every_command_and_flag_is_in_the_reference() -> None:
    text = reference()
    group = typer.main.get_command(app)

    def walk(path: str, command: object) -> None:
        sub = getattr(command, "commands", None)
        if sub is not None:
            for name, child in sub.items():
                walk(f"{path} {name}", child)
            return
        assert f"`{path}`" in text, path
        for param in command.params:  # type: ignore[attr-defined]
            for spelling in (*param.opts, *param.secondary_opts):
                if param.param_type_name == "option" and not param.hidden:
                    assert f"`{spelling}`" in text, (path, spelling)

    walk("lookahead", group)
