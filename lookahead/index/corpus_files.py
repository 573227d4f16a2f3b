"""Which files make a corpus, the key naming their content, and the cache file format.

Files. A named file is taken if it is text; a named folder is walked in sorted order,
taking files with a common source or text suffix (or name, such as Makefile) and skipping
hidden files and folders (.git, .venv, .env ...), virtualenvs (any folder holding a
pyvenv.cfg), node_modules, __pycache__, site-packages, build outputs (build, dist,
target, *.egg-info) and symlinks. A file is text if it is valid UTF-8 with no NUL byte.
Files over `max_file_bytes` (1 MB) are skipped, and files stop being taken once the next
one would pass `max_total_bytes` (20 MB in all). Why that cap: the index costs ~30 bytes
of memory per corpus byte once loaded (tokens, sorted rows and ~40 bytes per trie node),
so 20 MB of code (~5M tokens) loads as ~150 MB in ~0.5 s from a 140 MB cache file, and
takes ~12 s to index (0.7 GB at peak) after the model's tokenizer has run over it.

Cache file:

    offset  size  field
    0       8     magic b"LKCORPUS"
    8       4     format version (little-endian u32)
    12      32    key: sha256 of the format version, tokenizer id, index parameters and
                  every file's name, size and sha256 (what the tables are a function of)
    44      8     payload length (u64)
    52      32    sha256 of the payload
    84      ...   payload: u32 length of a JSON table {name: [dtype, offset, count]}, the
                  table, then each 1-D numeric array's raw bytes (offsets 8-byte aligned);
                  the automaton is one of them, as the bytes of its pickle, which is read
                  back only after the checksum holds and by an unpickler that can make
                  nothing but an ahocorasick.Automaton

A file with another magic, version or key is stale; a short one is truncated; a checksum
mismatch means it was damaged. All of them are rebuilt, never trusted. The checksum
guards against accidents (a crash, a full disk, a copy gone wrong), not against someone
who can write to the cache folder. Writes go to a temporary file in the same folder,
then `os.replace`, so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from lookahead.errors import UserError

FORMAT_VERSION = 1
MAGIC = b"LKCORPUS"
_HEADER = struct.Struct("<8sI32sQ32s")

MAX_FILE_BYTES = 1_000_000
MAX_TOTAL_BYTES = 20_000_000

# Which files of a folder are read (by suffix, lower-cased, or by exact name) and which
# folders are never entered (besides hidden ones and virtualenvs).
_SUFFIXES = """
    .py .pyi .pyx .md .markdown .rst .txt .adoc .tex .toml .yaml .yml .json .jsonc
    .ini .cfg .conf .xml .html .htm .css .scss .less
    .c .h .cc .cpp .cxx .hpp .hh .cu .cuh .m .mm .rs .go .java .kt .kts .scala .groovy
    .gradle .cs .fs .swift .dart .js .mjs .cjs .ts .tsx .jsx .vue .svelte .rb .php .pl .pm
    .lua .r .jl .ex .exs .erl .hs .ml .mli .clj .el .lisp .scm .zig .nim .v .sv .vhd
    .sh .bash .zsh .fish .ps1 .bat .sql .graphql .proto .thrift .cmake .mk .dockerfile
    .tf .nix .bzl .gn .s .asm
"""
_NAMES = """
    Makefile makefile GNUmakefile Dockerfile Containerfile CMakeLists.txt Justfile
    Rakefile Gemfile Pipfile Vagrantfile BUILD WORKSPACE README LICENSE CHANGELOG
