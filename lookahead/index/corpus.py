"""Static corpus index: what followed the stream's last tokens in a fixed body of text.

The corpus is the shipped `corpora/` folder (Python idioms, report-style Markdown) or a
folder the user names (their repository). Each file is tokenized with the model's own
tokenizer, separately, so no n-gram spans two files.

Matching, in two stages (tables built in `corpus_build`):

1. An Aho-Corasick automaton (pyahocorasick) holds every distinct n-gram of `min_match`
   to `key_order` tokens that occurs in the corpus with a continuation. `observe` runs it
   over the stream's last `key_order` tokens; the longest key ending at the last token
   names a group, the run of sorted corpus rows where that n-gram occurs. The search is
   in C and costs O(key_order) per call, however many tokens were appended.
2. If the matched key is `key_order` long, older tokens may agree further: the rows of a
   group are sorted by reversed context, so `propose` bisects them with the stream's last
   `window` tokens and keeps the block of rows agreeing longest (agreement `a`): every
   row in it is preceded by the same `a` tokens as the stream's end, and no corpus
   position agrees longer. A shorter key needs no bisection: no row agrees longer.

`propose` reads the continuations of (up to `max_positions`, evenly spread) rows of that
block and walks them as a trie with `walk.best_paths`: greedy by count, then the best
alternatives. Estimate, the suffix index's form, for a node at draft depth j (j tokens
after the stream's end) with n continuations through it, d distinct next tokens and c
of them with token t:

    q(t) = c / (n + d · escape / (a + j))

the Witten-Bell escape mass, shrunk as the agreement grows (once j draft tokens are
accepted, corpus and stream agree on a + j tokens). escape = 12, not the suffix index's 2:
another text predicts this one less well than the stream predicts itself. Held-out code
(numpy's sources against a 20 MB corpus of the standard library, Qwen2.5 tokens) puts
the hit rate within a few points of q in every bin from 0.1 to 1.

Why pyahocorasick rather than our own code: its automaton finds every key ending at each
position of a text in one pass, with the failure links built for us, in C; its trie costs
~40 bytes per node (a dict of tuple keys, several times that), and it pickles to flat
bytes that load in ~0.1 s, where inserting the keys again takes seconds. Keys stay short
(3 tokens): the trie has about one node per corpus token at that length and three or
four at 8, while the bisection finds the longer agreements in the sorted rows for free.
(Its `iter().set()` could carry the search state from call to call, but it crashes in
pyahocorasick 2.3 when strings of different internal widths alternate, such as token ids
below and above 65536; a fresh search over `key_order` tokens costs as little.)

Caching: `load_or_build` hashes the files (see `corpus_files`) and reuses a cache file only
if its header names the same content, tokenizer and parameters and its checksum holds.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import os
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lookahead.core.draft import SOURCE_CORPUS, Candidate
from lookahead.core.tokens import TokenArray
from lookahead.index.corpus_build import (
    MAX_TOKEN,
    CorpusTables,
    build_tables,
    tables_from_arrays,
    tables_to_arrays,
    token_string,
)
from lookahead.index.corpus_files import (
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    CorpusError,
    CorpusFile,
    IgnoreRule,
    cache_file,
    collect_files,
    content_key,
    read_cache,
    write_cache,
)
from lookahead.index.walk import best_paths, int_list
from lookahead.progress import Progress

__all__ = ["SHIPPED_CORPORA", "CorpusError", "CorpusIndex", "CorpusParams"]

log = logging.getLogger(__name__)


def _shipped_corpora() -> Path:
    """The corpora/ folder shipped with lookahead (python/, markdown/ ...).

    A source checkout (or editable install) has it beside the package; a wheel installs it
    as data files under <prefix>/share/lookahead/corpora (pyproject's data-files), since a
    top-level folder cannot be package data.
    """
    beside = Path(__file__).resolve().parents[2] / "corpora"
    data = [Path(sysconfig.get_path("data")), Path(sys.prefix)]
    with contextlib.suppress(KeyError):  # pip install --user puts data files there
        data.append(Path(sysconfig.get_path("data", f"{os.name}_user")))
    for path in [beside, *(d / "share" / "lookahead" / "corpora" for d in data)]:
        if path.is_dir():
            return path
    return beside  # none: drafting runs without the shipped corpora


SHIPPED_CORPORA = _shipped_corpora()

# (lo, hi, j): the continuations seqs[lo:hi] share their first j tokens.
Node = tuple[int, int, int]


@dataclass(frozen=True)
class CorpusParams:
    """How a corpus is indexed and read. The first three shape the tables (and the cache key)."""

    min_match: int = 2  # shortest context (tokens) that may propose
    key_order: int = 3  # longest n-gram in the automaton; memory grows fast with it
    window: int = 32  # longest context compared (a power of two: the sort doubles)
    max_positions: int = 64  # most corpus occurrences read per proposal
    escape: float = 12.0  # pseudo-count in q (see the module docstring)
    min_p: float = 0.01  # drafts stop before their path probability drops below it

    def __post_init__(self) -> None:
        if not 1 <= self.min_match <= self.key_order <= self.window:
            raise ValueError("need 1 <= min_match <= key_order <= window")
        if self.window & (self.window - 1):
            raise ValueError("window must be a power of two")
        if self.max_positions < 1:
            raise ValueError("max_positions must be >= 1")

    def table_key(self) -> str:
        return f"min_match={self.min_match} key_order={self.key_order} window={self.window}"


class CorpusIndex:
    """The corpus draft source. The tables are read-only and shared by `fresh()` copies;
    the stream state (its last few tokens and the current match) is per copy."""

    def __init__(
        self,
        tables: CorpusTables,
        params: CorpusParams = CorpusParams(),
        files: Sequence[str] = (),
        source: int = SOURCE_CORPUS,
    ) -> None:
        self.tables = tables
        self.params = params
        self.files = tuple(files)  # names of the files indexed, in order
        # the tag its drafts carry: the same tables serve a request's predicted output and
        # the server's memory of earlier requests, each calibrated on its own
        self.source = source
        self.reset()

    # ---- building -------------------------------------------------------------------

    @classmethod
    def from_tokens(
        cls,
        docs: Sequence[Sequence[int] | TokenArray],
        params: CorpusParams = CorpusParams(),
        files: Sequence[str] = (),
        progress: Progress | None = None,
        source: int = SOURCE_CORPUS,
    ) -> CorpusIndex:
        """Index already tokenized documents (one per file)."""
        arrays = [np.asarray(d, dtype=np.int64).reshape(-1) for d in docs]
        if any(len(a) and (a.min() < 0 or a.max() >= MAX_TOKEN) for a in arrays):
            raise CorpusError(f"token ids must lie in [0, {MAX_TOKEN}) to be indexed")
        tables = build_tables(
            [a.astype(np.int32) for a in arrays],
            params.min_match,
            params.key_order,
            params.window,
            progress,
        )
        if not len(tables.group_lo):
            raise CorpusError(f"corpus has no {params.min_match}-token context with a continuation")
        return cls(tables, params, files, source)

    @classmethod
    def load_or_build(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        tokenize: Callable[[str], list[int]],
        tokenizer_id: str,
        cache_dir: str | os.PathLike[str],
        progress: Progress | None = None,
        params: CorpusParams = CorpusParams(),
        max_total_bytes: int = MAX_TOTAL_BYTES,
        ignore: IgnoreRule | None = None,
    ) -> CorpusIndex:
        """The index of the files under `paths` (see `corpus_files` for which), from the
        cache in `cache_dir` when it is valid for this content, tokenizer and parameters,
        else built (calling `tokenize` on each file, without special tokens) and cached.

        `tokenizer_id` must change whenever `tokenize` would (e.g. a hash of the vocab).
        `ignore`: what to leave out of the folders besides the usual (e.g. a .gitignore).
        Raises CorpusError for a path that does not exist or holds no usable text."""
        if progress:
            progress("reading corpus files", 0, None)
        files = collect_files(paths, MAX_FILE_BYTES, max_total_bytes, ignore)
        key = content_key(files, tokenizer_id, params.table_key())
        path = cache_file(cache_dir, paths, tokenizer_id, params.table_key(), ignore)
        if progress:
            progress("loading corpus cache", 0, None)
        arrays, why = read_cache(path, key)
        if arrays is not None:
            try:
                names = json.loads(arrays.pop("files").tobytes().decode())
                return cls(tables_from_arrays(arrays), params, names)
            except Exception as e:  # checksummed, so this is a bug or a foreign writer
                why = f"unusable payload: {e}"
        log.info("building corpus index (%s): %s", why, path)
        index = cls._build(files, tokenize, params, progress)
        arrays = tables_to_arrays(index.tables)
        arrays["files"] = np.frombuffer(json.dumps(index.files).encode(), dtype=np.uint8)
        try:
            write_cache(path, key, arrays)
        except OSError as e:  # a cache we cannot write only costs the next start a rebuild
            log.warning("could not write corpus cache %s: %s", path, e)
        return index

    @classmethod
    def _build(
        cls,
        files: Sequence[CorpusFile],
        tokenize: Callable[[str], list[int]],
        params: CorpusParams,
        progress: Progress | None,
    ) -> CorpusIndex:
        docs = []
        for i, f in enumerate(files):
            if progress:
                progress("tokenizing corpus", i, len(files))
            docs.append(tokenize(f.text))
        if progress:
            progress("tokenizing corpus", len(files), len(files))
        return cls.from_tokens(docs, params, [f.name for f in files], progress)

    # ---- the stream -----------------------------------------------------------------

    def fresh(self) -> CorpusIndex:
        """An index over the same corpus (shared, not copied) with an empty stream."""
        return CorpusIndex(self.tables, self.params, self.files, self.source)

    def reset(self) -> None:
        """Forget the stream (start of a new request)."""
        self._tail: list[int] = []  # the last `window` tokens at least (at most twice that)
        self._match = -1  # group of the longest key ending at the stream's end, -1 if none
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def n_tokens(self) -> int:
        """Tokens in the corpus."""
        return len(self.tables.tokens)

    def observe(self, tokens: Iterable[int] | TokenArray) -> None:
        """Append `tokens`: keeps the stream's last tokens and runs the automaton over the
        last `key_order` of them (O(key_order) per call, whatever the number of tokens)."""
        window = self.params.window
        if isinstance(tokens, (list, tuple, np.ndarray)):
            self._n += len(tokens)
            toks = int_list(tokens[-window:])  # older tokens can no longer matter
        else:
            toks = int_list(tokens)
            self._n += len(toks)
        if not toks:
            return
        tail = self._tail
        tail.extend(toks)
        if len(tail) > 2 * window:
            del tail[:-window]
        # No key is longer than key_order: the matches ending at the stream's end lie in
        # its last key_order tokens. A fresh search each time (see the module docstring).
        text = token_string(tail[-self.params.key_order :])
        last = len(text) - 1
        group_len = self.tables.group_len
        best, best_len = -1, 0
        for end, g in self.tables.automaton.iter(text):
            if end == last and group_len[g] > best_len:
                best, best_len = g, group_len[g]
        self._match = best

    def match(self) -> tuple[int, int, int]:
        """(agreement, lo, hi): the longest context the corpus shares with the stream's end
        and the rows holding it, rows[lo:hi]; (0, 0, 0) if under min_match."""
        if self._match < 0:
            return (0, 0, 0)
        t = self.tables
        g = self._match
        k, lo, hi = int(t.group_len[g]), int(t.group_lo[g]), int(t.group_hi[g])
        if k < self.params.key_order or len(self._tail) <= k:
            return (k, lo, hi)
        return self._refine(k, lo, hi)

    def _refine(self, k: int, lo: int, hi: int) -> tuple[int, int, int]:
        """Narrow rows[lo:hi] (all agreeing on k tokens) to the block agreeing longest."""
        query = self._tail[: -self.params.window - 1 : -1]  # the stream's end, reversed
        ctx = self._context
        ins = bisect.bisect_left(range(hi), query, lo, hi, key=ctx)
        a = k
        if ins > lo:
            a = max(a, _common_prefix(query, ctx(ins - 1)))
        if ins < hi:
            a = max(a, _common_prefix(query, ctx(ins)))
        if a == k:
            return (k, lo, hi)
        head = query[:a]

        def ctx_a(i: int) -> list[int]:
            return ctx(i)[:a]

        return (
            a,
            bisect.bisect_left(range(hi), head, lo, ins, key=ctx_a),
            bisect.bisect_right(range(hi), head, ins, hi, key=ctx_a),
        )

    def _context(self, i: int) -> list[int]:
        """Row i's reversed context: tokens[e], tokens[e-1] ... (`window` at most, own file)."""
        t = self.tables
        e = int(t.rows[i])
        start = max(e - self.params.window + 1, t.file_start(e))
        return t.tokens[start : e + 1][::-1].tolist()

    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        """Continuations of the longest corpus match, greedy by count, then alternatives."""
        if self._match < 0 or max_depth <= 0 or max_candidates <= 0:
            return []
        agreement, lo, hi = self.match()
        t, cap = self.tables, self.params.max_positions
        ends = t.rows[lo + (np.arange(cap) * (hi - lo)) // cap] if hi - lo > cap else t.rows[lo:hi]
        stops = np.minimum(ends.astype(np.int64) + 1 + max_depth, t.file_end(ends))
        tokens = t.tokens
        counts = Counter(
            tuple(tokens[e + 1 : s].tolist())
            for e, s in zip(ends.tolist(), stops.tolist(), strict=True)
        )
        seqs = sorted(counts)
        step = continuation_steps(seqs, [counts[s] for s in seqs], agreement, self.params.escape)
        paths = best_paths((0, len(seqs), 0), step, max_depth, max_candidates, self.params.min_p)
        return [
            Candidate(np.array(toks, dtype=np.int32), np.array(qs, dtype=np.float32), self.source)
            for toks, qs in paths
        ]


def continuation_steps(
    seqs: Sequence[tuple[int, ...]], counts: Sequence[int], agreement: int, escape: float
) -> Callable[[Node, int, float], list[tuple[int, float, Node]]]:
    """The `best_paths` step over sorted distinct continuations `seqs` seen `counts` times:
    a node (lo, hi, j) is the trie node of the j tokens seqs[lo:hi] share, and its children
    are the runs of equal seqs[i][j] (contiguous, because seqs are sorted)."""
    cum = [0]
    for c in counts:
        cum.append(cum[-1] + c)

    def step(node: Node, limit: int, floor: float) -> list[tuple[int, float, Node]]:
        lo, hi, j = node
        if lo < hi and len(seqs[lo]) == j:
            lo += 1  # a continuation cut by its file's end sorts first and says nothing
        if lo >= hi:
            return []
        esc = escape / (agreement + j)
        if hi - lo == 1:  # the common case deep in a walk: one continuation left
            c = counts[lo]
            q = c / (c + esc)
            return [(seqs[lo][j], q, (lo, hi, j + 1))] if q >= floor else []
        runs = []
        start, tok = lo, seqs[lo][j]
        for i in range(lo + 1, hi):
            if seqs[i][j] != tok:
                runs.append((tok, start, i))
                start, tok = i, seqs[i][j]
        runs.append((tok, start, hi))
        denom = cum[hi] - cum[lo] + len(runs) * esc
        runs.sort(key=lambda r: cum[r[1]] - cum[r[2]])  # by count, ties by token (stable)
        out = []
        for tok, a, b in runs[:limit]:
            q = (cum[b] - cum[a]) / denom
            if q < floor:
                break
            out.append((tok, q, (a, b, j + 1)))
        return out

    return step


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
