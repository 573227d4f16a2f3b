"""Which files of the user's repository to leave out of a context corpus.

`GitIgnore(root)` is an `IgnoreRule` for `collect_files`: on top of what every corpus skips
(hidden files and folders such as .git and .venv, virtualenvs, node_modules,
site-packages, build outputs, binaries, files over 1 MB), it leaves out

- what the repository's .gitignore files say (each one for the folder it is in and below,
  the deepest that has a say deciding, as git does) and .git/info/exclude;
- vendored code (vendor, third_party, bower_components, Pods) and generated bundles
  (*.min.js, *.min.css, *.bundle.js, package-lock.json): other people's code, or no code at all;
- the files named in `exclude` (the file being completed: its text is the prompt and the
  suffix, and it changes at every edit, which would rebuild the whole index each time).

Patterns are matched with `pathspec`'s git-style rules. Not supported: a global
core.excludesFile, and .gitignore files above `root` when `root` is not the repository's
top (only `root` and the folders below it are read).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

import pathspec

VENDORED_DIRS = frozenset({"vendor", "vendored", "third_party", "third-party", "bower_components", "Pods"})
_GENERATED = ["*.min.js", "*.min.css", "*.bundle.js", "package-lock.json", "pnpm-lock.yaml"]


class GitIgnore:
    """Leave out what git ignores under `root`, vendored and generated files, and `exclude`."""

    tag = "gitignore"

    def __init__(self, root: str | Path, exclude: Iterable[str | Path] = ()) -> None:
        self.root = Path(root).expanduser().absolute()
        self.exclude = frozenset(Path(p).expanduser().resolve() for p in exclude)
        self._specs: dict[Path, pathspec.GitIgnoreSpec | None] = {}
        self._generated = pathspec.GitIgnoreSpec.from_lines(_GENERATED)

    def __call__(self, path: Path, is_dir: bool) -> bool:
        path = Path(path).absolute()
        if is_dir and path.name in VENDORED_DIRS:
            return True
        if not is_dir and (self._generated.match_file(path.name) or path.resolve() in self.exclude):
            return True
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return False  # not under the repository: no .gitignore of ours applies
        # the deepest .gitignore with a matching pattern decides (a deeper `!keep.py`
        # takes back what a shallower `*.py` left out)
        folders = [self.root / Path(*rel.parts[:n]) for n in range(len(rel.parts) - 1, -1, -1)]
        for folder in folders:
            spec = self._spec(folder)
            if spec is None:
                continue
            name = path.relative_to(folder).as_posix() + ("/" if is_dir else "")
            verdict = spec.check_file(name).include
            if verdict is not None:
                return bool(verdict)
        return False

    def _spec(self, folder: Path) -> pathspec.GitIgnoreSpec | None:
        if folder not in self._specs:
            lines: list[str] = []
            sources = [folder / ".gitignore"]
            if folder == self.root:
                sources.insert(0, folder / ".git" / "info" / "exclude")
            for source in sources:
                with contextlib.suppress(OSError):  # none (or unreadable): nothing to leave out
                    lines += source.read_text(encoding="utf-8", errors="replace").splitlines()
            self._specs[folder] = pathspec.GitIgnoreSpec.from_lines(lines) if lines else None
        return self._specs[folder]


def find_repository(path: str | Path) -> Path | None:
    """The top folder of the git repository holding `path` (a folder with a .git folder
    or file, as in a worktree), or None."""
    here = Path(path).expanduser().resolve()
    for folder in [here, *here.parents]:
        if (folder / ".git").exists():
            return folder
    return None
