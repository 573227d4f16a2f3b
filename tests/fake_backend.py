"""A tiny model with known next-token distributions, for exactness tests without llama.cpp."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lookahead.draft import Draft
from lookahead.tokens import TokenArray


class FakeModel:
    """Logits depend on the last two tokens through a fixed random table.

    `batch_variant(n, used)`, if given, says whether a verify of n > 1 tokens with `used`
    cells in the cache moves its logits by one ulp, as llama.cpp's batched kernels do on
    some models (they switch with the batch and the cache size).
    """

    def __init__(
        self,
        n_vocab: int = 4,
        seed: int = 0,
        sharp: float = 1.5,
        n_ctx: int = 4096,
        n_batch: int = 512,
        batch_variant: Callable[[int, int], bool] | None = None,
    ) -> None:
        rng = np.random.default_rng(seed)
        self.table = (rng.standard_normal((n_vocab, n_vocab, n_vocab)) * sharp).astype(np.float32)
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.batch_variant = batch_variant
        self.max_branches = 8
        self.eog: set[int] = set()
        self.ctx: list[int] = []
        self.verified: list[int] = []  # nodes per verify call (for tests)

    # -- the model --------------------------------------------------------------------
    def logits(self, tokens: list[int]) -> np.ndarray:
        a = tokens[-2] if len(tokens) > 1 else 0
        b = tokens[-1] if tokens else 0
        return self.table[a, b]

    def probs(self, tokens: list[int]) -> np.ndarray:
        z = self.logits(tokens).astype(np.float64)
        e = np.exp(z - z.max())
        return e / e.sum()

    # -- the Verifier protocol --------------------------------------------------------
    @property
    def n_past(self) -> int:
        return len(self.ctx)

    @property
    def n_used(self) -> int:
        return len(self.ctx)

    def reset(self) -> None:
        self.ctx = []

    def prefill(self, tokens: TokenArray) -> None:
        self.ctx.extend(int(t) for t in tokens)

    def verify(self, root: int, draft: Draft) -> list[np.ndarray]:
        self.verified.append(len(draft))
        self._root = root
        base = [*self.ctx, root]
        rows = [self.logits(base)]
        for i in range(len(draft)):
            rows.append(self.logits(base + [int(draft.tokens[j]) for j in draft.path_to(i)]))
        if len(draft) and self.batch_variant is not None and self.batch_variant(len(draft) + 1, self.n_used):
            rows = [np.nextafter(r, np.float32(np.inf)) for r in rows]
        return rows

    def commit(self, draft: Draft, accepted: list[int]) -> None:
        self.ctx.append(self._root)  # the root of the last verify
        self.ctx.extend(int(draft.tokens[i]) for i in accepted)

    def truncate(self, n_past: int) -> None:
        del self.ctx[n_past:]

    def is_eog(self, token: int) -> bool:
        return token in self.eog

    def token_bytes(self, token: int) -> bytes:
        return bytes([97 + token])


class TreeDrafter:
    """Deterministic pseudo-random trees: some branches right, some wrong."""

    def __init__(self, n_vocab: int, depth: int = 3, width: int = 2) -> None:
        self.n_vocab = n_vocab
        self.depth = depth
        self.width = width
        self.stream: list[int] = []

    def observe(self, tokens) -> None:  # type: ignore[no-untyped-def]
        self.stream.extend(int(t) for t in tokens)

    def propose(self, budget: int, max_depth: int, branches: int) -> Draft:
        rng = np.random.default_rng(hash(tuple(self.stream[-3:])) % (2**32))
        toks: list[int] = []
        parents: list[int] = []
        frontier = [(-1, 1)]
        while frontier and len(toks) < budget:
            parent, d = frontier.pop(0)
            if d > min(self.depth, max_depth):
                continue
            for t in rng.permutation(self.n_vocab)[: min(self.width, branches)]:
                if len(toks) >= budget:
                    break
                toks.append(int(t))
                parents.append(parent)
                frontier.append((len(toks) - 1, d + 1))
        n = len(toks)
        q = np.full(n, 0.5, np.float32)
        return Draft(np.array(toks, np.int32), np.array(parents, np.int32), np.zeros(n, np.int8), q, q)
