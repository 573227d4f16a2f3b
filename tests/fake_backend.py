"""A tiny model with known next-token distributions, for exactness tests without llama.cpp."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from lookahead.backend.tree_layout import TreeLayout
from lookahead.core.draft import Draft
from lookahead.core.tokens import TokenArray
from lookahead.errors import BackendError


class FakeModel:
    """Logits depend on the last two tokens through a fixed random table.

    It refuses what llama.cpp (and LlamaBackend) refuse, so a test on it catches an engine
    that asks too much: a verify of more than `n_batch` tokens or more leaves than
    `max_branches`, a prefill or verify past `n_ctx` cells. Cells are counted like
    LlamaBackend's: rejected draft cells that lie before the accepted path stay parked
    (`n_used`) until the next reset. Tokens in `eog` end a generation.

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
        eog: Iterable[int] = (),
        batch_variant: Callable[[int, int], bool] | None = None,
    ) -> None:
        rng = np.random.default_rng(seed)
        self.table = (rng.standard_normal((n_vocab, n_vocab, n_vocab)) * sharp).astype(np.float32)
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.batch_variant = batch_variant
        self.max_branches = 8
        self.eog = set(eog)
        self.ctx: list[int] = []
        self.parked = 0
        self.verified: list[int] = []  # nodes per verify call (for tests)
        self.prefilled = 0  # prompt tokens prefilled, ever (for tests of the prompt cache)

    def greedy(self, tokens: Sequence[int], n: int) -> list[int]:
        """The next `n` tokens of plain greedy decoding after `tokens`, end tokens or not."""
        out = [int(t) for t in tokens]
        for _ in range(n):
            out.append(int(np.argmax(self.logits(out))))
        return out[len(tokens) :]

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
        return len(self.ctx) + self.parked

    def reset(self) -> None:
        self.ctx = []
        self.parked = 0

    shifted = 0  # the fake cache never moves cells (no KV shift)
    refilled = 0

    def reuse(self, tokens: Sequence[int]) -> int:
        """LlamaBackend's prompt cache rule (`KVSlot.reuse`) on the fake cache."""
        k = 0
        while k < min(len(self.ctx), len(tokens)) and self.ctx[k] == tokens[k]:
            k += 1
        if k == 0 or self.parked > k or self.parked + len(tokens) + 1 > self.n_ctx:
            self.reset()
            return 0
        del self.ctx[k:]
        return k

    def prefill(self, tokens: TokenArray) -> None:
        self.prefilled += len(tokens)
        if self.n_past + len(tokens) + 1 > self.n_ctx:
            raise BackendError(f"{self.n_past + len(tokens)} tokens do not fit a context of {self.n_ctx}")
        self.ctx.extend(int(t) for t in tokens)

    def verify(self, root: int, draft: Draft) -> list[np.ndarray]:
        n = len(draft) + 1
        if n > self.n_batch:
            raise BackendError(f"a draft of {n - 1} nodes exceeds n_batch {self.n_batch}")
        if self.n_used + n > self.n_ctx:
            raise BackendError("the draft does not fit in the context")
        self._layout = TreeLayout(draft, self.max_branches)  # refuses too many leaves
        self.verified.append(len(draft))
        self._root = root
        base = [*self.ctx, root]
        rows = [self.logits(base)]
        for i in range(len(draft)):
            rows.append(self.logits(base + [int(draft.tokens[j]) for j in draft.path_to(i)]))
        if len(draft) and self.batch_variant is not None and self.batch_variant(n, self.n_used):
            rows = [np.nextafter(r, np.float32(np.inf)) for r in rows]
        return rows

    def commit(self, draft: Draft, accepted: list[int]) -> None:
        self.ctx.append(self._root)  # the root of the last verify
        self.ctx.extend(int(draft.tokens[i]) for i in accepted)
        if accepted:
            self.parked += self._layout.parked_before(accepted[-1], len(accepted))

    def truncate(self, n_past: int) -> None:
        del self.ctx[n_past:]
        self.parked = 0

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


class OracleDrafter:
    """Drafts the known output: a chain of the next tokens of `future` (the prompt and what
    follows it), as long as the stream so far is its prefix; nothing once it is not."""

    def __init__(self, future: Sequence[int]) -> None:
        self.future = [int(t) for t in future]
        self.stream: list[int] = []

    def observe(self, tokens: Sequence[int]) -> None:
        self.stream.extend(int(t) for t in tokens)

    def propose(self, budget: int, max_depth: int, branches: int) -> Draft:
        n = len(self.stream)
        if self.future[:n] != self.stream:
            return Draft.empty()
        return Draft.chain(self.future[n : n + min(budget, max_depth)])


