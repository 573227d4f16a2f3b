"""The command-line reference (docs/cli.md), written from the typer app itself, so the
document cannot drift from the flags: every command, argument and option with its
spellings, value type, default and help.

    python -m lookahead.cli.reference > docs/cli.md

A test regenerates it and fails when the committed file differs.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from lookahead.cli.main import app
from lookahead.cli.options import RENAMED

HEADER = """\
# Command-line reference

Every `lookahead` command with its arguments and options, their defaults and what they do.
This page is generated from the program itself (`python -m lookahead.cli.reference`), so it
matches the installed version; `lookahead COMMAND --help` shows the same on a terminal.

Flags follow llama.cpp's spellings where it has one (`-m/--model`, `-c/--ctx-size`,
`-t/--threads`, `-n/--max-tokens`, `--temp`, `--top-k`, `--top-p`, `--min-p`,
`--repeat-penalty`, `-s/--seed`, `-np/--parallel`), and a flag means the same thing on every
command that takes it.
"""


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _spellings(param: Any) -> str:
    """'-c, --ctx-size' (short spellings first), with the negative form of a switch pair."""
    names = sorted(param.opts, key=lambda o: o.startswith("--"))  # stable: the primary long name first
    text = ", ".join(f"`{n}`" for n in names)
    if param.secondary_opts:
        text += " / " + ", ".join(f"`{n}`" for n in param.secondary_opts)
    return text


def _value(param: Any, ctx: typer.Context) -> str:
    """What the option takes: nothing for a switch, else its type (repeatable if a list)."""
    if getattr(param, "is_flag", False):
        return ""
    shown = param.display_type(ctx).strip("<>")
    if shown.startswith("list[") and shown.endswith("]"):
        return f"{shown[5:-1].lower()}, repeatable"
    return shown.lower()


def _default(param: Any) -> str:
    default = param.default
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            return "unset" if default is None else f"`{param.opts[0] if default else param.secondary_opts[0]}`"
        return "off"
    if default is None or default == [] or default == ():
        return ""
    return f"`{default}`"


def _command_section(path: str, command: Any, out: list[str]) -> None:
    ctx = typer.Context(command, info_name=path)
    heading = "#" * (2 + path.count(" ") - 1)
    out.append(f"{heading} `{path}`\n")
    out.append(f"```\n{command.get_usage(ctx).replace('Usage: ', '')}\n```\n")
    if command.help:
        out.append(command.help.strip() + "\n")
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    if arguments:
        out.append("| argument | value | required | what it is |")
        out.append("| --- | --- | --- | --- |")
        for p in arguments:
            required = "yes" if p.required else "no"
            out.append(f"| `{p.name.upper()}` | {_value(p, ctx)} | {required} | {_cell(p.help or '')} |")
        out.append("")
    if options:
        out.append("| option | value | default | what it does |")
        out.append("| --- | --- | --- | --- |")
        for p in options:
            out.append(f"| {_spellings(p)} | {_value(p, ctx)} | {_default(p)} | {_cell(p.help or '')} |")
        out.append("")
    renamed = RENAMED.get(path.split(" ", 1)[1], {})
    if renamed:
        old = ", ".join(f"`{o}` (now `{n}`)" for o, n in renamed.items())
        out.append(f"Older spellings still accepted, with a note on stderr: {old}.\n")


def _walk(path: str, command: Any, out: list[str]) -> None:
    if isinstance(command, typer.core.TyperGroup):
        if path != "lookahead":
            out.append(f"## `{path}`\n")
            if command.help:
                out.append(command.help.strip() + "\n")
        for name in command.list_commands(typer.Context(command)):
            _walk(f"{path} {name}", command.commands[name], out)
    else:
        _command_section(path, command, out)


def reference() -> str:
    """docs/cli.md as it should be for the commands as they are."""
    group: Any = typer.main.get_command(app)
    out = [HEADER]
    names = group.list_commands(typer.Context(group))
    out.append("Commands: " + ", ".join(f"[`{n}`](#lookahead-{n})" for n in names) + ".\n")
    out.append("## `lookahead`\n")
    out.append(f"```\n{group.get_usage(typer.Context(group, info_name='lookahead')).replace('Usage: ', '')}\n```\n")
    out.append((group.help or "").strip() + "\n")
    out.append("| option | what it does |\n| --- | --- |")
    for p in group.params:
        if p.param_type_name == "option" and not p.hidden:
            out.append(f"| {_spellings(p)} | {_cell(p.help or '')} |")
    out.append("")
    _walk("lookahead", group, out)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(reference())
