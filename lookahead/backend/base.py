"""The seams between a model and what uses it: what a verifier must do for the engine
(`Verifier`), and what the server and the API read of a model's vocabulary (`Vocabulary`).

The engine only ever talks to this protocol, so a fake backend with known next-token
distributions can prove the acceptance rule exact, and a second real backend could follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lookahead.core.draft import Draft
from lookahead.core.tokens import TokenArray

Logits = npt.NDArray[np.float32]


class LogitRows(Protocol):
    """Logits of one verify step: row 0 is the root, row i + 1 is draft node i.

    Rows are read lazily (acceptance only touches the rows on the path it walks) and are
    valid until the next call into the verifier.
    """

    def __getitem__(self, row: int) -> Logits: ...


class Verifier(Protocol):
    """A model with a KV cache that can score a draft tree in one evaluation.

    State: `n_past` tokens are in the KV cache. The root of each step, the last accepted
    token, is not in it yet: `verify` decodes root + draft together, `commit` keeps the
    root and the accepted path (as if they had been decoded one by one) and drops the rest.
    """

    n_vocab: int
    n_ctx: int
    n_batch: int  # most tokens one verify may decode: the root + the draft
    max_branches: int  # most leaves a draft may have (one sequence id each)

    @property
    def n_past(self) -> int:
        """Tokens committed to the KV cache."""
        ...

    @property
    def n_used(self) -> int:
        """Cache cells in use: n_past plus any the backend keeps aside."""
        ...

    def reset(self) -> None:
        """Forget everything in the KV cache."""
        ...

    def reuse(self, tokens: Sequence[int]) -> int:
        """The prompt cache: keep the committed cells of the longest common prefix of the
        cache and `tokens` (with KV shift, and cached runs moved to follow it), drop every
        other cell it may; returns the count kept, the first ones of `tokens` (0: the cache
        is empty)."""
        ...

    @property
    def shifted(self) -> int:
        """Of the tokens the last `reuse` kept, those moved to new positions (KV shift)."""
        ...

    @property
    def refilled(self) -> int:
        """Of the tokens the last `reuse` kept, new ones it decoded to put moved runs after
        them (KV shift): prefilled, not cached."""
        ...

    def prefill(self, tokens: TokenArray) -> None:
        """Decode `tokens` into the KV cache (no logits needed)."""
        ...

    def verify(self, root: int, draft: Draft) -> LogitRows:
        """Decode the root and every draft node in one batch; logits for all of them."""
        ...

    def commit(self, draft: Draft, accepted: list[int]) -> None:
        """Keep root + the accepted node path (`accepted`, root-to-leaf order) in the cache."""
        ...

    def truncate(self, n_past: int) -> None:
        """Keep only the first `n_past` committed tokens (self-tests verify again from there)."""
        ...

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens."""
        ...

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (empty for control tokens)."""
        ...


class Vocabulary(Protocol):
    """A model's tokenizer and file, as the server reads them (prompts, `/tokenize`,
    `/detokenize`, logit bias, `/props`): a second backend provides these and the routes
    need nothing else of it."""

    n_vocab: int
    path: Path  # the model file (`/props`' model_path)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """`text`'s tokens; `add_special`: BOS where the model wants one; `parse_special`:
        control tokens written in the text (<|fim_prefix|>) read as such."""
        ...

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (empty for control tokens)."""
        ...

    def special_text(self, token: int) -> str:
        """A control token written out (<|fim_prefix|>), as llama.cpp echoes a prompt."""
        ...

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value (None when the file has none)."""
        ...

    def is_eog(self, token: int) -> bool:
        """Whether the token ends a generation (EOS, EOT, ...)."""
        ...

    def eot(self) -> int:
        """The token that ends a turn (EOT, else EOS): where an editor's answer ends."""
        ...
