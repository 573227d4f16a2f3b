"""The corpus index against a brute-force reference, its file selection and its disk cache."""

from __future__ import annotations

import os
import pickle
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.core.draft import SOURCE_CORPUS
from lookahead.index.corpus import SHIPPED_CORPORA, CorpusError, CorpusIndex, CorpusParams
from lookahead.index.corpus_build import tables_to_arrays
from lookahead.index.corpus_files import (
    FORMAT_VERSION,
    cache_file,
    collect_files,
    content_key,
    read_cache,
    write_cache,
)
from lookahead.index.walk import best_paths

Path_ = tuple[list[int], list[float]]


def byte_tokens(text: str) -> list[int]:
    """A toy tokenizer: one token per UTF-8 byte."""
    return list(text.encode())


class CountingTokenizer:
    """byte_tokens, counting the calls (a cache hit must not tokenize anything)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> list[int]:
        self.calls += 1
        return byte_tokens(text)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def reference(
    docs: list[list[int]], stream: list[int], p: CorpusParams, max_depth: int, max_candidates: int
) -> list[Path_]:
    """Brute force: compare the stream's end with the context of every corpus position,
    keep the positions agreeing longest, and walk their continuations as a naive trie."""
    query = stream[::-1][: p.window]
    rows = []  # (reversed context, global position, agreement, doc, end)
    offset = 0
    for doc in docs:
        for e in range(len(doc)):
            if e + 1 < len(doc) and e + 1 >= p.min_match:
                ctx = doc[max(0, e - p.window + 1) : e + 1][::-1]
                rows.append((ctx, offset + e, common_prefix(query, ctx), doc, e))
        offset += len(doc)
    best = max((r[2] for r in rows), default=0)
    if best < p.min_match:
        return []
    block = sorted((r for r in rows if r[2] == best), key=lambda r: (r[0], r[1]))
    n = len(block)
    if n > p.max_positions:
        block = [block[(i * n) // p.max_positions] for i in range(p.max_positions)]
    conts = [tuple(doc[e + 1 : e + 1 + max_depth]) for _, _, _, doc, e in block]

    def step(
        prefix: tuple[int, ...], limit: int, floor: float
    ) -> list[tuple[int, float, tuple[int, ...]]]:
        j = len(prefix)
        nxt = Counter(c[j] for c in conts if len(c) > j and c[:j] == prefix)
        denom = sum(nxt.values()) + len(nxt) * (p.escape / (best + j))
        out = []
        for tok, c in sorted(nxt.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]:
            q = c / denom
            if q < floor:
                break
            out.append((tok, q, (*prefix, tok)))
        return out

    root: tuple[int, ...] = ()
    return best_paths(root, step, max_depth, max_candidates, p.min_p)


def as_paths(index: CorpusIndex, max_depth: int, max_candidates: int) -> list[Path_]:
    out = []
    for c in index.propose(max_depth, max_candidates):
        assert c.source == SOURCE_CORPUS
        assert len(c.tokens) == len(c.q) <= max_depth
        assert np.all((c.q > 0) & (c.q <= 1))
        out.append((c.tokens.tolist(), c.q.tolist()))
    return out


def same_paths(got: list[Path_], want: list[Path_]) -> bool:
    return [t for t, _ in got] == [t for t, _ in want] and all(
        np.array_equal(np.array(gq, np.float32), np.array(wq, np.float32))
        for (_, gq), (_, wq) in zip(got, want, strict=True)
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple:
    alphabet = draw(st.integers(2, 4))
    ids = draw(st.sampled_from([(0, 1, 2, 3), (7, 300, 55_300, 151_000)]))  # str widths
    token = st.integers(0, alphabet - 1).map(lambda i: ids[i])
    docs = draw(st.lists(st.lists(token, max_size=30), min_size=1, max_size=4))
    min_match = draw(st.integers(1, 3))
    key_order = draw(st.integers(min_match, 4))
    window = draw(st.sampled_from([w for w in (4, 8, 16) if w >= key_order]))
    params = CorpusParams(
        min_match=min_match,
        key_order=key_order,
        window=window,
        max_positions=draw(st.sampled_from([1, 2, 3, 5, 64])),
        escape=draw(st.sampled_from([0.5, 2.0])),
        min_p=draw(st.sampled_from([0.0, 0.01, 0.2])),
    )
    # The stream: random tokens, often ending with a piece of a corpus file.
    stream = draw(st.lists(token, max_size=12))
    doc: list[int] = draw(st.sampled_from(docs))
    copy_piece: bool = draw(st.booleans())
    if doc and copy_piece:
        i = draw(st.integers(0, len(doc) - 1))
        j = draw(st.integers(i, len(doc)))
        stream += doc[i:j]
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    return docs, params, stream, cuts, draw(st.integers(1, 8)), draw(st.integers(1, 4))


@settings(max_examples=400, deadline=None)
@given(cases())
def test_proposals_equal_brute_force(case: tuple) -> None:
    docs, params, stream, cuts, max_depth, max_candidates = case
    want = reference(docs, stream, params, max_depth, max_candidates)
    try:
        index = CorpusIndex.from_tokens(docs, params)
    except CorpusError:
        # Only a corpus with no position to answer from may be refused.
        assert all(len(d) <= params.min_match for d in docs)
        return
    # Observe the stream in chunks: the automaton's search state carries across calls.
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        index.observe(stream[a:b])
    assert len(index) == len(stream)
    got = as_paths(index, max_depth, max_candidates)
    assert same_paths(got, want), (got, want)


def test_token_ids_of_every_width() -> None:
    # Token ids below 256, below 65536 and above make str keys of different internal
    # widths; pyahocorasick's iter().set() crashes when those alternate, so this guards
    # against going back to it. Also checks large ids against the reference.
    rng = np.random.default_rng(0)
    ids = np.array([65, 1000, 70000, 151_000])
    docs = [ids[rng.integers(0, 4, 400)].tolist() for _ in range(5)]
    params = CorpusParams(min_match=2, key_order=3, window=8)
    index = CorpusIndex.from_tokens(docs, params)
    stream = ids[rng.integers(0, 4, 20_000)].tolist()
    for i, t in enumerate(stream):
        index.observe([t])
        if i % 997 == 0:
            got = as_paths(index, 6, 3)
            assert same_paths(got, reference(docs, stream[: i + 1], params, 6, 3))


def test_example_by_hand() -> None:
    docs = [[1, 2, 3, 4, 5], [9, 2, 3, 4, 6], [2, 3, 4, 5]]
    params = CorpusParams(min_match=2, key_order=2, window=8, escape=2.0)
    index = CorpusIndex.from_tokens(docs, params)
    index.observe([7, 1, 2, 3, 4])
    assert index.match()[0] == 4  # "1 2 3 4" agrees on 4 tokens with the first file only
    paths = as_paths(index, 3, 2)
    assert [t for t, _ in paths] == [[5]]
    q = 1 / (1 + 2.0 / 4)  # one occurrence, one continuation, agreement 4
    assert paths[0][1] == pytest.approx([q])
    index.observe([9])  # "4 9" never occurs
    assert index.propose(3, 2) == []


def test_longer_agreement_wins_over_counts() -> None:
    # "a b" is followed by x three times, but the stream agrees longer with the y case.
    docs = [[5, 1, 2, 10], [6, 1, 2, 10], [7, 1, 2, 10], [8, 8, 1, 2, 11]]
    index = CorpusIndex.from_tokens(docs, CorpusParams(min_match=2, key_order=2, window=8))
    index.observe([8, 8, 1, 2])
    assert as_paths(index, 1, 3)[0][0] == [11]
    index.reset()
    index.observe([0, 1, 2])
    assert [t for t, _ in as_paths(index, 1, 3)] == [[10], [11]]


def test_fresh_streams_are_independent() -> None:
    index = CorpusIndex.from_tokens(
        [[1, 2, 3, 4], [1, 2, 5, 6]], CorpusParams(min_match=2, key_order=2, window=4)
    )
    other = index.fresh()
    index.observe([1, 2, 3])
    assert other.propose(4, 2) == []
    other.observe([2, 5])
    assert as_paths(other, 4, 1)[0][0] == [6]
    assert as_paths(index, 4, 1)[0][0] == [4]
    assert other.tables is index.tables


def test_no_proposal_across_files() -> None:
    index = CorpusIndex.from_tokens(
        [[1, 2, 3], [4, 5, 6]], CorpusParams(min_match=2, key_order=2, window=4)
    )
    index.observe([2, 3])  # "2 3" ends the first file: nothing follows it there
    assert index.propose(4, 4) == []
    index.observe([4])  # "3 4" exists only across the file boundary
    assert index.propose(4, 4) == []


def test_bad_token_ids_are_refused() -> None:
    with pytest.raises(CorpusError):
        CorpusIndex.from_tokens([[1, 2, -1]])
    with pytest.raises(CorpusError):
        CorpusIndex.from_tokens([[1, 2, 0x110000]])


def test_params_are_checked() -> None:
    with pytest.raises(ValueError):
        CorpusParams(min_match=3, key_order=2)
    with pytest.raises(ValueError):
        CorpusParams(window=24)


# ---- the shipped corpora --------------------------------------------------------------


def test_shipped_corpora_draft_python_idioms(tmp_path: Path) -> None:
    assert (SHIPPED_CORPORA / "python").is_dir() and (SHIPPED_CORPORA / "markdown").is_dir()
    index = CorpusIndex.load_or_build([SHIPPED_CORPORA], byte_tokens, "bytes", tmp_path)
    index.observe(byte_tokens("import sys\n\n\nif __name__ == "))
    best = index.propose(12, 1)[0]
    assert bytes(best.tokens.tolist()) == b'"__main__":\n'
    index.reset()
    index.observe(byte_tokens("| Metric | Before | After |\n| --- "))
    assert bytes(index.propose(8, 1)[0].tokens.tolist()).startswith(b"| ---:")


# ---- which files are read -------------------------------------------------------------


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def test_file_selection(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "src" / "app.py", "print('app')\n")
    write(repo / "README.md", "# Title\n")
    write(repo / "Makefile", "all:\n\ttrue\n")
    write(repo / ".git" / "config.txt", "hidden folder\n")
    write(repo / ".env", "SECRET=1\n")
    write(repo / "node_modules" / "x.js", "skipped\n")
    write(repo / "env" / "pyvenv.cfg", "home = /usr\n")
    write(repo / "env" / "lib" / "site.py", "a virtualenv\n")
    write(repo / "pkg.egg-info" / "PKG-INFO.txt", "build output\n")
    write(repo / "image.png", b"\x89PNG\r\n")
    write(repo / "nul.py", b"print(1)\x00\n")
    write(repo / "latin1.txt", "caf\xe9\n".encode("latin-1"))
    write(repo / "big.txt", "x" * 1_000_001)
    (repo / "link.py").symlink_to(repo / "src" / "app.py")
    names = [f.name for f in collect_files([repo])]
    assert names == ["repo/Makefile", "repo/README.md", "repo/src/app.py"]


def test_total_size_cap(tmp_path: Path) -> None:
    for name in "abcd":
        write(tmp_path / "repo" / f"{name}.txt", name * 100)
    names = [f.name for f in collect_files([tmp_path / "repo"], max_total_bytes=250)]
    assert names == ["repo/a.txt", "repo/b.txt"]


def test_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="does not exist"):
        CorpusIndex.load_or_build([tmp_path / "nope"], byte_tokens, "bytes", tmp_path / "cache")


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"image.png": b"\x89PNG"},
        {"data.py": b"\x00\x01\x02"},
        {".hidden/a.py": "x = 1\n", "node_modules/b.js": "y\n"},
    ],
)
def test_folder_without_text_is_an_error(tmp_path: Path, files: dict[str, str | bytes]) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    for name, data in files.items():
        write(folder / name, data)
    with pytest.raises(CorpusError, match="no usable text"):
        CorpusIndex.load_or_build([folder], byte_tokens, "bytes", tmp_path / "cache")


def test_text_too_short_to_index_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "repo" / "a.txt", "x")
    with pytest.raises(CorpusError):
        CorpusIndex.load_or_build([tmp_path / "repo"], byte_tokens, "bytes", tmp_path / "cache")


# ---- the cache ------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write(
        tmp_path / "repo" / "a.py",
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    )
    write(tmp_path / "repo" / "docs" / "b.md", "# Notes\n\nThe add function returns the sum.\n")
    return tmp_path / "repo"


# min_p = 0: drafts run to the end of the file, so the tests can check whole lines.
FULL = CorpusParams(min_p=0.0)


def load(
    repo: Path, cache: Path, tok: CountingTokenizer, tokenizer_id: str = "bytes"
) -> CorpusIndex:
    return CorpusIndex.load_or_build([repo], tok, tokenizer_id, cache, params=FULL)


def draft(index: CorpusIndex, text: str) -> list[Path_]:
    index.reset()
    index.observe(byte_tokens(text))
    return as_paths(index, 24, 3)


def the_cache(cache: Path) -> Path:
    (path,) = cache.glob("corpus-*")
    return path


def test_cache_round_trip(repo: Path, tmp_path: Path) -> None:
    tok = CountingTokenizer()
    cache = tmp_path / "cache"
    built = load(repo, cache, tok)
    assert tok.calls == 2
    loaded = load(repo, cache, tok)
    assert tok.calls == 2  # from the cache: nothing tokenized
    assert loaded.files == built.files == ("repo/a.py", "repo/docs/b.md")
    for name in ("tokens", "file_starts", "rows", "group_lo", "group_hi", "group_len"):
        assert np.array_equal(getattr(loaded.tables, name), getattr(built.tables, name))
    for text in ("def sub(a, b):\n", "The add", "    return a"):
        assert draft(loaded, text) == draft(built, text) != []
    assert not list(cache.glob("*.tmp"))


def test_table_parameters_are_part_of_the_key(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tok = CountingTokenizer()
    load(repo, cache, tok)
    CorpusIndex.load_or_build([repo], tok, "bytes", cache, params=CorpusParams(min_p=0.5))
    assert tok.calls == 2  # min_p is read at proposal time: same tables
    CorpusIndex.load_or_build([repo], tok, "bytes", cache, params=CorpusParams(key_order=4))
    assert tok.calls == 4


def test_progress_is_reported(repo: Path, tmp_path: Path) -> None:
    seen: list[tuple[str, int, int | None]] = []
    CorpusIndex.load_or_build(
        [repo], byte_tokens, "bytes", tmp_path / "c", lambda *a: seen.append(a)
    )
    assert ("tokenizing corpus", 2, 2) in seen
    assert any(d == "indexing n-grams" for d, _, _ in seen)


def assert_rebuilt(repo: Path, cache: Path, before: bytes | None = None) -> None:
    tok = CountingTokenizer()
    index = load(repo, cache, tok)
    assert tok.calls == 2, "the damaged cache was used"
    assert draft(index, "def sub(a, b):\n")[0][0] == byte_tokens("    return a - b\n")
    if before is not None:
        assert the_cache(cache).read_bytes() != before
    load(repo, cache, tok)
    assert tok.calls == 2, "the rebuilt cache was not written back"


@pytest.mark.parametrize("keep", [0, 40, 100, -1])
def test_truncated_cache_is_rebuilt(repo: Path, tmp_path: Path, keep: int) -> None:
    cache = tmp_path / "cache"
    load(repo, cache, CountingTokenizer())
    path = the_cache(cache)
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[: len(data) // 2])
    assert_rebuilt(repo, cache)


@pytest.mark.parametrize("where", [0, 10, 20, 50, 60, 100, -1])
def test_tampered_cache_is_rebuilt(repo: Path, tmp_path: Path, where: int) -> None:
    # Offsets: magic, version, key, payload length, checksum, then payload bytes.
    cache = tmp_path / "cache"
    load(repo, cache, CountingTokenizer())
    path = the_cache(cache)
    data = bytearray(path.read_bytes())
    data[where] ^= 0x01
    path.write_bytes(bytes(data))
    assert_rebuilt(repo, cache, bytes(data))


class MakesFolder:
    """Unpickling this calls os.mkdir: what a hostile pickle could do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.path),))


