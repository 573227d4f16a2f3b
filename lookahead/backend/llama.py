"""llama.cpp backend: the ONLY module that imports `llama_cpp`.

It loads a GGUF through the low-level API, tokenizes, and verifies a whole draft tree in
one `llama_decode`. Tree batch layout (each node is one batch entry at position
n_past + depth; every branch, root to leaf, is one sequence id):

     depth:        0        1        2        3
     tokens:     [root] ── [a] ──── [b] ──── [c]        leaf c  -> seq 0
                      └─── [a'] ─── [d]                 leaf d  -> seq 1
     entries:    root{0..S-1}  a{0}  b{0}  c{0}  a'{1}  d{1}

Entries go in depth-first preorder (children best-first) and leaves are numbered left to
right, so the leaves below any node are a range of seq ids (`tree_layout.TreeLayout`, pure
numpy, computes this layout; its tests check these properties on random trees).

llama.cpp builds the attention mask from the FIRST seq id of each entry and the cells that
carry it, so every sequence 0..S-1 must see the whole committed prefix. Invariant between
steps: every committed cell carries all S seq ids; the only other cells are "parked" ones,
which carry just the spare id S that no batch ever uses, so nobody attends to them. The
root carries all S ids (the batch validator wants coupled sequences to stay equal).

Why park instead of free: llama.cpp's CPU flash attention (which is what makes batched
logits bit-identical to one-token decoding) sums the live cells in cache order, and a freed
cell before a live one is refilled by a later token, changing that order and moving logits
by up to ~0.6. Cells are taken in batch order, so with the preorder layout, for an accepted
path ending at x (leaves below x = seq range [lo, hi], keep = lo):
  1. branches left of x (seq < lo) lie before x: park their cells (cp to S, rm);
  2. every other branch (seq > lo) lies after x: free its cells; keep's cells deeper
     than x too;
  3. copy keep's accepted cells to every other sequence id.
Nothing is recomputed: the accepted cells hold exactly the K/V that one-by-one decoding
would have produced. Parked cells cost capacity (`n_used`) until the next reset; with
best-first children the accepted path is usually leftmost and parks nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp as ll
import numpy as np

from lookahead.backend.base import Logits
from lookahead.backend.tree_layout import TreeLayout
from lookahead.core.draft import Draft
from lookahead.core.tokens import TokenArray
from lookahead.errors import BackendError, ConfigError


@dataclass(frozen=True)
class BackendConfig:
    n_ctx: int = 8192  # context length in tokens (prompt + output + one draft)
    n_batch: int = 512  # most tokens per llama_decode (prefill chunks, largest draft + 1)
    n_threads: int = 0  # 0 = every CPU this process may run on
    max_branches: int = 16  # sequence ids, i.e. most leaves in one draft tree (at most n_batch - 1)
    repack: bool = True  # llama.cpp's repacked CPU weights (its default; faster)
    # Flash attention on: with it, batched logits match one-token decoding bit for bit on
    # batch-invariant models (without it they do not). Its result depends on the ORDER of
    # the live cells, which is why commit() never leaves a hole before a live cell.
    flash_attn: bool = True

    def __post_init__(self) -> None:
        if self.n_batch < 2:
            raise ConfigError(f"n_batch must be >= 2 (the root and one draft token), got {self.n_batch}")


_LOG_KEEP = 20
_log_lines: list[str] = []


@ll.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp writes a lot to stderr by default; keep the last lines so an error can
    # quote them, and print nothing.
    _log_lines.append(text.decode("utf-8", "replace"))
    if len(_log_lines) > _LOG_KEEP:
        del _log_lines[0]


_backend_ready = False


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
        ll.llama_backend_init()
        _backend_ready = True


def system_info() -> str:
    """llama.cpp's own line on its build: the CPU features it was compiled for, its backends."""
    _init_backend()
    raw = ll.llama_print_system_info()
    return (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)).strip()


def build_info() -> str:
    """The binding's version and llama.cpp's system info: what a probe verdict depends on."""
    return f"llama-cpp-python {ll.__version__}; {system_info()}"


