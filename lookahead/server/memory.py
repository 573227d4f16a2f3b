"""What the service remembers across requests: earlier prompts and outputs to draft from.

Like suffix decoding's global tree: a later request that repeats an earlier one's text
(the same report template with new data, another edit of the same file) drafts it from
here. One partition per API key (a keyed hash of the key, never the key itself; the secret
is this server's, kept beside the index file), so one client's text never drafts into
another's. Each partition keeps its most recent requests within `max_tokens` and
`max_requests` (the oldest are evicted) and serves them through a corpus index
(`CorpusIndex`, read-only tables that every request reads through its own `fresh()`
stream, tagged SOURCE_SHARED so the controller calibrates it on its own).

Tables are rebuilt after each request on a background thread (about 0.2 s per 20k tokens)
and swapped in whole, so a request never waits for them and never sees half of them.
With `path`, the documents are saved there (atomically and durably: a temporary file,
flushed to disk, renamed over the old one, then the directory flushed, so a crash or a power
cut leaves the old file or the new one, never an empty one; readable by its owner only) and
loaded at start; a save that fails (a full disk, a read-only volume) is tried again
`retry_after` seconds later, doubling up to a minute, until one succeeds. A file that does
not parse, or was written for another tokenizer, is set aside and the memory starts empty.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lookahead.core.draft import SOURCE_SHARED
from lookahead.errors import UserError
from lookahead.index.corpus import CorpusIndex, CorpusParams

log = logging.getLogger("lookahead.server")

FORMAT = "lookahead-shared-index-v1"
# A client's own recent text repeats more surely than a general corpus: a smaller escape
# count than the shipped corpora's trusts a match sooner (q = 1 / (1 + escape / L) for a
# match of L tokens seen once: 0.67 at L = 8 instead of 0.4).
PARAMS = CorpusParams(escape=4.0)


SECRET_BYTES = 32


def partition_of(api_key: str | None, secret: bytes = b"") -> str:
    """The partition name of a key: a keyed hash (HMAC-SHA-256 with the server's secret), so
    keys never reach memory or disk and names cannot be tested against guessed keys."""
    return hmac.new(secret, (api_key or "").encode(), hashlib.sha256).hexdigest()[:32]


RETRY_MAX = 60.0  # seconds between attempts to save, at most


def _write_private(path: Path, data: bytes) -> None:
    """Write `path` readable by its owner only (0600), whatever the umask, and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sync_dir(path: Path) -> None:
    """Flush a directory's entries (a rename in it) to disk; where directories cannot be
    opened (Windows), the rename is as durable as the system makes it."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_secret(path: Path | None) -> bytes:
    """The server's partition secret: kept in `path` (made on first use, 0600) so names stay
    stable across restarts with an index file; a fresh one per process without."""
    secret = os.urandom(SECRET_BYTES)
    if path is None:
        return secret
    try:
        kept = path.read_bytes() if path.exists() else b""
        if len(kept) >= SECRET_BYTES:
            return kept
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(path, secret)
    except OSError as exc:
        log.warning("partition secret %s not usable (%s): saved partitions will not match", path, exc)
    return secret


@dataclass
class _Partition:
    docs: deque[list[int]] = field(default_factory=deque)
    tokens: int = 0
    index: CorpusIndex | None = None
    version: int = 0  # bumped by every change; the index is current when built == version
    built: int = 0


class SharedIndex:
    """Earlier requests' token streams per partition, bounded, with a draft index each."""

    def __init__(
        self,
        tokenizer_id: str,
        *,
        max_tokens: int = 65536,
        max_requests: int = 256,
        path: Path | None = None,
        retry_after: float = 5.0,
    ) -> None:
        if max_tokens < 1 or max_requests < 1:
            raise UserError("the shared index needs max_tokens >= 1 and max_requests >= 1")
        self.tokenizer_id = tokenizer_id
        self.max_tokens = max_tokens
        self.max_requests = max_requests
        self.path = path
        self.retry_after = retry_after  # seconds before a failed save is tried again (doubling)
        self._retry_at: float | None = None  # when the next attempt after a failed save is due
        self._failures = 0
        self._secret = load_secret(path.with_name(path.name + ".secret") if path is not None else None)
        self._parts: dict[str, _Partition] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._dirty = False
        if path is not None:
            self._load(path)
        self._thread = threading.Thread(target=self._rebuild_loop, name="shared-index", daemon=True)
        self._thread.start()

    # ---- what requests use ------------------------------------------------------------
    def partition(self, api_key: str | None) -> str:
        """The partition of a caller's key (None: no key configured)."""
        return partition_of(api_key, self._secret)

    def source(self, partition: str) -> CorpusIndex | None:
        """A fresh draft stream over the partition's current tables (None while it has none)."""
        with self._lock:
            part = self._parts.get(partition)
            index = part.index if part is not None else None
        return index.fresh() if index is not None else None

    def add(self, partition: str, docs: Sequence[Sequence[int]]) -> None:
        """Remember a finished request's token streams (its prompt, its output)."""
        with self._lock:
            part = self._parts.setdefault(partition, _Partition())
            for doc in docs:
                toks = [int(t) for t in doc][-self.max_tokens :]
                if len(toks) < 2:
                    continue
                part.docs.append(toks)
                part.tokens += len(toks)
            while part.docs and (part.tokens > self.max_tokens or len(part.docs) > self.max_requests):
                part.tokens -= len(part.docs.popleft())
            part.version += 1
            self._dirty = True
            self._wake.notify()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "partitions": len(self._parts),
                "documents": sum(len(p.docs) for p in self._parts.values()),
                "tokens": sum(p.tokens for p in self._parts.values()),
            }

    def wait_built(self, timeout: float = 10.0) -> bool:
        """Block until every partition's index is current (tests, shutdown)."""
        with self._lock:
            return self._wake.wait_for(
                lambda: all(p.built == p.version for p in self._parts.values()), timeout
            )

    def close(self) -> None:
        """Stop the rebuild thread and save (if a path was given)."""
        with self._lock:
            self._stop = True
            self._wake.notify_all()
        self._thread.join(timeout=30)
        self.save()

    # ---- the background rebuild -------------------------------------------------------
    def _rebuild_loop(self) -> None:
        while True:
            with self._lock:
                self._wake.wait_for(
                    lambda: self._stop or self._save_due() or any(p.built != p.version for p in self._parts.values()),
                    timeout=self._until_retry(),
                )
                if self._stop:
                    return
                stale = next(((n, p) for n, p in self._parts.items() if p.built != p.version), None)
                if stale is None:
                    retry = self._save_due()
                else:
                    name, part = stale
                    version, docs = part.version, list(part.docs)
            if stale is None:
                if retry:
                    self.save()  # the last save failed: try again
                continue
            index = None
            if docs:
                try:
                    index = CorpusIndex.from_tokens(docs, PARAMS, source=SOURCE_SHARED)
                except UserError:  # nothing repeatable yet
                    index = None
            with self._lock:
                part.index = index
                part.built = version
                self._wake.notify_all()
            if self.path is not None:
                self.save()

    # ---- persistence ------------------------------------------------------------------
    def _save_due(self) -> bool:
        return self._retry_at is not None and time.monotonic() >= self._retry_at

    def _until_retry(self) -> float | None:
        return None if self._retry_at is None else max(0.0, self._retry_at - time.monotonic())

    def save(self) -> bool:
        """Write the documents to the index file, if they changed; False when that failed (the
        rebuild thread then tries again later)."""
        if self.path is None:
            return True
        with self._lock:
            if not self._dirty:
                return True
            data = {
                "format": FORMAT,
                "tokenizer": self.tokenizer_id,
                "partitions": {name: list(p.docs) for name, p in self._parts.items()},
            }
            self._dirty = False
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write_private(tmp, json.dumps(data).encode("utf-8"))
            os.replace(tmp, self.path)
            _sync_dir(self.path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            with self._lock:
                self._dirty = True  # still to be saved
                wait = min(self.retry_after * 2**self._failures, RETRY_MAX)
                self._failures += 1
                self._retry_at = time.monotonic() + wait
                self._wake.notify_all()
            log.warning("could not save the shared index to %s (%s); trying again in %.0f s", self.path, exc, wait)
            return False
        with self._lock:
            self._failures = 0
            self._retry_at = None
        return True

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT:
                raise ValueError("not a shared index file")
            if data.get("tokenizer") != self.tokenizer_id:
                raise ValueError("written for another model's tokenizer")
            parts = data["partitions"]
            for name, docs in parts.items():
                if not isinstance(name, str) or not all(
                    isinstance(d, list) and all(isinstance(t, int) and t >= 0 for t in d) for d in docs
                ):
                    raise ValueError("malformed documents")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            aside = path.with_name(path.name + ".corrupt")
            log.warning("shared index %s not loaded (%s); starting empty, old file kept as %s", path, exc, aside)
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            return
        for name, docs in parts.items():
            self.add(name, docs)
        self._dirty = False
