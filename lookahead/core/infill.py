"""llama.cpp's `infill` sampler, which editor plugins list in `samplers` (llama.vim sends
`["top_k", "top_p", "infill"]`): it keeps the candidates a fill-in-the-middle answer should
be drawn from, and ends the answer when its end is likely enough.

On the candidates left by top-k and top-p (most likely first), with p their softmax:

1. If the end tokens (EOG) hold enough, 3 * p(EOG) * n > p(text) with n candidates, only
   the end tokens are kept: the answer ends here.
2. A candidate whose text is a prefix of another's is merged with it (the less likely one's
   probability goes to the more likely one, which stays).
3. Text candidates below probability 0.2 are dropped (end tokens stay); with none left the
   answer ends (the model's end-of-turn token). Then, renormalized, those below
   1 / (texts left + 1) are dropped too.

The draw is then llama.cpp's `dist`: a softmax of the kept candidates' own logits (merging
moves probability only to decide what is kept). A fixed function of the logits, so drafts
verified against it keep the output exact, as with top-k and top-p.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

FIRST_CUT = 0.2  # llama.cpp's first threshold on a text candidate's probability


class InfillVocab(Protocol):
    """What the infill rule needs of a vocabulary."""

    def is_eog(self, token: int) -> bool: ...

    def token_bytes(self, token: int) -> bytes: ...  # its text (empty for control tokens)

    def eot(self) -> int: ...  # the token that ends an answer when no text is left


def infill_keep(
    ids: npt.NDArray[np.int64], logits: npt.NDArray[np.float64], vocab: InfillVocab
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The candidates (ids, their logits) the draw keeps of `ids`, most likely first."""
    p = np.exp(logits - logits.max())
    p /= p.sum()
    eog = np.fromiter((vocab.is_eog(int(t)) for t in ids), dtype=bool, count=len(ids))
    if 3 * p[eog].sum() * len(ids) > p[~eog].sum():
        return ids[eog], logits[eog]
    p = p.copy()
    gone = np.zeros(len(ids), dtype=bool)
    pieces = [vocab.token_bytes(int(t)) for t in ids]
    for i0, a in enumerate(pieces):
        for i1, b in enumerate(pieces):
            if gone[i0]:
                break
            if i0 == i1 or gone[i1] or not a or len(a) > len(b) or not b.startswith(a):
                continue
            dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
            p[dst] += p[src]
            p[src] = 0.0
            gone[src] = True
    keep = ~gone & ((p >= FIRST_CUT) | eog)
    texts = int(np.count_nonzero(keep & ~eog))
    if texts == 0:
        return np.array([vocab.eot()], dtype=np.int64), np.zeros(1)
    q = p[keep] / p[keep].sum()
    second = (q >= 1.0 / (texts + 1)) | eog[keep]
    return ids[keep][second], logits[keep][second]
