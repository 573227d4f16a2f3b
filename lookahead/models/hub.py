"""GGUF models from Hugging Face: `hf:OWNER/REPO[:QUANT]` or `hf:OWNER/REPO/FILE.gguf`.

The download goes through `huggingface_hub` into its own cache (`HF_HOME` / `HF_HUB_CACHE`,
shared with every other tool that reads it), so a file fetched once is read from there
after, and with `HF_HUB_OFFLINE=1` nothing is asked of the network. `huggingface_hub`
resumes an interrupted download from its `.incomplete` file and reads `HF_TOKEN` for
private and gated repositories.

What this module adds: the choice of a file by quantization (as llama.cpp's `-hf` does:
`Q4_K_M` when none is named and the repository holds several), a progress callback instead
of tqdm, and a sha256 check of the whole file against the hub's metadata (the LFS sha256 in
the repository listing; offline, the LFS sha256 the blob is named after). A file that does
not match is removed from the cache and refused. The check is remembered in a small stamp
file beside the named models (size, mtime, sha256), so later loads do not hash again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead.models.registry import ModelError
from lookahead.progress import Progress

PREFIX = "hf:"
DEFAULT_QUANT = "Q4_K_M"  # llama.cpp's choice when `-hf` names no quantization
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20
STAMPS = "hf-verified.json"  # in the named models' cache folder


@dataclass(frozen=True)
class HubRef:
    """A model on the hub: the repository and either a file in it or a quantization."""

    repo: str  # OWNER/NAME
    filename: str | None = None  # a .gguf path inside the repository
    quant: str | None = None  # e.g. Q4_K_M, matched against the file names


def is_hub_ref(text: str) -> bool:
    return text.strip().lower().startswith(PREFIX)


def parse_ref(text: str) -> HubRef:
    """`hf:OWNER/REPO`, `hf:OWNER/REPO:QUANT` or `hf:OWNER/REPO/PATH/FILE.gguf`."""
    body = text.strip()[len(PREFIX) :]
    usage = f"{text.strip()!r}: expected hf:OWNER/REPO, hf:OWNER/REPO:QUANT or hf:OWNER/REPO/FILE.gguf"
    body, _, quant = body.partition(":")
    parts = body.split("/")
    if len(parts) < 2 or not all(parts) or (quant == "" and text.strip().endswith(":")):
        raise ModelError(usage)
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:]) or None
    if filename is not None and not filename.lower().endswith(".gguf"):
        raise ModelError(f"{usage} (a file must end in .gguf)")
    if filename is not None and quant:
        raise ModelError(f"{usage} (name a file or a quantization, not both)")
    return HubRef(repo, filename, quant or None)


def pick_file(ref: HubRef, files: list[str]) -> str:
    """The GGUF file `ref` means among a repository's `files` (ModelError if none or unclear)."""
    if ref.filename is not None:
        if ref.filename not in files:
            raise ModelError(f"{ref.repo} has no file {ref.filename}")
        return ref.filename
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower())
    if not ggufs:
        raise ModelError(f"{ref.repo} holds no .gguf file")
    if ref.quant is None and len(ggufs) == 1:
        return ggufs[0]
    quant = (ref.quant or DEFAULT_QUANT).lower()
    # a quantization is a whole token of the file name: Q4_K matches neither Q4_K_M nor Q4_K_S
    pattern = re.compile(rf"(^|[^a-z0-9]){re.escape(quant)}([^a-z0-9_]|$)")
    found = [f for f in ggufs if pattern.search(Path(f).name.lower())]
    if len(found) == 1:
        return found[0]
    names = ", ".join(Path(f).name for f in ggufs)
    if not found:
        what = f"no {ref.quant} file" if ref.quant else f"several files and none is {DEFAULT_QUANT}"
        raise ModelError(f"{ref.repo} has {what}; pick one with hf:{ref.repo}:QUANT or hf:{ref.repo}/FILE ({names})")
    raise ModelError(f"{ref.repo} has several {quant.upper()} files (split models are not supported): {names}")


# --- download and verification ------------------------------------------------------------


def _bar_class(report: Progress, label: str) -> Any:
    """A tqdm class for `huggingface_hub` that draws nothing and sends every update to
    `report` (so the CLI shows its own bar). A real tqdm subclass, so every call the hub
    makes on it works, on plain HTTP and Xet downloads alike."""
    from tqdm.std import tqdm

    class Bar(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "disable": True})
            self.done: int = kwargs.get("initial") or 0
            report(label, self.done, self.total)

        def update(self, n: float | None = 1) -> None:
            self.done += int(n or 0)
            report(label, self.done, self.total)

    return Bar


