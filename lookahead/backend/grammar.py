"""Grammars on the next token, with llama.cpp's own GBNF engine (its grammar sampler).

`Grammar(vocab, text)` parses a GBNF grammar once for a model's vocabulary (an invalid one
is a `GrammarError`, the parser's message quoted); calling it makes a fresh
`GrammarConstraint`, one per generation, which answers `lookahead.core.constraint`'s
protocol: `allowed(tokens)` runs the sampler's apply on a token-data array of just those
tokens and reads back which it set to -inf; `accept(token)` advances the grammar. The arrays
are made once per state and reused (numpy views of the C structs), so a check costs the
grammar's own work and a copy of the ids.

JSON schemas become GBNF in `lookahead.backend.json_schema`; a service parses grammars it
does not trust through `lookahead.backend.grammar_guard`.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import threading
from typing import Any

import llama_cpp as ll
import numpy as np
import numpy.typing as npt

from lookahead.backend.llama import LlamaVocab, _last_log_error, _log_lines
from lookahead.errors import BackendError, UserError

# llama_token_data, field for field: {int32 id; float logit; float p}
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert _TOKEN_DATA.itemsize == ctypes.sizeof(ll.llama_token_data)


class GrammarError(UserError):
    """A grammar or JSON schema that cannot be used: the message says what is wrong."""


class Grammar:
    """A GBNF grammar parsed for one model's vocabulary; calling it starts a fresh state."""

    def __init__(self, vocab: LlamaVocab, text: str, root: str = "root") -> None:
        if not text.strip():
            raise GrammarError("the grammar is empty")
        self._vocab = vocab  # keeps the model (and its vocabulary) alive as long as the grammar
        smpl, said = _parse(vocab, text, root)
        if not smpl:
            raise GrammarError(f"the grammar is not valid GBNF: {_parse_error(said)}")
        self._smpl = smpl

    @classmethod
    def from_sampler(cls, vocab: LlamaVocab, smpl: Any) -> Grammar:
        """A Grammar around a grammar sampler parsed elsewhere (it is freed with the Grammar)."""
        grammar = cls.__new__(cls)
        grammar._vocab = vocab
        grammar._smpl = smpl
        return grammar

    def __call__(self) -> GrammarConstraint:
        """A new state at the grammar's start (a copy of the parsed one: no parsing again)."""
        smpl = ll.llama_sampler_clone(self._smpl)
        if not smpl:
            raise BackendError("llama.cpp could not copy a grammar")
        return GrammarConstraint(smpl, self._vocab)

    def close(self) -> None:
        if getattr(self, "_smpl", None):
            ll.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self) -> None:
        self.close()


class GrammarConstraint:
    """One generation's grammar state (see the module's docstring); owns its sampler."""

    def __init__(self, smpl: Any, vocab: LlamaVocab) -> None:
        self._smpl = smpl
        self._vocab = vocab
        self._data = np.zeros(vocab.n_vocab, dtype=_TOKEN_DATA)
        self._array = ll.llama_token_data_array(
            data=self._data.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), size=0, selected=-1, sorted=False
        )
        self._one = np.zeros(1, dtype=np.int32)

    def allowed(self, tokens: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
        n = len(tokens)
        if n == 0:
            return np.zeros(0, dtype=bool)
        if n > len(self._data):
            raise BackendError(f"{n} tokens asked about, the vocabulary has {len(self._data)}")
        view = self._data[:n]
        view["id"] = tokens
        view["logit"] = 0.0
        arr = self._array
        arr.size = n
        arr.selected = -1
        arr.sorted = False
        ll.llama_sampler_apply(self._smpl, ctypes.byref(arr))
        return view["logit"] == 0.0  # the sampler sets what the grammar rejects to -inf

    def accept(self, token: int) -> None:
        # An end token ends the generation: nothing follows it to constrain (llama.cpp would
        # abort the process on one the grammar does not allow, so it is never passed on).
        if self._vocab.is_eog(token):
            return
        self._one[0] = token
        if not self.allowed(self._one)[0]:
            # llama.cpp throws through its C API on a token the grammar rejects (the process
            # ends): a bug upstream of here must fail this request, not the service
            raise BackendError(f"token {token} does not fit the grammar here")
        ll.llama_sampler_accept(self._smpl, token)

    def close(self) -> None:
        if getattr(self, "_smpl", None):
            ll.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self) -> None:
        self.close()


_stderr_lock = threading.Lock()


def _parse(vocab: LlamaVocab, text: str, root: str) -> tuple[Any, str]:
    """llama.cpp's grammar sampler for `text` (NULL when it does not parse), and what its
    parser wrote to stderr meanwhile: it reports a syntax error there, not to the log
    callback, so fd 2 goes to a file for the call (what it wrote on success is passed on)."""
    _log_lines.clear()
    with _stderr_lock, tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            smpl = ll.llama_sampler_init_grammar(vocab._vocab, text.encode("utf-8"), root.encode("utf-8"))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        said = tmp.read().decode("utf-8", "replace")
    if smpl and said:
        sys.stderr.write(said)
    return smpl, said


def _parse_error(said: str) -> str:
    """llama.cpp's words on why a grammar did not parse: the parser's message, else its log's."""
    marker = "error parsing grammar:"
    if marker in said:
        # "<func>: error parsing grammar: <what> at <rest of the text>\n\n<the grammar>\n"
        what = said.split(marker, 1)[1].split("\n\n", 1)[0].strip()
        if what.endswith(" at"):
            what += " the end of the grammar"
        return what if len(what) <= 200 else what[:200] + "..."
    lines = [ln.strip() for ln in _log_lines if ln.strip()]
    return lines[-1] if lines else _last_log_error()
