"""`Measurement`: what one timed generation produced, whoever ran it (lookahead, a peer
library, a llama-server); the methods and the server runner both build it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Measurement:
    """One generation. tok/s = decode_tokens / decode_s (prefill excluded)."""

    tokens: list[int]  # generated tokens (end-of-generation token excluded)
    decode_tokens: int  # tokens produced inside the decode_s window
    decode_s: float
    prefill_s: float
    steps: int  # verify steps (llama_decode calls) in the decode window
    drafted: int  # draft tokens verified
    accepted: int  # draft tokens accepted
    k_trace: list[int] = field(default_factory=list)  # draft tokens verified, per step
    # per step (the engine's Step events; per token for llama-cpp-python; none for a server):
    step_t: list[float] = field(default_factory=list)  # seconds from the request to its tokens
    step_tokens: list[int] = field(default_factory=list)  # tokens it emitted
    step_accepted: list[int] = field(default_factory=list)  # drafted tokens it accepted
    step_verify_s: list[float] = field(default_factory=list)  # its llama_decode
    step_draft_s: list[float] = field(default_factory=list)  # proposing + choosing its draft
    extra: dict[str, Any] = field(default_factory=dict)  # method-specific (a server's own timings, ...)

    @property
    def tok_s(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0
