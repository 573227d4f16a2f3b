"""The llama.cpp backend's settings (pure Python: the CLI and the server build them without
loading llama.cpp; `lookahead/backend/llama.py` reads them and re-exports them)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from lookahead.errors import ConfigError


@dataclass(frozen=True)
class BackendConfig:
    n_ctx: int = 8192  # context length in tokens (prompt + output + one draft)
    n_batch: int = 512  # most tokens per llama_decode (prefill chunks, largest draft + 1)
    n_threads: int = 0  # 0 = every CPU this process may run on
    max_branches: int = 16  # sequence ids, i.e. most leaves in one draft tree (at most n_batch - 1)
    repack: bool = True  # llama.cpp's repacked CPU weights (its default; faster)
    # Flash attention on: with it, batched logits match one-token decoding bit for bit on
    # batch-invariant models (without it they do not). Its result depends on the ORDER of
    # the live cells, which is why commit() never leaves a hole before a live cell.
    flash_attn: bool = True
    # KV shift, llama.cpp's --cache-reuse: a cached prompt's runs of at least this many
    # tokens that a new prompt holds further back are moved there and kept, not decoded
    # again (kv_cache.py); 0 = off. Not for exact mode, which always starts cold.
    cache_reuse: int = 0

    def __post_init__(self) -> None:
        if self.n_batch < 2:
            raise ConfigError(f"n_batch must be >= 2 (the root and one draft token), got {self.n_batch}")
        if self.cache_reuse < 0:
            raise ConfigError(f"cache_reuse must be >= 0 (0 = off), got {self.cache_reuse}")


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
