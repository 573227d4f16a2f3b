"""The corpus tables: the token stream, its positions sorted by context, and the n-gram keys.

A *row* is a corpus position e that can answer a query: at least `min_match` tokens of its
file end at e and at least one token follows it in the same file. Rows are sorted by their
reversed context (tokens[e], tokens[e-1], ... back to the file start, at most `window` of
them; a context cut short by the file start sorts before any longer one), ties by
position. Every context shared by several rows is then one contiguous run of rows:

    row  tokens up to its end (e = last)    key (forward n-gram) -> rows[lo:hi]
    r0   ... x a b                          "x a b" -> r0..r2
    r1   ... x a b                          "a b"   -> r0..r3 (contains the run above)
    r2   ... x a b
    r3   ... y a b
    r4   ... a c b                          "c b"   -> r4 ...

The automaton's keys are every distinct n-gram of `min_match..key_order` tokens that ends
at a row, as a string of one character per token; its value is the group id g, with
`group_lo[g]:group_hi[g]` the rows of that n-gram and `group_len[g]` its length.

Sorting by prefix doubling (numpy): rank_1(e) = token + 1 (0 = before the file start), and
rank_2h(e) = rank of the pair (rank_h(e), rank_h(e - h)), so log2(window) sorts of N keys.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from dataclasses import dataclass

import ahocorasick
import numpy as np
import numpy.typing as npt

from lookahead.core.tokens import TokenArray
from lookahead.progress import Progress

MAX_TOKEN = 0x110000  # a token is one str character in the automaton's keys


@dataclass(frozen=True)
class CorpusTables:
    """Everything a `CorpusIndex` reads; read-only once built, shared between streams."""

    tokens: TokenArray  # every file's tokens, concatenated
    file_starts: npt.NDArray[np.int64]  # file i is tokens[file_starts[i]:file_starts[i+1]]
    rows: npt.NDArray[np.int32]  # row positions, sorted by reversed context, then position
    group_lo: npt.NDArray[np.int32]  # group g (an n-gram key) is rows[group_lo[g]:group_hi[g]]
    group_hi: npt.NDArray[np.int32]
    group_len: npt.NDArray[np.int8]  # tokens in the key of group g
    automaton: ahocorasick.Automaton  # key string -> g; STORE_INTS

    def file_end(self, positions: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
        """The end (exclusive) of the file holding each position."""
        return self.file_starts[np.searchsorted(self.file_starts, positions, side="right")]

    def file_start(self, position: int) -> int:
        return int(self.file_starts[np.searchsorted(self.file_starts, position, side="right") - 1])


def token_string(tokens: Sequence[int]) -> str:
    """The automaton's spelling of a token sequence: one character per token id."""
    return "".join(map(chr, tokens))


def build_tables(
    docs: Sequence[TokenArray],
    min_match: int,
    key_order: int,
    window: int,
    progress: Progress | None = None,
) -> CorpusTables:
    """Index `docs` (one token array per file; n-grams never cross two of them)."""
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    file_starts = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=file_starts[1:])
    tokens = (
        np.concatenate([np.asarray(d, dtype=np.int32) for d in docs])
        if docs
        else np.zeros(0, np.int32)
    )
    if len(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= MAX_TOKEN):
        raise ValueError(f"token ids must lie in [0, {MAX_TOKEN})")
    if len(tokens) >= 2**31:
        raise ValueError("corpus too large: positions must fit in int32")
    start_of = np.repeat(file_starts[:-1], lengths)  # file start of every position
    end_of = np.repeat(file_starts[1:], lengths)
    pos = np.arange(len(tokens), dtype=np.int64)

    if progress:
        progress("sorting contexts", 0, None)
    rank = _context_ranks(tokens, start_of, window)
    is_row = (pos + 1 < end_of) & (pos - start_of + 1 >= min_match)
    row_pos = pos[is_row]
    rows = row_pos[np.argsort(rank[row_pos], kind="stable")]
    del rank

    # cols[j][i] = the token j places before row i's end, -1 past its file start.
    row_start = start_of[rows]
    cols = [
        np.where(rows - j >= row_start, tokens[np.maximum(rows - j, 0)], -1)
        for j in range(key_order)
    ]
    # lcp[i]: tokens of context rows i-1 and i share (at most key_order).
    lcp = np.zeros(len(rows), dtype=np.int32)
    alive = np.zeros(len(rows), dtype=bool)
    alive[1:] = True
    for c in cols:
        alive[1:] &= (c[1:] == c[:-1]) & (c[1:] >= 0)
        lcp += alive

    automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
    add = automaton.add_word
    los, his, lens = [], [], []
    n_groups = 0
    total_keys = sum(
        int(np.count_nonzero((lcp < k) & (cols[k - 1] >= 0)))
        for k in range(min_match, key_order + 1)
    )
    for k in range(min_match, key_order + 1):
        breaks = np.flatnonzero(lcp < k)  # first rows of k-groups, and rows too short for k
        lo = breaks[cols[k - 1][breaks] >= 0]
        nxt = np.append(breaks, len(rows))
        hi = nxt[np.searchsorted(nxt, lo, side="right")]
        grams = np.stack([cols[j][lo] for j in range(k - 1, -1, -1)], axis=1).astype("<u4")
        text = grams.tobytes().decode("utf-32-le", "surrogatepass")
        for i in range(len(lo)):
            add(text[i * k : (i + 1) * k], n_groups + i)
            if progress and (n_groups + i) % 200_000 == 0:
                progress("indexing n-grams", n_groups + i, total_keys)
        n_groups += len(lo)
        los.append(lo)
        his.append(hi)
        lens.append(np.full(len(lo), k, dtype=np.int8))
    if progress:
        progress("indexing n-grams", n_groups, total_keys)
    automaton.make_automaton()
    return CorpusTables(
        tokens=tokens,
        file_starts=file_starts,
        rows=rows.astype(np.int32),
        group_lo=np.concatenate(los).astype(np.int32) if los else np.zeros(0, np.int32),
        group_hi=np.concatenate(his).astype(np.int32) if his else np.zeros(0, np.int32),
        group_len=np.concatenate(lens) if lens else np.zeros(0, np.int8),
        automaton=automaton,
    )


