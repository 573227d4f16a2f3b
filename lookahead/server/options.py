"""The extra `lookahead` field both dialects accept: per-request drafting control."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LookaheadOptions(BaseModel):
    """Per-request drafting control (the extra `lookahead` field); None = the server's default."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None  # False: plain decoding for this request
    exact: bool | None = None  # greedy output bit-identical to plain decoding (see README)
    k_max: int | None = Field(default=None, ge=1, le=256)
    budget: int | None = Field(default=None, ge=1, le=256)
