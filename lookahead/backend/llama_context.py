"""A llama.cpp context on loaded weights, made with this project's settings, and a decode
that can be stopped part way."""

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


ABORTED = 2  # llama_decode's return when its abort callback stopped it
_NO_ABORT = ll.ggml_abort_callback(0)  # a null callback: llama.cpp asks nothing


def decode_stoppable(ctx: Any, batch: Any, stop: Callable[[], bool]) -> int:
    """llama_decode's return for `batch`, with `stop` as llama.cpp's abort callback: asked
    between the graph's operations (some hundreds of calls per decode), True ends the decode
    part way (ABORTED), llama.cpp having removed, for each entry's first sequence id, the
    cells at the batch's positions and past them. So only for a batch whose entries carry
    one id each (a prefill's): the cells are then left as they were before it (a verify's
    root carries every branch id, of which llama.cpp would drop only the first)."""
    # kept referenced until llama.cpp no longer holds it (ctypes frees it otherwise)
    callback = ll.ggml_abort_callback(lambda _data: bool(stop()))
    ll.llama_set_abort_callback(ctx, callback, None)
    try:
        return int(ll.llama_decode(ctx, batch))
    finally:
        ll.llama_set_abort_callback(ctx, _NO_ABORT, None)
