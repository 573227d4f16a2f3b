"""The house's layering, checked from the source: no import from a lower layer to a higher
one, no import cycle between modules, no file in lookahead/ or cli/ over MAX_LINES lines, and
no typer, rich or CLI import in the library's folder.

The CLI's source lives in the top-level cli/ folder and installs as `lookahead.cli`
(pyproject.toml maps it), so its modules are named here as they are imported:
`cli/main.py` is `lookahead.cli.main`.

Layers, lowest first (a module may import its own layer and those below):

    0  lookahead.errors, lookahead.progress           what every layer names
    1  lookahead.models                                named models and GGUF files (no llama.cpp)
    2  lookahead.core, lookahead.index,                the drafting core and its indexes, and the
       lookahead.backend.base                          protocols between the engine and a backend
    3  lookahead.backend                               the one importer of llama_cpp
    4  lookahead.tuning                                this machine's measurements
    5  lookahead.api, lookahead (the package)          the facade: load, generate
    6  lookahead.apps                                  applications on the facade
    7  lookahead.server                                the OpenAI-compatible service
    8  lookahead.cli (the cli/ folder)                 the typer commands, rich rendering
       bench                                           anything but the CLI

Every import counts, also one inside a function or under TYPE_CHECKING: a deferred import
still couples the two modules. The checks are plain functions so that a test can plant a
violation and see it caught.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 450
# Files over the limit that are being split elsewhere; tolerated until then, and nothing
# else is. Remove an entry once its file is under the limit.
OVER_LIMIT_FOR_NOW: frozenset[str] = frozenset()

# Module prefix -> layer; the longest matching prefix wins.
LAYERS: dict[str, int] = {
    "lookahead.errors": 0,
    "lookahead.progress": 0,
    "lookahead.models": 1,
    "lookahead.core": 2,
    "lookahead.index": 2,
    "lookahead.backend.base": 2,
    "lookahead.backend": 3,
    "lookahead.tuning": 4,
    "lookahead.api": 5,
    "lookahead": 5,
    "lookahead.apps": 6,
    "lookahead.server": 7,
    "lookahead.cli": 8,
}
BENCH_LAYER = 7  # above the service (it runs it), below the CLI
# Modules bench/ may not import (the CLI sits on top of the bench, not under it).
BENCH_FORBIDDEN = ("lookahead.cli",)
# Source folder -> the package name its modules are imported under.
FOLDERS = {"lookahead": "lookahead", "cli": "lookahead.cli", "bench": "bench"}
# What no module in the library's folder (lookahead/) may import, anywhere in the file: the
# terminal's libraries and the CLI belong to cli/ (`cli` itself is no installed name at all).
LIBRARY_FORBIDDEN = ("typer", "rich", "lookahead.cli", "cli")


def module_name(path: Path, root: Path = ROOT) -> str:
    """`lookahead/core/engine.py` -> `lookahead.core.engine`, `cli/main.py` ->
    `lookahead.cli.main` (a package: its __init__)."""
    top, *parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([FOLDERS.get(top, top), *parts])


def sources(root: Path = ROOT) -> dict[str, Path]:
    """Every module of lookahead/, cli/ and bench/ by name."""
    out: dict[str, Path] = {}
    for top in FOLDERS:
        for path in sorted((root / top).rglob("*.py")):
            out[module_name(path, root)] = path
    return out


def imports(path: Path, known: Iterable[str], root: Path = ROOT) -> set[str]:
    """The project modules `path` imports, anywhere in the file. `from a.b import c` counts
    as `a.b.c` when that is a module, else as `a.b`."""
    names = set(known)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package upward
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base for alias in node.names]
        else:
            continue
        for target in targets:
            # the longest known module that the target is or lies in
            parts = target.split(".")
            while parts and ".".join(parts) not in names:
                parts.pop()
            if parts:
                found.add(".".join(parts))
    return found


def imported_names(path: Path) -> set[str]:
    """Every module name `path` imports, absolute as written (relative imports left out: they
    stay inside the project), anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def library_forbidden_imports(root: Path = ROOT) -> list[str]:
    """Imports of typer, rich or the CLI by a module in the library's folder (lookahead/)."""
    bad = []
    for path in sorted((root / "lookahead").rglob("*.py")):
        for name in sorted(imported_names(path)):
            hit = next((f for f in LIBRARY_FORBIDDEN if name == f or name.startswith(f + ".")), None)
            if hit:
                bad.append(f"{path.relative_to(root).as_posix()} imports {name} ({hit} belongs to cli/)")
    return bad


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (itself left out)."""
    mods = sources(root)
    return {name: imports(path, mods, root) - {name} for name, path in mods.items()}


def layer(module: str) -> int | None:
    """The layer of a lookahead module (longest prefix); None for bench and outsiders."""
    best, best_len = None, -1
    for prefix, level in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
            best, best_len = level, len(prefix)
    return best


def upward_imports(edges: Mapping[str, set[str]]) -> list[str]:
    """Imports from a lower layer to a higher one, and bench's imports of the CLI."""
    bad = []
    for src, targets in sorted(edges.items()):
        for dst in sorted(targets):
            if src == "bench" or src.startswith("bench."):
                if any(dst == f or dst.startswith(f + ".") for f in BENCH_FORBIDDEN):
                    bad.append(f"{src} -> {dst} (bench may not import the CLI)")
                continue
            a, b = layer(src), layer(dst)
            if b is None:  # lookahead importing bench
                bad.append(f"{src} -> {dst} (the package may not import the bench)")
            elif a is not None and b > a:
                bad.append(f"{src} (layer {a}) -> {dst} (layer {b})")
    return bad


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    adj = {s: sorted(d for d in ds if d in edges) for s, ds in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return out


def long_files(root: Path = ROOT, limit: int = MAX_LINES, tolerated: frozenset[str] = frozenset()) -> list[str]:
    """Files in lookahead/ and cli/ longer than `limit` lines (those in `tolerated` left out)."""
    return [
        f"{p.relative_to(root).as_posix()}: {n} lines"
        for p in sorted(p for top in ("lookahead", "cli") for p in (root / top).rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit
        and p.relative_to(root).as_posix() not in tolerated
    ]


# -- the house as it is --------------------------------------------------------------------


def test_no_module_imports_from_a_higher_layer() -> None:
    assert upward_imports(graph()) == []


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_no_file_in_the_package_is_over_the_line_limit() -> None:
    assert long_files(tolerated=OVER_LIMIT_FOR_NOW) == []


def test_every_package_module_has_a_layer() -> None:
    assert [m for m in sources() if m.startswith("lookahead") and layer(m) is None] == []


def test_the_library_imports_neither_typer_nor_rich_nor_the_cli() -> None:
    assert library_forbidden_imports() == []


def test_the_cli_lives_in_its_own_folder_only() -> None:
    assert (ROOT / "cli" / "main.py").is_file()
    old = ROOT / "lookahead" / "cli"
    left = sorted(p.name for p in old.glob("*.py"))
    assert left == [], f"lookahead/cli/ holds {left}: the CLI's source is cli/, move them there"
    # a folder of leftover bytecode is a second lookahead.cli to mypy (a "Duplicate module")
    assert not old.exists(), "lookahead/cli/ is left over from before the CLI moved to cli/: delete it"


# -- the checks catch what they should (planted violations) --------------------------------


def _plant(tmp_path: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for pkg in FOLDERS:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


def test_an_upward_import_is_caught_even_inside_a_function(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "lookahead/core/__init__.py": "",
        "lookahead/core/engine.py": "def f():\n    from lookahead.server import app\n",
        "lookahead/server/__init__.py": "",
        "lookahead/server/app.py": "import lookahead.core.engine\n",
    })  # fmt: skip
    bad = upward_imports(graph(root))
    assert bad == ["lookahead.core.engine (layer 2) -> lookahead.server.app (layer 7)"]


def test_the_bench_importing_the_cli_is_caught(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "cli/main.py": "",
        "bench/compare.py": "from lookahead.cli.main import app\n",
    })  # fmt: skip
    assert upward_imports(graph(root)) == ["bench.compare -> lookahead.cli.main (bench may not import the CLI)"]


def test_typer_rich_or_the_cli_in_the_library_is_caught_even_inside_a_function(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "lookahead/core/__init__.py": "",
        "lookahead/core/engine.py": "def f():\n    from rich.progress import Progress\n",
        "lookahead/models/__init__.py": "",
        "lookahead/models/pull.py": "import typer\n",
        "lookahead/server/__init__.py": "",
        "lookahead/server/app.py": "from lookahead.cli import live\n",
        "lookahead/server/ok.py": "import richer\nfrom lookahead.client import x\nfrom . import app\n",
        "cli/main.py": "import typer\nfrom rich.console import Console\n",  # the CLI may
    })  # fmt: skip
    assert library_forbidden_imports(root) == [
        "lookahead/core/engine.py imports rich.progress.Progress (rich belongs to cli/)",
        "lookahead/models/pull.py imports typer (typer belongs to cli/)",
        "lookahead/server/app.py imports lookahead.cli.live (lookahead.cli belongs to cli/)",
    ]