"""
_SKIP_DIRS = "node_modules __pycache__ site-packages build dist target htmlcov"
TEXT_SUFFIXES = frozenset(_SUFFIXES.split())
TEXT_NAMES = frozenset(_NAMES.split())
SKIP_DIRS = frozenset(_SKIP_DIRS.split())


class CorpusError(UserError):
    """A corpus folder or file that cannot be used (missing, or no usable text)."""


class IgnoreRule(Protocol):
    """Which paths of a walked folder to leave out, on top of the rules above (e.g. the
    user's .gitignore: `lookahead.index.ignore.GitIgnore`)."""

    # names the rule in the cache file's name, so an index built with it and one built
    # without it (the same folder as a plain --corpus) do not overwrite each other
    tag: str

    def __call__(self, path: Path, is_dir: bool) -> bool:
        """True to leave `path` (a folder with all below it, if `is_dir`) out."""
        ...


@dataclass(frozen=True)
class CorpusFile:
    name: str  # "<folder name>/<path inside it>", forward slashes
    text: str
    size: int  # bytes
    digest: bytes  # sha256 of the bytes


def collect_files(
    paths: Sequence[str | os.PathLike[str]],
    max_file_bytes: int = MAX_FILE_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    ignore: IgnoreRule | None = None,
) -> list[CorpusFile]:
    """The usable text files under `paths`, in order (see the module docstring); in a
    folder, what `ignore` says to leave out is left out too."""
    files: list[CorpusFile] = []
    total = 0
    full = False
    for raw_path in paths:
        root = Path(raw_path).expanduser()
        if not root.exists():
            raise CorpusError(f"corpus path does not exist: {root}")
        if root.is_file():
            found = [(root, root.name)]
        elif root.is_dir():
            found = _walk(root, ignore)
        else:
            raise CorpusError(f"corpus path is neither a file nor a folder: {root}")
        usable = 0
        for path, rel in found:
            name = f"{root.name}/{rel}" if root.is_dir() else rel
            item = _read_text(path, name, max_file_bytes)
            if item is None:
                continue
            usable += 1
            if full or total + item.size > max_total_bytes:
                full = True  # the cap: this file and every later one are left out
                continue
            total += item.size
            files.append(item)
        if not usable:
            raise CorpusError(
                f"no usable text in corpus path {root} (text files under 1 MB "
                "with a known source or text suffix)"
            )
    return files


def _walk(root: Path, ignore: IgnoreRule | None = None) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if _keep_dir(here / d) and not (ignore and ignore(here / d, True)))
        for name in sorted(names):
            path = here / name
            # not a regular file (a FIFO, a socket, a device): reading it could block for ever
            if name.startswith(".") or path.is_symlink() or not path.is_file() or (ignore and ignore(path, False)):
                continue
            if path.suffix.lower() in TEXT_SUFFIXES or name in TEXT_NAMES:
                out.append((path, path.relative_to(root).as_posix()))
    return out


def _keep_dir(path: Path) -> bool:
    name = path.name
    return not (
        name.startswith(".")
        or name in SKIP_DIRS
        or name.endswith(".egg-info")
        or path.is_symlink()
        or (path / "pyvenv.cfg").exists()
    )


def _read_text(path: Path, name: str, max_file_bytes: int) -> CorpusFile | None:
    try:
        if path.stat().st_size > max_file_bytes:
            return None
        raw = path.read_bytes()
    except OSError:
        return None
    if not raw or len(raw) > max_file_bytes or b"\0" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return CorpusFile(name, text.removeprefix("\ufeff"), len(raw), hashlib.sha256(raw).digest())


def content_key(files: Sequence[CorpusFile], tokenizer_id: str, params: str) -> bytes:
    """sha256 of everything the built tables depend on."""
    h = hashlib.sha256()
    for part in (
        b"lookahead corpus",
        str(FORMAT_VERSION).encode(),
        tokenizer_id.encode(),
        params.encode(),
    ):
        h.update(len(part).to_bytes(8, "little") + part)
    for f in files:
        name = f.name.encode()
        h.update(len(name).to_bytes(8, "little") + name + f.size.to_bytes(8, "little") + f.digest)
    return h.digest()


