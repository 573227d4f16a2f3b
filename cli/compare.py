"""`lookahead generate --compare`: decode the same prompt again without drafts and show
both speeds, so the gain (or its absence) on this machine and this text is measured, not
assumed.

Speeds are decode-phase tokens per second (the prompt's prefill is left out: it is the same
work either way). The plain run comes second, on a model whose caches the first run warmed,
which if anything favours it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, Event, Result


def final(events: Iterator[Event]) -> Result:
    """The Result at the end of a stream of events."""
    for event in events:
        if isinstance(event, Done):
            return event.result
    raise AssertionError("generation ended without a Done event")


def plain_config(draft: DraftConfig) -> DraftConfig:
    """`draft` with drafting off: the baseline of the comparison."""
    return dataclasses.replace(draft, enabled=False)


def rate(result: Result) -> float:
    """Decode-phase tokens per second (0 when nothing was decoded)."""
    s = result.stats
    return s.n_tokens / s.decode_s if s.decode_s > 0 else 0.0


def compare_json(drafted: Result, plain: Result) -> dict[str, Any]:
    """The `compare` object of `generate --compare --json`."""
    r, p = rate(drafted), rate(plain)
    return {
        "tokens_per_s": round(r, 3),
        "plain_tokens_per_s": round(p, 3),
        "speedup": round(r / p, 4) if p > 0 else None,
        "plain_n_tokens": plain.stats.n_tokens,
        "plain_decode_s": round(plain.stats.decode_s, 6),
        "same_text": drafted.text == plain.text,
    }


def sameness(drafted: Result, plain: Result, *, greedy: bool, exact: bool) -> str:
    """What the two texts' (in)equality means, in words a first-time user can act on."""
    if drafted.text == plain.text:
        return "same text"
    if not greedy:
        return "the texts differ: both are samples, and the two runs drew different tokens (--temp 0 --exact: one text)"
    if exact:
        return "the texts differ although --exact was given: please report this with `lookahead doctor --json`"
    return (
        "the texts differ: the batched check moved a near tie between two tokens, "
        "so greedy picked the other one (--exact gives plain decoding's text)"
    )


def compare_line(drafted: Result, plain: Result, *, greedy: bool, exact: bool) -> str:
    """One line for stderr: both speeds, the ratio and what a difference in the texts means."""
    r, p = rate(drafted), rate(plain)
    ratio = f"{r / p:.2f}x" if p > 0 else "n/a"
    same = sameness(drafted, plain, greedy=greedy, exact=exact)
    return (
        f"with drafts {r:.1f} tokens/s, plain decoding {p:.1f} tokens/s: {ratio} "
        f"({drafted.stats.n_tokens} and {plain.stats.n_tokens} tokens, decode phase; {same})"
    )