def test_the_cli_folder_is_named_as_installed_and_checked_for_layers_and_cycles(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "cli/main.py": "from . import live\n",
        "cli/live.py": "from lookahead.cli.main import app\n",
        "lookahead/api.py": "from lookahead.cli.main import app\n",
    })  # fmt: skip
    assert "lookahead.cli.live" in sources(root)
    assert cycles(graph(root)) == [["lookahead.cli.live", "lookahead.cli.main"]]
    assert upward_imports(graph(root)) == ["lookahead.api (layer 5) -> lookahead.cli.main (layer 8)"]


def test_a_cycle_is_caught_but_a_package_reexporting_its_modules_is_not_one(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "bench/tasks.py": "def load():\n    from bench.tasks_tune import tasks_of\n",
        "bench/tasks_tune.py": "from bench.tasks import Task\n",
        "lookahead/core/__init__.py": "",
        "lookahead/core/control/__init__.py": "from lookahead.core.control.cost import CostModel\n",
        "lookahead/core/control/cost.py": "from lookahead.core.control import config\n",
        "lookahead/core/control/config.py": "",
    })  # fmt: skip
    assert cycles(graph(root)) == [["bench.tasks", "bench.tasks_tune"]]


def test_a_long_file_is_caught_in_the_library_and_in_the_cli(tmp_path: Path) -> None:
    big = "x = 1\n" * (MAX_LINES + 1)
    root = _plant(tmp_path, {"lookahead/core/big.py": big, "cli/big.py": big})
    assert long_files(root) == [f"cli/big.py: {MAX_LINES + 1} lines", f"lookahead/core/big.py: {MAX_LINES + 1} lines"]
