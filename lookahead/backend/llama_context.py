"""A llama.cpp context on loaded weights, made with this project's settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import llama_cpp as ll

from lookahead.backend.config import BackendConfig
from lookahead.errors import BackendError


def new_context(
    model: Any, config: BackendConfig, n_seq_max: int, threads: int, unified: bool, last_error: Callable[[], str]
) -> Any:
    """A llama.cpp context on loaded weights: one unified KV cache of `config.n_ctx` cells
    shared by `n_seq_max` sequence ids (not `unified`: one stream of n_ctx / n_seq_max cells
    per sequence id, and no batch entry may carry two ids), batches of `config.n_batch`.
    `last_error`: what llama.cpp last logged as an error, for the message when it fails."""
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = config.n_ctx
    cparams.n_batch = config.n_batch
    cparams.n_ubatch = config.n_batch
    cparams.n_seq_max = n_seq_max
    cparams.kv_unified = unified
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    cparams.no_perf = True
    cparams.flash_attn_type = (
        ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if config.flash_attn else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    ctx = ll.llama_init_from_model(model, cparams)
    if not ctx:
        raise BackendError(f"llama.cpp could not create a context: {last_error()}")
    return ctx
