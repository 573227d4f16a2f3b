"""Copy through edits: the prompt's text again, with the substitutions the output has made.

A code edit ("rename `buf` to `buffer`") writes the prompt's code back with a few changes.
The suffix and n-gram indexes copy it well until the first changed token; after it the
stream ends in text the prompt never had ("    buffer"), their matches are short, and
drafting stops until a long match builds up again, at every occurrence of the new name.
This source keeps a pointer into the prompt instead:

1. **Aligned.** The output is copying the prompt at position p: each token equal to
   prompt[p] moves p on. Alignment is found from the last `ALIGN` output tokens, looked up
   among the prompt's `ALIGN`-grams (the latest occurrence).
2. **Edits.** A token that differs opens an edit at p. When the output again ends with
   `SYNC` tokens of the prompt shortly after p (prompt[p + k : p + k + SYNC], k <= MAX_OLD),
   the edit closed: the prompt's prompt[p : p + k] became the output tokens written in
   between (at most MAX_NEW), a substitution old -> new, learned. p moves past the resync.
3. **Drafting.** While aligned, the draft is the prompt from p on with every learned
   substitution applied, so the second and later occurrences of a renamed name are drafted
   right, and the copy runs on straight through them. Within a substitution being written,
   the rest of its new text comes first.

Confidence grows with the copy: a token that follows r copied tokens gets
q = r / (r + COPY_PRIOR), counting those the draft itself copies before it (0.8 right after
the 4 tokens that align, 0.94 after 16, 0.98 after 48). A long exact copy is strong evidence
by itself: a constant q left the controller ramping up over 4-5 steps (drafts of 5, 5, 5,
17, then 63) at the start of every code edit, until its calibration had seen each q level
succeed.

Code is copied further than prose. A code edit writes the whole block back, changed in a
few places; a summary quotes a phrase of its document and moves on. The copy looks the
same for its first tokens, so the source's confidence grows faster while it copies from
inside a block of code of the prompt (q = r / (r + CODE_COPY_PRIOR): 0.89 right after
aligning, 0.97 after 16) than from prose, where it stays as above. (Measured in the
offline replay, tune set: code edits 2.13x -> 2.19x on an AVX2 EPYC's cost curve and
3.13x -> 3.37x on an AVX-512 Xeon's, where a surer copy everywhere would have cost the
summaries 3%.) Code is a fenced block, or lines that look like code under an instruction
(`lookahead.index.codetext`: pasted code, as in the README's example, is not fenced).
A copy of prose stops at the end of its sentence's line or paragraph: a model that restates
the instruction goes its own way after it, and a draft run on into the code below the
instruction was a long bet that failed. Needs `token_bytes` to read the lines; without it
every copy is prose and runs on.

Its own source tag gives it its own calibration: where the output does not copy the
prompt (prose, summaries), its drafts fail and the controller learns to ignore them.
Per token the work is O(ALIGN + MAX_OLD) dict and list operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from lookahead.core.draft import SOURCE_EDIT, Candidate
from lookahead.index.codetext import copy_kinds
from lookahead.index.walk import int_list

ALIGN = 4  # output tokens that must match the prompt to align a copy
SYNC = 2  # prompt tokens the output must write again to close an edit
MAX_OLD = 8  # most prompt tokens an edit replaces
MAX_NEW = 12  # most output tokens an edit writes
COPY_PRIOR = 1.0  # q of the r-th copied token: r / (r + COPY_PRIOR) (calibration corrects it)
CODE_COPY_PRIOR = 0.5  # ... of a token inside a block of code of the prompt
Q_MAX = 0.99  # ... at most
Q_SUB = 0.8  # per token of a learned substitution
RESYNC_RUN = 8  # a copy that held across an edit counts as this long again


class EditSource:
    """The copy-through-edits draft source of one stream (its first observe is the prompt)."""

    source = SOURCE_EDIT

    def __init__(self, token_bytes: Callable[[int], bytes] | None = None) -> None:
        self._token_bytes = token_bytes
        self._code: list[bool] = []  # per prompt token: inside a block of code, not a comment
        self._ends: list[bool] = []  # per prompt token: prose that ends a sentence's line
        self._prompt: list[int] = []
        self._grams: dict[tuple[int, ...], int] = {}  # prompt ALIGN-gram -> position after it
        self._out: list[int] = []  # tokens after the prompt
        self._seen_prompt = False
        self._p: int | None = None  # aligned: the prompt position the next token copies
        self._sub: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (old, new) being written
        self._j = 0  # tokens of the substitution's new text written so far
        self._edit: tuple[int, int] | None = None  # open edit: (prompt position, output start)
        self._run = 0  # tokens the output has copied since the copy was found (or resynced)
        self._subs: dict[int, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {}  # old[0] -> subs

    # ---- the stream ---------------------------------------------------------------------
    def observe(self, tokens: Iterable[int]) -> None:
        toks = int_list(tokens)
        if not self._seen_prompt:
            self._seen_prompt = True
            self._prompt = toks
            grams = self._grams
            for i in range(ALIGN, len(toks)):
                grams[tuple(toks[i - ALIGN : i])] = i
            if self._token_bytes is not None:
                self._code, self._ends = copy_kinds([self._token_bytes(t) for t in toks])
            return
        for t in toks:
            self._out.append(t)
            self._step(t)

    def _step(self, t: int) -> None:
        prompt = self._prompt
        if self._sub is not None:  # writing a learned substitution's new text
            old, new = self._sub
            if new[self._j] == t:
                self._j += 1
                if self._j == len(new):
                    assert self._p is not None
                    self._p += len(old)
                    self._sub = None
                return
            self._sub = None
            self._open_edit(t)
            return
        p = self._p
        if p is not None:
            sub = self._sub_at(p, t)
            if sub is not None:
                self._sub, self._j = sub, 1
                if len(sub[1]) == 1:
                    self._p = p + len(sub[0])
                    self._sub = None
                return
            if p < len(prompt) and prompt[p] == t:
                self._p = p + 1
                self._run += 1
                return
            self._open_edit(t)
            return
        if self._edit is not None and self._resync():
            return
        self._realign()

    def _sub_at(self, p: int, t: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """A learned substitution whose old text starts at prompt[p] and new text with t."""
        prompt = self._prompt
        if p >= len(prompt):
            return None
        for old, new in self._subs.get(prompt[p], ()):
            if new and new[0] == t and tuple(prompt[p : p + len(old)]) == old:
                return old, new
        return None

    def _open_edit(self, t: int) -> None:
        p = self._p
        self._p = None
        if p is not None:
            self._edit = (p, len(self._out) - 1)
            self._resync()  # a deletion may resync at once

    def _resync(self) -> bool:
        """Close the open edit if the output just wrote the prompt again a little later."""
        assert self._edit is not None
        p0, o0 = self._edit
        out, prompt = self._out, self._prompt
        new_len = len(out) - SYNC - o0
        if new_len > MAX_NEW:
            self._edit = None  # too long to be a small edit: look for a new alignment
            return False
        if new_len < 0:
            return False
        tail = out[-SYNC:]
        for k in range(0, MAX_OLD + 1):
            at = p0 + k
            if at + SYNC > len(prompt):
                break
            if (k or new_len) and prompt[at : at + SYNC] == tail:
                old = tuple(prompt[p0:at])
                new = tuple(out[o0 : o0 + new_len])
                if old:  # a pure insertion is not a repeatable substitution
                    self._learn(old, new)
                self._p = at + SYNC
                self._edit = None
                self._run = RESYNC_RUN  # the copy held across an edit: no longer fresh
                return True
        return False

    def _learn(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        subs = self._subs.setdefault(old[0], [])
        subs[:] = [(o, n) for o, n in subs if o != old]
        subs.insert(0, (old, new))  # the latest edit of the same text wins
        subs.sort(key=lambda s: -len(s[0]))  # longest old text first (stable: latest first)

    def _realign(self) -> None:
        out = self._out
        if len(out) >= ALIGN:
            self._p = self._grams.get(tuple(out[-ALIGN:]))
            self._run = ALIGN

    # ---- drafting -----------------------------------------------------------------------
    def propose(self, max_depth: int, max_candidates: int) -> list[Candidate]:
        p = self._p
        if p is None or max_depth <= 0:
            return []
        prompt = self._prompt
        tokens: list[int] = []
        qs: list[float] = []
        if self._sub is not None:
            old, new = self._sub
            rest = new[self._j :]
            tokens.extend(rest)
            qs.extend([Q_SUB] * len(rest))
            p += len(old)
        subs = self._subs
        code, ends = self._code, self._ends
        while len(tokens) < max_depth and p < len(prompt):
            tok = prompt[p]
            hit = None
            for old, new in subs.get(tok, ()):
                if tuple(prompt[p : p + len(old)]) == old:
                    hit = (old, new)
                    break
            if hit is None:
                tokens.append(tok)
                run = self._run + len(tokens) - 1  # the copy's tokens before this one, drafted ones too
                prior = CODE_COPY_PRIOR if code and code[p] else COPY_PRIOR
                qs.append(min(run / (run + prior), Q_MAX))
                p += 1
                if ends and ends[p - 1]:
                    break  # a copy of prose stops at the end of its sentence's line
            else:
                tokens.extend(hit[1])
                qs.extend([Q_SUB] * len(hit[1]))
                p += len(hit[0])
        if not tokens:
            return []
        del tokens[max_depth:], qs[max_depth:]
        return [Candidate(np.array(tokens, dtype=np.int32), np.array(qs, dtype=np.float32), SOURCE_EDIT)]
