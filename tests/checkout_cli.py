"""The tests import this checkout's CLI, whatever the environment's install points at.

The CLI's source is the top-level cli/ folder, installed as `lookahead.cli` (pyproject.toml's
package-dir). An editable install maps that name to the folder of the checkout it was made
from, so a test run in another checkout of the same project, with the same environment, would
import that other checkout's CLI. `use_this_checkout` puts a finder first in line that maps
`lookahead.cli` to this checkout's cli/ for the test process; `installed_cli_elsewhere` says
when a fresh interpreter (a test's subprocess) would still import another copy.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

CLI = Path(__file__).resolve().parent.parent / "cli"
NAME = "lookahead.cli"


class _ThisCheckoutsCli:
    """A meta path finder for `lookahead.cli` alone: its submodules follow its __path__."""

    @staticmethod
    def find_spec(
        fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != NAME:
            return None
        return importlib.util.spec_from_file_location(NAME, CLI / "__init__.py", submodule_search_locations=[str(CLI)])


def use_this_checkout() -> None:
    """Map `lookahead.cli` to this checkout's cli/ in this process (before anything imports it)."""
    if not any(isinstance(f, _ThisCheckoutsCli) for f in sys.meta_path):
        sys.meta_path.insert(0, _ThisCheckoutsCli())


def installed_cli_elsewhere() -> str | None:
    """Where an editable install maps `lookahead.cli`, when that is not this checkout's cli/
    (None when it is, or when no editable install of the project is active)."""
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if not isinstance(mapping, dict) or "lookahead" not in mapping:
            continue
        where = mapping.get(NAME) or str(Path(mapping["lookahead"]) / "cli")
        return None if Path(where).resolve() == CLI else where
    return None