def test_cache_with_foreign_pickle_is_not_trusted(repo: Path, tmp_path: Path) -> None:
    # A correctly checksummed file whose automaton is some other pickled object:
    # the restricted unpickler refuses it (nothing runs) and the index is rebuilt.
    cache = tmp_path / "cache"
    tok = CountingTokenizer()
    index = load(repo, cache, tok)
    arrays = tables_to_arrays(index.tables)
    marker = tmp_path / "ran"
    arrays["automaton"] = np.frombuffer(pickle.dumps(MakesFolder(marker)), dtype=np.uint8)
    arrays["files"] = np.frombuffer(b'["x"]', dtype=np.uint8)
    key = content_key(collect_files([repo]), "bytes", CorpusParams().table_key())
    write_cache(the_cache(cache), key, arrays)
    assert read_cache(the_cache(cache), key)[1] == "ok"
    assert_rebuilt(repo, cache)
    assert not marker.exists()


def test_changed_file_makes_the_cache_stale(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tok = CountingTokenizer()
    load(repo, cache, tok)
    stat = (repo / "a.py").stat()
    # Same size and mtime, different content: the key hashes contents.
    write(repo / "a.py", (repo / "a.py").read_text().replace("a - b", "b - a"))
    os.utime(repo / "a.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    index = load(repo, cache, tok)
    assert tok.calls == 4
    assert draft(index, "def sub(a, b):\n")[0][0] == byte_tokens("    return b - a\n")
    assert len(list(cache.iterdir())) == 1  # overwritten, not piled up
    write(repo / "new.txt", "another file\n")
    load(repo, cache, tok)
    assert tok.calls == 7


def test_other_tokenizer_does_not_reuse_the_cache(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tok = CountingTokenizer()
    load(repo, cache, tok, "vocab-a")
    load(repo, cache, tok, "vocab-b")
    assert tok.calls == 4
    # Even with the other tokenizer's file in its place, the key in the header differs.
    table_key = FULL.table_key()
    path_a = cache_file(cache, [repo], "vocab-a", table_key)
    path_a.write_bytes(cache_file(cache, [repo], "vocab-b", table_key).read_bytes())
    load(repo, cache, tok, "vocab-a")
    assert tok.calls == 6


def test_other_format_version_is_stale(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load(repo, cache, CountingTokenizer())
    path = the_cache(cache)
    data = bytearray(path.read_bytes())
    data[8:12] = (FORMAT_VERSION + 1).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    key = content_key(collect_files([repo]), "bytes", CorpusParams().table_key())
    assert read_cache(path, key)[0] is None
    assert_rebuilt(repo, cache)


def test_unwritable_cache_still_gives_an_index(repo: Path, tmp_path: Path) -> None:
    blocker = write(tmp_path / "file", "not a folder")
    index = CorpusIndex.load_or_build([repo], byte_tokens, "bytes", blocker / "cache")
    assert draft(index, "def sub(a, b):\n") != []
