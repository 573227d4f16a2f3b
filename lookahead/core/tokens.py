"""Token arrays and the append-only token buffer every index reads from."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

TokenArray = npt.NDArray[np.int32]


def as_tokens(tokens: Iterable[int] | TokenArray) -> TokenArray:
    """Return `tokens` as a contiguous int32 array (no copy when it already is one)."""
    if isinstance(tokens, np.ndarray):
        return np.ascontiguousarray(tokens, dtype=np.int32)
    return np.array(list(tokens), dtype=np.int32)


class TokenBuffer:
    """An append-only growable int32 array: amortized O(1) append, views never copied.

    Invariant: `self.data[:len(self)]` holds every token ever appended, in order; nothing
    is ever removed or changed, so indexes may keep integer positions into it forever.
    """

    __slots__ = ("_buf", "_n")

    def __init__(self, capacity: int = 1024) -> None:
        self._buf = np.zeros(max(16, capacity), dtype=np.int32)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, token: int) -> None:
        if self._n == len(self._buf):
            self._grow(self._n + 1)
        self._buf[self._n] = token
        self._n += 1

    def extend(self, tokens: Iterable[int] | TokenArray) -> None:
        arr = as_tokens(tokens)
        end = self._n + len(arr)
        if end > len(self._buf):
            self._grow(end)
        self._buf[self._n : end] = arr
        self._n = end

    def _grow(self, need: int) -> None:
        cap = len(self._buf)
        while cap < need:
            cap *= 2
        new = np.zeros(cap, dtype=np.int32)
        new[: self._n] = self._buf[: self._n]
        self._buf = new

    @property
    def data(self) -> TokenArray:
        """A read-only view of the tokens so far (invalidated by the next growth)."""
        view = self._buf[: self._n]
        view.flags.writeable = False
        return view

    def __getitem__(self, i: int) -> int:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return int(self._buf[i])

    def tail(self, n: int) -> TokenArray:
        """The last `n` tokens (fewer if the buffer is shorter)."""
        return self._buf[max(0, self._n - n) : self._n]