def _last_log_error() -> str:
    lines = [ln.strip() for ln in _log_lines if ln.strip() and ln.strip() != "."]
    return lines[-1] if lines else "no details from llama.cpp"


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class _Batch:
    """A llama_batch whose arrays are numpy buffers we own, so filling it is vector work."""

    def __init__(self, capacity: int, n_seq: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros((capacity, n_seq), dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        row_ptr = ctypes.POINTER(ctypes.c_int32)
        base = self.seq.ctypes.data
        self._rows = (row_ptr * capacity)(
            *[ctypes.cast(base + i * n_seq * 4, row_ptr) for i in range(capacity)]
        )
        # ctypes pointers into our arrays (the binding's stubs type these fields as arrays)
        st: Any = ll.llama_batch()
        st.token = self.token.ctypes.data_as(ctypes.POINTER(ll.llama_token))
        st.embd = ctypes.POINTER(ctypes.c_float)()
        st.pos = self.pos.ctypes.data_as(ctypes.POINTER(ll.llama_pos))
        st.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        st.seq_id = ctypes.cast(self._rows, ctypes.POINTER(ctypes.POINTER(ll.llama_seq_id)))
        st.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.struct = st

    def fill_tree(self, layout: TreeLayout, n_past: int) -> None:
        """Entries 1.. from `layout` (entry 0, the root, is the caller's)."""
        for e, node in enumerate(layout.order, start=1):
            lo, hi = layout.leaf_range[node]
            self.token[e] = layout.tokens[node]
            self.pos[e] = n_past + layout.depth[node]
            self.n_seq_id[e] = hi - lo + 1
            self.seq[e, : hi - lo + 1] = np.arange(lo, hi + 1, dtype=np.int32)


class _Rows:
    """Zero-copy views of the logits rows of the last decode."""

    def __init__(self, ctx: ll.llama_context_p, n_vocab: int, n_rows: int, order: np.ndarray | None) -> None:
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._n_rows = n_rows
        self._order = order  # row -> batch entry (the batch is in depth-first order)

    def __getitem__(self, row: int) -> Logits:
        if not 0 <= row < self._n_rows:
            raise IndexError(row)
        entry = row if self._order is None else int(self._order[row])
        ptr = ll.llama_get_logits_ith(self._ctx, entry)
        if not ptr:
            raise BackendError(f"llama.cpp returned no logits for row {row}")
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))


