"""A llama_batch whose arrays are numpy buffers (`kv_cache.BatchArrays`), so filling one is
vector work; `llama.py`'s contexts decode it."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp as ll

from lookahead.backend.kv_cache import BatchArrays


class Batch(BatchArrays):
    """BatchArrays with the llama_batch that points at them, so filling it is vector work."""

    def __init__(self, capacity: int, n_seq: int) -> None:
        super().__init__(capacity, n_seq)
        row_ptr = ctypes.POINTER(ctypes.c_int32)
        base = self.seq.ctypes.data
        self._rows = (row_ptr * capacity)(
            *[ctypes.cast(base + i * n_seq * 4, row_ptr) for i in range(capacity)]
        )
        # ctypes pointers into our arrays (the binding's stubs type these fields as arrays)
        st: Any = ll.llama_batch()
        st.token = self.token.ctypes.data_as(ctypes.POINTER(ll.llama_token))
        st.embd = ctypes.POINTER(ctypes.c_float)()
        st.pos = self.pos.ctypes.data_as(ctypes.POINTER(ll.llama_pos))
        st.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        st.seq_id = ctypes.cast(self._rows, ctypes.POINTER(ctypes.POINTER(ll.llama_seq_id)))
        st.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.struct = st
