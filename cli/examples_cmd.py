"""`lookahead examples DIR`: copy the shipped examples (a report template and its data) out
of the installation, so the README's report example runs without a source checkout."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import sysconfig
from pathlib import Path

import lookahead
from lookahead.errors import UserError


def shipped_examples() -> Path | None:
    """The examples folder: beside the package in a source checkout, else where a wheel put
    its data files (`<prefix>/share/lookahead/examples`; beside the package for a `--target`
    or `--home` install; the user scheme for `pip install --user`)."""
    package = Path(lookahead.__file__).resolve().parent
    places = [package.parent / "examples", package.parent / "share" / "lookahead" / "examples"]
    schemes = [sysconfig.get_path("data"), sys.prefix]
    with contextlib.suppress(KeyError):  # no user scheme on this platform
        schemes.append(sysconfig.get_path("data", f"{os.name}_user"))
    places += [Path(d) / "share" / "lookahead" / "examples" for d in schemes]
    return next((p for p in places if (p / "sales").is_dir()), None)


def copy_examples(dest: Path) -> list[Path]:
    """Copy every example folder into `dest` (created); refuse to overwrite. Returns the
    files written."""
    source = shipped_examples()
    if source is None:
        raise UserError("this installation has no examples (reinstall lookahead-decoding from a wheel)")
    folders = sorted(p for p in source.iterdir() if p.is_dir())
    clash = [dest / f.name for f in folders if (dest / f.name).exists()]
    if clash:
        raise UserError(f"{clash[0]} already exists: choose another folder or remove it")
    written = []
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for folder in folders:
            shutil.copytree(folder, dest / folder.name)
            written += sorted(p for p in (dest / folder.name).rglob("*") if p.is_file())
    except OSError as exc:
        raise UserError(f"cannot write the examples into {dest}: {exc.strerror or exc}") from exc
    return written
