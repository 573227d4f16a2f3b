"""Streaming detokenization: bytes in, whole characters out, stop strings honoured.

Tokens are byte pieces; one UTF-8 character may span several tokens, so bytes go through an
incremental decoder that holds an incomplete character back until its last byte arrives.
Text that could still turn into a stop string is held back too, and dropped if it does.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._held = ""  # decoded text not yet emitted (might begin a stop string)
        self.stopped = False  # a stop string was found; nothing more will be emitted
        self.text = ""  # everything emitted so far

    def feed(self, data: bytes) -> str:
        """Add bytes; return the text that is now safe to emit."""
        if self.stopped:
            return ""
        self._held += self._decoder.decode(data)
        return self._release(final=False)

    def finish(self) -> str:
        """End of generation: flush what was held back (an incomplete character becomes U+FFFD)."""
        if self.stopped:
            return ""
        self._held += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        held = self._held
        cut = -1
        for s in self._stop:
            i = held.find(s)
            if i >= 0 and (cut < 0 or i < cut):
                cut = i
        if cut >= 0:
            self.stopped = True
            out, self._held = held[:cut], ""
        elif final or not self._stop:
            out, self._held = held, ""
        else:
            keep = self._partial_stop(held)
            out, self._held = held[: len(held) - keep], held[len(held) - keep :]
        self.text += out
        return out

    def _partial_stop(self, held: str) -> int:
        """Length of the longest suffix of `held` that is a proper prefix of a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(held)), best, -1):
                if held.endswith(s[:n]):
                    best = n
                    break
        return best
