"""llama.cpp backend: with `grammar.py` (constrained output), the only module that imports `llama_cpp`.

It loads a GGUF through the low-level API, tokenizes, and decodes batches: `KVContext` is a
llama.cpp context with the few calls the KV cache manager needs (decode, the
`llama_memory_seq_*` calls); `LlamaBackend` is a model with one context and one `KVSlot` over
it (`lookahead/backend/kv_cache.py`: the tree batch layout, the commit and park rule and the
prompt cache, written once, in pure numpy), so a whole draft tree is verified in one
`llama_decode`. The multi-slot context (`lookahead/backend/slots.py`) asks the backend for a
second `KVContext` on the same weights and runs several `KVSlot`s in it.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp as ll
import numpy as np

from lookahead.backend import decode_cost, kv_snapshot
from lookahead.backend.base import Logits
from lookahead.backend.config import BackendConfig, default_threads
from lookahead.backend.kv_cache import BatchArrays, KVSlot
from lookahead.backend.llama_batch import Batch as _Batch
from lookahead.backend.llama_context import ABORTED, decode_stoppable, new_context
from lookahead.core.draft import Draft
from lookahead.core.tokens import TokenArray
from lookahead.errors import BackendError, Interrupted, utf8
from lookahead.models.chat_template import ChatTemplate

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
        data = utf8(text)  # UserError for a lone surrogate
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

    def eot(self) -> int:  # the end of a turn (EOT, else EOS): where an editor's answer ends
        return next(int(t) for t in (ll.llama_vocab_eot(self._vocab), ll.llama_vocab_eos(self._vocab), 0) if t >= 0)

    @staticmethod
    def _token_or_none(token: int) -> int | None:
        return int(token) if token >= 0 else None  # llama.cpp says -1 (LLAMA_TOKEN_NULL)

    def special_text(self, token: int) -> str:
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_token_to_piece(self._vocab, token, buf, 256, 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")

    def chat_template(self, source: str | None = None) -> ChatTemplate:
        """`source` (default: the model's own template, from its GGUF metadata), compiled
        with this vocabulary's BOS and EOS text, which templates write themselves."""
        source = source or self.meta("tokenizer.chat_template")
        if not source:
            raise BackendError("this model has no chat template in its GGUF metadata")
        ids = ll.llama_vocab_bos(self._vocab), ll.llama_vocab_eos(self._vocab)
        bos, eos = (self.special_text(t) if t >= 0 else "" for t in ids)
        return ChatTemplate(source, bos, eos)

    def chat_tokens(self, text: str) -> list[int]:
        """Tokens of a rendered chat prompt: its special tokens read as such, and BOS first
        when the model wants one and the template did not write it."""
        tokens = self.tokenize(text, add_special=False, parse_special=True)
        bos = ll.llama_vocab_bos(self._vocab)
        if ll.llama_vocab_get_add_bos(self._vocab) and bos >= 0 and (not tokens or tokens[0] != bos):
            tokens.insert(0, bos)
        return tokens

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Tokens of `messages` rendered with the model's own chat template (GGUF metadata)."""
        return self.chat_tokens(self.chat_template().render(messages))

    def fingerprint(self) -> str:
        """A short id of the tokenizer (for caches keyed by tokenization)."""
        h = hashlib.sha256()
        h.update(str(self.n_vocab).encode())
        for tok in range(0, self.n_vocab, max(1, self.n_vocab // 4096)):
            h.update(self.token_bytes(tok))
            h.update(b"\0")
        return h.hexdigest()[:16]


class KVContext:
    """A llama.cpp context with the calls the KV cache manager needs (`kv_cache.KVOps`):
    decode a batch, read its logits rows, and the llama_memory_seq_* calls. Made by
    `LlamaBackend` (its own context, and `new_kv` for a multi-slot one on the same weights)."""

    def __init__(
        self, model: Any, config: BackendConfig, n_seq_max: int, threads: int, n_vocab: int, unified: bool = True
    ) -> None:
        self._ctx = new_context(model, config, n_seq_max, threads, unified, _last_log_error)
        self.n_threads = threads
        self._mem = ll.llama_get_memory(self._ctx)
        # whether cells may move to new positions (KV shift): llama.cpp says so for its cache,
        # and the model must encode positions by RoPE (a rotation, which a move can redo)
        self.can_shift = bool(ll.llama_memory_can_shift(self._mem)) and (
            ll.llama_model_rope_type(model) != ll.LLAMA_ROPE_TYPE_NONE
        )
        self.n_ctx = int(ll.llama_n_ctx(self._ctx))
        self.n_vocab = n_vocab
        self.n_decoded = 0  # tokens decoded since the context was made (tests, the cache's gain)

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            ll.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        self.close()

    def new_batch(self, capacity: int, n_seq: int) -> BatchArrays:
        """Batch arrays this context can decode: `capacity` entries, up to `n_seq` ids each."""
        return _Batch(capacity, n_seq)

    def set_threads(self, threads: int) -> None:
        """Decode with `threads` threads from the next decode on (the thread governor)."""
        ll.llama_set_n_threads(self._ctx, threads, threads)
        self.n_threads = threads

    def decode(self, batch: BatchArrays, n: int, stop: Callable[[], bool] | None = None) -> None:
        """Decode the first `n` entries of `batch` (made by `new_batch`); with `stop`, a
        prefill's decode that it may stop part way (`llama_context.decode_stoppable`):
        Interrupted, the batch's cells dropped."""
        if not isinstance(batch, _Batch):
            raise TypeError("decode takes a batch made by KVContext.new_batch")
        batch.struct.n_tokens = n
        if stop is None:
            rc = ll.llama_decode(self._ctx, batch.struct)
        elif (rc := decode_stoppable(self._ctx, batch.struct, stop)) == ABORTED:
            raise Interrupted(f"a decode of {n} tokens was stopped part way")
        if rc != 0:
            raise BackendError(f"llama_decode failed ({rc}): {_last_log_error()}")
        self.n_decoded += n

    def rows(self, n_rows: int, order: np.ndarray | None) -> _Rows:
        """Logits rows of the last decode: row r is batch entry order[r] (None: entry r)."""
        return _Rows(self._ctx, self.n_vocab, n_rows, order)

    def seq_rm(self, seq: int, p0: int, p1: int) -> None:
        ll.llama_memory_seq_rm(self._mem, seq, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        ll.llama_memory_seq_cp(self._mem, src, dst, p0, p1)

    def seq_pos_max(self, seq: int) -> int:
        """The last position `seq` holds a cell at, -1 if none."""
        return int(ll.llama_memory_seq_pos_max(self._mem, seq))

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        if not self.can_shift:
            raise BackendError("this model's KV cells cannot move to new positions")
        ll.llama_memory_seq_add(self._mem, seq, p0, p1, delta)

    def clear(self) -> None:
        ll.llama_memory_clear(self._mem, True)

    @property
    def ctx(self) -> Any:
        return self._ctx


class LlamaBackend(LlamaVocab):
    """A GGUF model and one context, ready for tree-shaped verify batches: one `KVSlot`
    (branch ids 0..B-1, park id B) over the whole context."""

    def __init__(self, path: str | Path, config: BackendConfig | None = None) -> None:
        self.config = config = config or BackendConfig()
        super().__init__(path, vocab_only=False, repack=config.repack)

        # A draft has at most n_batch - 1 nodes, so no more leaves; and llama.cpp aborts the
        # process (an assertion on its output buffer) when n_batch < n_seq_max.
        self.max_branches = max(1, min(config.max_branches, config.n_batch - 1))
        threads = config.n_threads or default_threads()
        # one more id than branches: the last one parks rejected cells (see kv_cache.py)
        try:
            self._kv = self.new_kv(self.max_branches + 1, threads)
        except BackendError:
            ll.llama_model_free(self._model)
            self._model = None  # freed: close() must not free it again
            raise
        self.n_ctx = self._kv.n_ctx
        self.n_batch = config.n_batch
        self._batch = self._kv.new_batch(self.n_batch, self.max_branches)
        self._slot = KVSlot(self._kv, 0, self.max_branches, self.n_ctx)
        self._slot.shift_min = config.cache_reuse if self._kv.can_shift else 0  # KV shift
        self._slot.shift_barrier = self.fim_suf()  # the code after the cursor never moves
        self.tokens_shifted = 0  # prompt tokens kept by moving their cells, since loading
        # asked before each prefill chunk: True stops the prefill with Interrupted (a client left)
        self.interrupt: Callable[[], bool] | None = None
        # asked by llama.cpp while a prefill chunk decodes: True stops it part way with
        # Interrupted. Set only while idle (`server/idle.py`): a request waits for no chunk
        self.abort: Callable[[], bool] | None = None
        self.prefill_chunk: int | None = None  # prompt tokens per decode when set (`server/idle.py`)

    def new_kv(self, n_seq_max: int, threads: int | None = None, unified: bool = True) -> KVContext:
        """A context of its own on this model's weights (no second copy of the model), with
        this backend's configuration, for `n_seq_max` sequence ids (see `llama_context.new_context`)."""
        return KVContext(self._model, self.config, n_seq_max, threads or self.n_threads, self.n_vocab, unified)

    def close(self) -> None:
        kv = getattr(self, "_kv", None)
        if kv is not None:
            kv.close()
        super().close()

    @property
    def n_threads(self) -> int:
        return self._kv.n_threads

    def set_threads(self, threads: int) -> None:
        """Decode with `threads` threads from the next decode on (the thread governor)."""
        self._kv.set_threads(threads)

    # ---- KV cache and decoding ------------------------------------------------------
    @property
    def n_past(self) -> int:
        """Tokens committed to the KV cache."""
        return self._slot.n_past

    @property
    def parked(self) -> int:
        """Rejected cells kept masked (see kv_cache.py)."""
        return self._slot.parked

    @property
    def n_used(self) -> int:
        """KV cells in use: the committed tokens plus parked rejected cells."""
        return self._slot.n_used

    @property
    def cache_tokens(self) -> list[int]:
        """The tokens the committed cells hold, in order (the prompt cache compares them)."""
        return self._slot.cache_tokens

    @property
    def n_decoded(self) -> int:
        """Tokens decoded since the backend was made (how much a prompt cache saved)."""
        return self._kv.n_decoded

    def reset(self) -> None:
        self._kv.clear()
        self._slot.forget()

    def reuse(self, tokens: Sequence[int]) -> int:
        """The prompt cache (`KVSlot.reuse`; new tokens between moved runs decoded here)."""
        kept = self._slot.reuse(tokens, refill=self.prefill)
        self.tokens_shifted += self._slot.shifted
        return kept

    @property
    def shifted(self) -> int:  # of the tokens the last `reuse` kept, those moved (KV shift)
        return self._slot.shifted

    @property
    def refilled(self) -> int:  # of them, the new ones it decoded between moved runs
        return self._slot.refilled

    def snapshot(self) -> kv_snapshot.Snapshot | None:
        """The cached cells copied out, to `restore` later (`kv_snapshot.py`)."""
        return kv_snapshot.take(self._kv.ctx, self._slot)

    def restore(self, snap: kv_snapshot.Snapshot) -> None:
        kv_snapshot.put_back(self._kv.ctx, self._slot, snap)

    def _decode(self, n: int, stop: Callable[[], bool] | None = None) -> None:
        self._kv.decode(self._batch, n, stop)

    def prefill(self, tokens: TokenArray) -> None:
        tokens = np.asarray(tokens, dtype=np.int32)
        if self.n_used + len(tokens) + 1 > self.n_ctx:
            raise BackendError(f"{self.n_past + len(tokens)} tokens do not fit a context of {self.n_ctx}")
        step = min(self.n_batch, self.prefill_chunk or self.n_batch)
        for lo in range(0, len(tokens), step):
            if self.interrupt is not None and self.interrupt():
                raise Interrupted(f"prefill stopped after {lo} of {len(tokens)} tokens")
            chunk = tokens[lo : lo + step]
            self._slot.put_prefill(self._batch, 0, chunk)  # one id per entry: `abort` may stop it
            self._decode(len(chunk), self.abort)
            self._slot.prefilled(chunk)

    def verify(self, root: int, draft: Draft) -> _Rows:
        n = len(draft) + 1
        if n > self.n_batch:
            raise BackendError(f"a draft of {n - 1} nodes exceeds n_batch {self.n_batch}")
        order = self._slot.put_verify(self._batch, 0, root, draft)
        self._decode(n)
        return self._kv.rows(n, order if n > 1 else None)

    def commit(self, draft: Draft, accepted: list[int]) -> None:
        self._slot.commit(draft, accepted)

    def truncate(self, n_past: int) -> None:  # every cell at n_past or later, parked too (self-tests)
        self._slot.truncate(n_past)

    def measure_cost(self, sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), repeats: int = 2) -> dict[int, float]:
        """Seconds for one decode of n chained tokens at the current position, per n (the
        fastest of `repeats` rounds; see `decode_cost.measure`). The cache is left as it was."""
        start = self.n_past
        sizes = [int(n) for n in sizes if n <= self.n_batch and start + n <= self.n_ctx]
        return decode_cost.measure(self._batch, self._decode, lambda: self._kv.seq_rm(-1, start, -1),
                                   start, self.n_vocab, sizes, repeats)