def cache_file(
    cache_dir: str | os.PathLike[str],
    paths: Sequence[str | os.PathLike[str]],
    tokenizer_id: str,
    params: str,
    ignore: IgnoreRule | None = None,
) -> Path:
    """Where the cache for these paths, tokenizer, index parameters and ignore rule lives:
    one file per combination, overwritten when the content changes, so stale caches do not
    pile up."""
    h = hashlib.sha256(f"{tokenizer_id}\0{params}".encode())
    if ignore is not None:
        h.update(f"\0ignore={ignore.tag}".encode())
    for p in paths:
        h.update(b"\0" + str(Path(p).expanduser().resolve()).encode())
    return Path(cache_dir) / f"corpus-{h.hexdigest()[:24]}.idx"


def write_cache(path: Path, key: bytes, arrays: dict[str, np.ndarray]) -> None:
    """Atomically write `arrays` (1-D, numeric) under `key` (temporary file + rename)."""
    chunks = _pack(arrays)
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    length = sum(len(c) for c in chunks)
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, key, length, digest.digest())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_cache(path: Path, key: bytes) -> tuple[dict[str, np.ndarray] | None, str]:
    """(arrays, "ok") from a valid cache file for `key`, else (None, why not)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "no cache file"
    except OSError as e:
        return None, f"unreadable: {e}"
    if len(data) < _HEADER.size:
        return None, "truncated header"
    magic, version, file_key, length, checksum = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return None, "not a corpus cache"
    if version != FORMAT_VERSION:
        return None, f"format version {version}, expected {FORMAT_VERSION}"
    if file_key != key:
        return None, "stale (corpus, tokenizer or parameters changed)"
    if len(data) - _HEADER.size != length:
        return None, f"truncated payload ({len(data) - _HEADER.size} of {length} bytes)"
    if hashlib.sha256(memoryview(data)[_HEADER.size :]).digest() != checksum:
        return None, "checksum mismatch"
    try:
        return _unpack(data, _HEADER.size), "ok"
    except (ValueError, TypeError, KeyError) as e:  # checksummed: a bug or a foreign writer
        return None, f"unreadable payload: {e}"


_DTYPE_KINDS = "iuf"  # never object arrays: nothing in a cache file is executable


def _pack(arrays: dict[str, np.ndarray]) -> list[bytes | memoryview]:
    table: dict[str, tuple[str, int, int]] = {}
    offset = 0
    for name, arr in arrays.items():
        if arr.ndim != 1 or arr.dtype.kind not in _DTYPE_KINDS:
            raise ValueError(f"{name}: only 1-D numeric arrays are cached")
        table[name] = (arr.dtype.str, offset, arr.size)
        offset += -(-arr.nbytes // 8) * 8
    head = json.dumps(table).encode()
    head = len(head).to_bytes(4, "little") + head
    head += bytes(-len(head) % 8)
    chunks: list[bytes | memoryview] = [head]
    for arr in arrays.values():
        chunks.append(np.ascontiguousarray(arr).view(np.uint8).data)
        chunks.append(bytes(-arr.nbytes % 8))
    return chunks


def _unpack(data: bytes, start: int) -> dict[str, np.ndarray]:
    """Copies of the arrays in data[start:] (so `data` can be freed)."""
    n = int.from_bytes(data[start : start + 4], "little")
    table = json.loads(data[start + 4 : start + 4 + n])
    base = start + -(-(4 + n) // 8) * 8
    out = {}
    for name, (dtype_str, offset, count) in table.items():
        dtype = np.dtype(dtype_str)
        if dtype.kind not in _DTYPE_KINDS or offset < 0 or count < 0:
            raise ValueError(f"bad table entry for {name!r}")
        if base + offset + count * dtype.itemsize > len(data):
            raise ValueError(f"array {name!r} runs past the end")
        out[name] = np.frombuffer(data, dtype=dtype, count=count, offset=base + offset).copy()
    return out