def _context_ranks(
    tokens: TokenArray, start_of: npt.NDArray[np.int64], window: int
) -> npt.NDArray[np.int64]:
    """rank[e] orders positions by reversed context of `window` tokens (equal contexts,
    equal ranks); prefix doubling, stopping early once every rank is distinct."""
    n = len(tokens)
    pos = np.arange(n, dtype=np.int64)
    rank = tokens.astype(np.int64) + 1
    h = 1
    while h < window:
        prev = pos - h
        second = np.where(prev >= start_of, rank[np.maximum(prev, 0)], 0)
        key = rank * (int(rank.max(initial=0)) + 1) + second
        _, inverse = np.unique(key, return_inverse=True)
        rank = inverse.reshape(-1).astype(np.int64) + 1
        h *= 2
        if int(rank.max(initial=0)) == n:
            break  # all distinct: longer contexts cannot reorder anything
    return rank


# Saving: plain arrays, plus the automaton's pickle (read back only through `_AutomatonOnly`).
ARRAY_FIELDS = ("tokens", "file_starts", "rows", "group_lo", "group_hi", "group_len")


def tables_to_arrays(tables: CorpusTables) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {name: getattr(tables, name) for name in ARRAY_FIELDS}
    blob = pickle.dumps(tables.automaton, protocol=pickle.HIGHEST_PROTOCOL)
    arrays["automaton"] = np.frombuffer(blob, dtype=np.uint8)
    return arrays


def tables_from_arrays(arrays: dict[str, np.ndarray]) -> CorpusTables:
    """Rebuild tables from `tables_to_arrays` output; ValueError if anything is off."""
    dtypes = {
        "tokens": np.int32,
        "file_starts": np.int64,
        "rows": np.int32,
        "group_lo": np.int32,
        "group_hi": np.int32,
        "group_len": np.int8,
    }
    for name, dtype in dtypes.items():
        arr = arrays.get(name)
        if arr is None or arr.dtype != dtype or arr.ndim != 1:
            raise ValueError(f"bad or missing array {name!r}")
    automaton = _AutomatonOnly(io.BytesIO(arrays["automaton"].tobytes())).load()
    if (
        not isinstance(automaton, ahocorasick.Automaton)
        or automaton.kind != ahocorasick.AHOCORASICK
    ):
        raise ValueError("bad automaton")
    tables = CorpusTables(automaton=automaton, **{name: arrays[name] for name in dtypes})
    n_rows, n_tok = len(tables.rows), len(tables.tokens)
    n_groups = len(tables.group_lo)
    if (
        len(tables.group_hi) != n_groups
        or len(tables.group_len) != n_groups
        or len(automaton) != n_groups
        or tables.file_starts[0] != 0
        or tables.file_starts[-1] != n_tok
        or (n_rows and (tables.rows.min() < 0 or tables.rows.max() >= n_tok))
        or (n_groups and (tables.group_lo.min() < 0 or tables.group_hi.max() > n_rows))
    ):
        raise ValueError("inconsistent tables")
    return tables


class _AutomatonOnly(pickle.Unpickler):
    """An unpickler that can build nothing but an ahocorasick.Automaton."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) == ("ahocorasick", "Automaton"):
            return ahocorasick.Automaton
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a corpus cache")