class LlamaVocab:
    """A GGUF model's vocabulary and metadata: tokenize, detokenize, chat template.

    With `vocab_only` only the vocabulary is read (no weights, well under a second even
    for big models), so the CLI can check that a prompt fits the context before it loads
    the model.
    """

    def __init__(self, path: str | Path, *, vocab_only: bool = True, repack: bool = True) -> None:
        _init_backend()
        self.path = Path(path)
        mparams = ll.llama_model_default_params()
        mparams.use_extra_bufts = repack
        mparams.vocab_only = vocab_only
        _log_lines.clear()
        model = ll.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not model:
            raise BackendError(f"llama.cpp could not load {self.path}: {_last_log_error()}")
        self._model = model
        self._vocab = ll.llama_model_get_vocab(model)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self._vocab))
        self.n_ctx_train = int(ll.llama_model_n_ctx_train(model))
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}

    # ---- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_model", None):
            ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        self.close()

    # ---- vocabulary -----------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = ll.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = ll.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            piece = buf.raw[:n]
            self._pieces[token] = piece
        return piece

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(ll.llama_vocab_is_eog(self._vocab, token))
        return eog

    def meta(self, key: str) -> str | None:
        size = 1 << 16
        buf = ctypes.create_string_buffer(size)
        n = ll.llama_model_meta_val_str(self._model, key.encode(), buf, size)
        if n < 0:
            return None
        if n >= size:
            buf = ctypes.create_string_buffer(n + 1)
            ll.llama_model_meta_val_str(self._model, key.encode(), buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    # Fill-in-the-middle tokens, as the GGUF vocabulary names them (e.g. Qwen2.5-Coder's
    # <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>); None where the model has none.
    def fim_pre(self) -> int | None:
        return self._token_or_none(ll.llama_vocab_fim_pre(self._vocab))

    def fim_suf(self) -> int | None:
        return self._token_or_none(ll.llama_vocab_fim_suf(self._vocab))

    def fim_mid(self) -> int | None:
        return self._token_or_none(ll.llama_vocab_fim_mid(self._vocab))

    # The repository-level FIM pattern's tokens (Qwen2.5-Coder's <|repo_name|>, <|file_sep|>).
    def fim_rep(self) -> int | None:
        return self._token_or_none(ll.llama_vocab_fim_rep(self._vocab))

    def fim_sep(self) -> int | None:
        return self._token_or_none(ll.llama_vocab_fim_sep(self._vocab))

    @staticmethod
    def _token_or_none(token: int) -> int | None:
        return int(token) if token >= 0 else None  # llama.cpp says -1 (LLAMA_TOKEN_NULL)

    def special_text(self, token: int) -> str:
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_token_to_piece(self._vocab, token, buf, 256, 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Tokens of `messages` rendered with the model's own chat template (GGUF metadata)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.meta("tokenizer.chat_template")
        if not template:
            raise BackendError("this model has no chat template in its GGUF metadata")
        bos = ll.llama_vocab_bos(self._vocab)
        eos = ll.llama_vocab_eos(self._vocab)
        bos_text = self.special_text(bos) if bos >= 0 else ""
        eos_text = self.special_text(eos) if eos >= 0 else ""
        fmt = Jinja2ChatFormatter(template, eos_token=eos_text, bos_token=bos_text)
        text = fmt(messages=list(messages)).prompt  # type: ignore[arg-type]
        tokens = self.tokenize(text, add_special=False, parse_special=True)
        if ll.llama_vocab_get_add_bos(self._vocab) and bos >= 0 and (not tokens or tokens[0] != bos):
            tokens.insert(0, bos)
        return tokens

    def fingerprint(self) -> str:
        """A short id of the tokenizer (for caches keyed by tokenization)."""
        h = hashlib.sha256()
        h.update(str(self.n_vocab).encode())
        for tok in range(0, self.n_vocab, max(1, self.n_vocab // 4096)):
            h.update(self.token_bytes(tok))
            h.update(b"\0")
        return h.hexdigest()[:16]



def new_context(model: Any, config: BackendConfig, n_seq_max: int, threads: int) -> Any:
    """A llama.cpp context on loaded weights: one unified KV cache of `config.n_ctx` cells
    shared by `n_seq_max` sequence ids, batches of up to `config.n_batch` tokens."""
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = config.n_ctx
    cparams.n_batch = config.n_batch
    cparams.n_ubatch = config.n_batch
    cparams.n_seq_max = n_seq_max
    cparams.kv_unified = True
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    cparams.no_perf = True
    cparams.flash_attn_type = (
        ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if config.flash_attn else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    ctx = ll.llama_init_from_model(model, cparams)
    if not ctx:
        raise BackendError(f"llama.cpp could not create a context: {_last_log_error()}")
    return ctx


class KVContext:
    """A second context on a loaded backend's weights, with the few llama.cpp calls a
    multi-slot backend needs (`lookahead/backend/slots.py`), so that only this module
    imports llama_cpp. Decodes `_Batch`es; the KV calls are llama_memory_seq_*."""

    def __init__(self, backend: LlamaBackend, n_seq_max: int) -> None:
        self._ctx = new_context(backend._model, backend.config, n_seq_max, backend.n_threads)
        self.n_threads = backend.n_threads
        self._mem = ll.llama_get_memory(self._ctx)
        self.n_ctx = int(ll.llama_n_ctx(self._ctx))
        self.n_vocab = backend.n_vocab

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            ll.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        self.close()

    def set_threads(self, threads: int) -> None:
        """Decode with `threads` threads from the next decode on (the thread governor)."""
        ll.llama_set_n_threads(self._ctx, threads, threads)
        self.n_threads = threads

    def decode(self, batch: _Batch, n: int) -> None:
        batch.struct.n_tokens = n
        rc = ll.llama_decode(self._ctx, batch.struct)
        if rc != 0:
            raise BackendError(f"llama_decode failed ({rc}): {_last_log_error()}")

    def rows(self, n_rows: int, order: np.ndarray) -> _Rows:
        """Logits rows of the last decode: row r is batch entry order[r]."""
        return _Rows(self._ctx, self.n_vocab, n_rows, order)

    def seq_rm(self, seq: int, p0: int, p1: int) -> None:
        ll.llama_memory_seq_rm(self._mem, seq, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        ll.llama_memory_seq_cp(self._mem, src, dst, p0, p1)

    def seq_pos_max(self, seq: int) -> int:
        """The last position `seq` holds a cell at, -1 if none."""
        return int(ll.llama_memory_seq_pos_max(self._mem, seq))

    def clear(self) -> None:
        ll.llama_memory_clear(self._mem, True)


class LlamaBackend(LlamaVocab):
    """A GGUF model and one context, ready for tree-shaped verify batches."""

    def __init__(self, path: str | Path, config: BackendConfig | None = None) -> None:
        self.config = config = config or BackendConfig()
        super().__init__(path, vocab_only=False, repack=config.repack)
        model = self._model

        # A draft has at most n_batch - 1 nodes, so no more leaves; and llama.cpp aborts the
        # process (an assertion on its output buffer) when n_batch < n_seq_max.
        self.max_branches = max(1, min(config.max_branches, config.n_batch - 1))
        threads = config.n_threads or default_threads()
        # one more id than branches: the last one parks rejected cells (see commit)
        try:
            ctx = new_context(model, config, self.max_branches + 1, threads)
        except BackendError:
            ll.llama_model_free(model)
            self._model = None  # freed: close() must not free it again
            raise
        self._ctx = ctx
        self._mem = ll.llama_get_memory(ctx)
        self.n_ctx = int(ll.llama_n_ctx(ctx))
        self.n_batch = config.n_batch
        self.n_threads = threads
        self._park = self.max_branches
        self._layout: TreeLayout | None = None
        self.parked = 0
        self._batch = _Batch(self.n_batch, self.max_branches)
        self._all_seqs = np.arange(self.max_branches, dtype=np.int32)
        self.n_past = 0

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            ll.llama_free(self._ctx)
            self._ctx = None
        super().close()

    # ---- KV cache and decoding ------------------------------------------------------
    def reset(self) -> None:
        ll.llama_memory_clear(self._mem, True)
        self.n_past = 0
        self.parked = 0

    def _decode(self, n: int) -> None:
        self._batch.struct.n_tokens = n
        rc = ll.llama_decode(self._ctx, self._batch.struct)
        if rc != 0:
            raise BackendError(f"llama_decode failed ({rc}): {_last_log_error()}")

    def prefill(self, tokens: TokenArray) -> None:
        b = self._batch
        tokens = np.asarray(tokens, dtype=np.int32)
        if self.n_past + len(tokens) + 1 > self.n_ctx:
            raise BackendError(f"{self.n_past + len(tokens)} tokens do not fit a context of {self.n_ctx}")
        start = self.n_past
        for lo in range(0, len(tokens), self.n_batch):
            chunk = tokens[lo : lo + self.n_batch]
            n = len(chunk)
            b.token[:n] = chunk
            b.pos[:n] = np.arange(self.n_past, self.n_past + n, dtype=np.int32)
            b.n_seq_id[:n] = 1
            b.seq[:n, 0] = 0
            b.logits[:n] = 0
            self._decode(n)
            self.n_past += n
        # every sequence id shares the committed prefix (see the module docstring)
        for s in range(1, self.max_branches):
            ll.llama_memory_seq_cp(self._mem, 0, s, start, -1)

    @property
    def n_used(self) -> int:
        """KV cells in use: the committed tokens plus parked rejected cells."""
        return self.n_past + self.parked

    def verify(self, root: int, draft: Draft) -> _Rows:
        n = len(draft) + 1
        if n > self.n_batch:
            raise BackendError(f"a draft of {n - 1} nodes exceeds n_batch {self.n_batch}")
        if self.n_used + n > self.n_ctx:
            raise BackendError("the draft does not fit in the context")
        b = self._batch
        b.token[0] = root
        b.pos[0] = self.n_past
        b.logits[:n] = 1
        b.n_seq_id[0] = self.max_branches
        b.seq[0, : self.max_branches] = self._all_seqs
        if n > 1:
            self._layout = TreeLayout(draft, self.max_branches)
            b.fill_tree(self._layout, self.n_past)
            rows = self._layout.rows
        else:
            self._layout = None
            rows = None
        self._decode(n)
        return _Rows(self._ctx, self.n_vocab, n, rows)

    def commit(self, draft: Draft, accepted: list[int]) -> None:
        mem = self._mem
        base = self.n_past  # the root's position
        m = len(accepted)
        layout = self._layout
        if layout is None:
            pass
        elif m == 0:
            # every draft cell sits after the root's: freeing them leaves no hole. Remove by
            # branch id, never with -1, which would also free parked cells past the root.
            for s in range(layout.n_leaves):
                ll.llama_memory_seq_rm(mem, s, base + 1, -1)
        else:
            x = accepted[-1]
            lo, hi = layout.leaf_range[x]
            keep = lo
            for s in range(layout.n_leaves):
                if s < lo:
                    # cells of branches left of x lie BEFORE x in the cache: park them
                    # under the unused id (alive, masked for everyone) instead of
                    # leaving holes (see the module docstring)
                    ll.llama_memory_seq_cp(mem, s, self._park, base + 1, -1)
                if s != keep:
                    ll.llama_memory_seq_rm(mem, s, base + 1, -1)
            # x's own descendants on the kept branch lie after x: free them
            ll.llama_memory_seq_rm(mem, keep, base + m + 1, -1)
            # the accepted cells become shared by every sequence id again
            for s in range(self.max_branches):
                if s != keep:
                    ll.llama_memory_seq_cp(mem, keep, s, base + 1, base + m + 1)
            self.parked += layout.parked_before(x, m)
        self.n_past = base + m + 1

    def truncate(self, n_past: int) -> None:
        """Drop every cell at position >= n_past, parked ones too (tests, self-tests)."""
        ll.llama_memory_seq_rm(self._mem, -1, n_past, -1)
        self.n_past = n_past
        self.parked = 0

    def set_threads(self, threads: int) -> None:
        """Decode with `threads` threads from the next decode on (the thread governor)."""
        ll.llama_set_n_threads(self._ctx, threads, threads)
        self.n_threads = threads

    def measure_cost(self, sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), repeats: int = 2) -> dict[int, float]:
        """Seconds for one decode of n chained tokens at the current position, per n (the
        fastest of `repeats` rounds).

        Rounds visit every size once, in a shuffled order (fixed seed), and the first round
        only warms caches: a machine that slows down or speeds up during the measurement
        (another process, frequency scaling) then moves every size alike, instead of
        making the sizes measured last look dearer than the rest. The fastest round, not the
        median: other processes only ever add time, and small decodes suffer most (a stalled
        thread holds every step at llama.cpp's barrier), so a median taken in a noisy minute
        made t(1) 35% dearer and the whole curve look flatter than it is. The curve is the
        idle machine's; the controller's scale follows how fast it runs from step to step.
        """
        b = self._batch
        start = self.n_past
        todo = [int(n) for n in sizes if n <= self.n_batch and start + n <= self.n_ctx]
        times: dict[int, list[float]] = {n: [] for n in todo}
        rng = np.random.default_rng(0)
        for rnd in range(repeats + 1):
            for n in rng.permutation(todo).tolist():
                b.token[:n] = np.arange(n, dtype=np.int32) % self.n_vocab
                b.pos[:n] = np.arange(start, start + n, dtype=np.int32)
                b.n_seq_id[:n] = 1
                b.seq[:n, 0] = 0
                b.logits[:n] = 1
                t0 = time.perf_counter()
                self._decode(n)
                seconds = time.perf_counter() - t0
                ll.llama_memory_seq_rm(self._mem, -1, start, -1)
                if rnd:
                    times[n].append(seconds)
        return {n: float(np.min(times[n])) for n in todo}