class FakeMultiModel:
    """FakeModel's logits in a context of `slots` independent generations (a MultiVerifier).

    Enforces what the llama.cpp multi-slot backend enforces: one decode holds at most
    `n_batch` tokens (every root and draft node), a draft at most `max_branches` leaves, a
    slot at most `slot_ctx` cells, the whole context at most `n_ctx`. Cells are counted per
    slot like FakeModel's (parked cells included) and freed by `release`. `max_used` is the
    most cells ever in use (including a verify's draft cells), `steps` the tokens per decode.
    """

    def __init__(
        self,
        slots: int = 4,
        n_vocab: int = 4,
        seed: int = 0,
        n_ctx: int = 4096,
        n_batch: int = 512,
        eog: Iterable[int] = (),
    ) -> None:
        self.model = FakeModel(n_vocab=n_vocab, seed=seed, n_ctx=n_ctx, n_batch=n_batch, eog=eog)
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.slots = slots
        self.slot_ctx = n_ctx // slots
        self.n_batch = n_batch
        self.max_branches = 8
        self.ctx: dict[int, list[int]] = {}
        self.parked: dict[int, int] = {}
        self._pending: dict[int, tuple[int, TreeLayout]] = {}  # slot -> (root, layout)
        self.kept: dict[int, list[int]] = {}  # free slot -> tokens its cells keep (prompt cache)
        self.kept_parked: dict[int, int] = {}
        self.max_used = 0
        self.steps: list[int] = []
        self.forked = 0  # cells copied from one slot to another (`fork`)
        self.owners: dict[int, str] = {}  # slot -> whose request left its kept tokens

    @property
    def n_used(self) -> int:
        return sum(self.slot_used(s) for s in self.ctx)

    def acquire(
        self, tokens: Sequence[int] = (), cache: bool = False, owner: str = "", prefer: int = -1
    ) -> tuple[int, int]:
        """A free slot: `prefer` when it is free; with `cache`, the one whose kept tokens (kept
        by the same `owner`) share the longest prefix with `tokens` (those kept), else the
        lowest free one, emptied."""
        free = [s for s in range(self.slots) if s not in self.ctx]
        if not free:
            raise BackendError("no free slot")

        def shared(s: int) -> int:
            old = self.kept.get(s, []) if self.owners.get(s, "") == owner else []
            k = 0
            while k < min(len(old), len(tokens)) and old[k] == tokens[k]:
                k += 1
            return k

        slot = max(free, key=lambda s: (shared(s), -s)) if cache else free[0]
        slot = prefer if prefer in free else slot
        k = shared(slot) if cache else 0
        self.ctx[slot] = self.kept.pop(slot, [])[:k]
        self.parked[slot] = self.kept_parked.pop(slot, 0) if k else 0
        self.owners[slot] = owner
        return slot, k

    def release(self, slot: int, keep: bool = False) -> None:
        if slot not in self.ctx:
            raise BackendError(f"slot {slot} is not in use")
        if keep:
            self.kept[slot] = self.ctx[slot]
            self.kept_parked[slot] = self.parked[slot]
        del self.ctx[slot]
        del self.parked[slot]
        self._pending.pop(slot, None)

    def slot_shifted(self, slot: int) -> int:
        return 0  # the fake cache never moves cells (no KV shift)

    def slot_refilled(self, slot: int) -> int:
        return 0

    def slot_past(self, slot: int) -> int:
        return len(self.ctx[slot])

    def slot_used(self, slot: int) -> int:
        return len(self.ctx[slot]) + self.parked[slot]

    def fork(self, src: int, dst: int, n: int) -> None:
        """The first `n` committed tokens of slot `src` into the taken, empty slot `dst`."""
        if src not in self.ctx or dst not in self.ctx or self.slot_used(dst) or n > len(self.ctx[src]):
            raise BackendError(f"cannot fork {n} cells of slot {src} into slot {dst}")
        self.ctx[dst] = self.ctx[src][:n]
        self.forked += n

    def prefill(self, slot: int, tokens: TokenArray) -> None:
        if len(tokens) > self.n_batch:
            raise BackendError("a prefill chunk exceeds n_batch")
        if self.slot_used(slot) + len(tokens) + 1 > self.slot_ctx:
            raise BackendError("the prompt does not fit the slot")
        self.ctx[slot].extend(int(t) for t in tokens)
        self.steps.append(len(tokens))

    def verify(self, items: Sequence[tuple[int, int, Draft]]) -> list[list[np.ndarray]]:
        total = sum(len(d) + 1 for _, _, d in items)
        if total > self.n_batch:
            raise BackendError(f"a decode of {total} tokens exceeds n_batch {self.n_batch}")
        if self.n_used + total > self.n_ctx:
            raise BackendError("the step does not fit in the context")
        if len({s for s, _, _ in items}) != len(items):
            raise BackendError("a slot appears twice in one decode")
        out = []
        for slot, root, draft in items:
            if slot not in self.ctx:
                raise BackendError(f"slot {slot} is not in use")
            if self.slot_used(slot) + len(draft) + 1 > self.slot_ctx:
                raise BackendError("the draft does not fit in the slot")
            self._pending[slot] = (root, TreeLayout(draft, self.max_branches))
            base = [*self.ctx[slot], root]
            rows = [self.model.logits(base)]
            for i in range(len(draft)):
                rows.append(self.model.logits(base + [int(draft.tokens[j]) for j in draft.path_to(i)]))
            out.append(rows)
        self.max_used = max(self.max_used, self.n_used + total)
        self.steps.append(total)
        return out

    def commit(self, slot: int, draft: Draft, accepted: list[int]) -> None:
        root, layout = self._pending.pop(slot)
        self.ctx[slot].append(root)
        self.ctx[slot].extend(int(draft.tokens[i]) for i in accepted)
        if accepted:
            self.parked[slot] += layout.parked_before(accepted[-1], len(accepted))

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def token_bytes(self, token: int) -> bytes:
        return self.model.token_bytes(token)