def resolve_hf(text: str, stamps_dir: Path, progress: Progress | None = None, *, force: bool = False) -> Path:
    """The local path of the hub model `text` names: downloaded (resumably) if need be,
    then checked against the hub's sha256. Offline (`HF_HUB_OFFLINE=1`), from the cache.
    `force` downloads again even if cached."""
    from huggingface_hub import constants

    ref = parse_ref(text)
    report = progress or _quiet
    if constants.HF_HUB_OFFLINE:
        path, sha256 = _from_cache(ref)
    else:
        path, sha256 = _download(ref, report, force)
    _verify(path, sha256, stamps_dir, report)
    return path


def _download(ref: HubRef, report: Progress, force: bool) -> tuple[Path, str]:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        info = HfApi().model_info(ref.repo, files_metadata=True)
        files = {s.rfilename: s for s in info.siblings or []}
        filename = pick_file(ref, list(files))
        lfs = files[filename].lfs
        if lfs is None or not _SHA256.match(str(lfs.sha256)):
            raise ModelError(f"Hugging Face gives no sha256 for {ref.repo}/{filename}: refusing an unchecked file")
        path = hf_hub_download(
            ref.repo,
            filename,
            force_download=force,  # the revision is main, so the cache's refs/main serves offline use
            tqdm_class=_bar_class(report, f"fetching {Path(filename).name}"),
        )
    except GatedRepoError:
        raise ModelError(
            f"{ref.repo} is gated on Hugging Face: accept its terms there and set HF_TOKEN to a token of yours"
        ) from None
    except RepositoryNotFoundError:
        raise ModelError(
            f"Hugging Face has no model {ref.repo} (if it is private, set HF_TOKEN to a token that can read it)"
        ) from None
    except (EntryNotFoundError, RevisionNotFoundError):
        raise ModelError(f"Hugging Face: {ref.repo} has no {ref.filename or 'such file'}") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise ModelError(f"Hugging Face answered {status} for {ref.repo}: {_first_line(exc)}") from None
    except (HTTPError, OSError) as exc:  # no network, refused, timed out
        unreachable = exc
    else:
        return Path(str(path)), str(lfs.sha256)
    try:  # the hub cannot be reached: what the cache holds will do, as huggingface_hub itself does
        return _from_cache(ref)
    except ModelError:
        raise ModelError(
            f"cannot reach Hugging Face for {ref.repo} ({_first_line(unreachable)}) and it is not in the cache"
            " (HF_HUB_OFFLINE=1 reads the cache without asking the network)"
        ) from None


def _from_cache(ref: HubRef) -> tuple[Path, str]:
    """The cached file and the sha256 its blob is named after (the hub's LFS sha256)."""
    from huggingface_hub import constants

    folder = Path(constants.HF_HUB_CACHE) / ("models--" + ref.repo.replace("/", "--"))
    offline = "HF_HUB_OFFLINE is set and "
    try:
        commit = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        raise ModelError(f"{offline}{ref.repo} is not in the Hugging Face cache ({folder.parent})") from None
    snapshot = folder / "snapshots" / commit
    files = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()]
    try:
        filename = pick_file(ref, files)
    except ModelError as exc:
        raise ModelError(f"{offline}in the cache: {exc}") from None
    path = snapshot / filename
    sha256 = Path(os.path.realpath(path)).name
    if not _SHA256.match(sha256):
        raise ModelError(f"cached {ref.repo}/{filename} carries no sha256 to check it against")
    return path, sha256


def _verify(path: Path, sha256: str, stamps_dir: Path, report: Progress) -> None:
    """Hash `path` (unless a stamp says it was hashed as it is now); a mismatch removes
    the file from the cache and raises."""
    blob = Path(os.path.realpath(path))
    st = blob.stat()
    stamp = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
    stamps = _read_stamps(stamps_dir)
    if stamps.get(str(blob)) == stamp:
        return
    digest = hashlib.sha256()
    label = f"verifying {path.name}"
    done = 0
    report(label, 0, st.st_size)
    with blob.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
            done += len(block)
            report(label, done, st.st_size)
    if digest.hexdigest() != sha256:
        _evict(path, blob)
        raise ModelError(
            f"{path.name} has sha256 {digest.hexdigest()}, but Hugging Face says {sha256}: "
            "removed it from the cache (try again; if it persists, the upload is damaged)"
        )
    stamps[str(blob)] = stamp
    _write_stamps(stamps_dir, stamps)


def _evict(link: Path, blob: Path) -> None:
    """Remove a bad file: its snapshot entry, its blob, and the repository's cache folder
    when no other blob is left in it."""
    for p in (link, blob):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    blobs = blob.parent
    if blobs.name == "blobs" and blobs.is_dir() and not any(blobs.iterdir()):
        shutil.rmtree(blobs.parent, ignore_errors=True)


def _read_stamps(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / STAMPS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_stamps(folder: Path, stamps: dict[str, Any]) -> None:
    """Atomically; a stamp that cannot be written only costs a hash next time."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        temp = folder / f".{STAMPS}.{os.getpid()}.tmp"
        temp.write_text(json.dumps(stamps), encoding="utf-8")
        os.replace(temp, folder / STAMPS)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _quiet(description: str, done: int, total: int | None) -> None:
    pass
