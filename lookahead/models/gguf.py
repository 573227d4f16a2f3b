"""A GGUF file's header, checked before llama.cpp loads it.

llama.cpp may crash or print junk on a damaged file, so `check_gguf` reads the header (the
magic, the version, the metadata and the tensor table, never the tensor data) and raises
`ModelError` with a one-line reason for a file that is not a complete GGUF model.

Stdlib only, like `lookahead.models.catalog`.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from lookahead.models.registry import ModelError

_GGUF_MAGIC = b"GGUF"
_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata count
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
# ggml type -> (bytes per block, elements per block), for the common tensor types only.
_TYPE_SIZES = {
    0: (4, 1), 1: (2, 1), 2: (18, 32), 3: (20, 32), 6: (22, 32), 7: (24, 32), 8: (34, 32),
    10: (84, 256), 11: (110, 256), 12: (144, 256), 13: (176, 256), 14: (210, 256),
    15: (292, 256), 30: (2, 1),
}  # fmt: skip
# The fewest bytes an entry takes, so that no count in a header claims more than the file holds.
_MIN_KV = 8 + 4 + 1  # an empty key (its length), the value type, a one-byte value
_MIN_TENSOR = 8 + 4 + 4 + 8  # an empty name (its length), no dimensions, the type, the offset
_MIN_ITEM = {_STRING: 8, _ARRAY: 4 + 8}  # array items: an empty string; an empty array
_MAX_NESTING = 8  # metadata arrays inside arrays (real files nest a level or two at most)


def check_gguf(path: str | Path) -> None:
    """Raise ModelError unless `path` looks like a complete GGUF file.

    Checks the magic and header, then (for GGUF v2/v3) walks the metadata and tensor
    table to find where tensor data ends, so a truncated file is caught here rather
    than by llama.cpp, which may crash or print junk on bad input. Reads only headers.
    A crafted header is bounded too: no count may claim more entries than the file has
    bytes for, metadata arrays nest at most `_MAX_NESTING` deep, and a file with no
    tensors is not a model.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        if not p.is_file():
            raise ModelError(f"model path is not a file: {p}")
        with p.open("rb") as fh:
            head = fh.read(_HEADER.size)
            if head[:4] != _GGUF_MAGIC:
                raise ModelError(f"{p} is not a GGUF file (no GGUF magic at the start)")
            if len(head) < _HEADER.size:
                raise ModelError(f"{p} is truncated: {size} bytes, shorter than a GGUF header")
            _, version, n_tensors, n_kv = _HEADER.unpack(head)
            if version == 0 or version >= 100:
                raise ModelError(f"{p} has an invalid GGUF version {version}")
            if version == 1:
                raise ModelError(f"{p} is GGUF version 1, which llama.cpp no longer loads")
            if version > 3:
                return  # newer than this check knows: leave the details to llama.cpp
            if n_tensors == 0:
                raise ModelError(f"{p} has no tensors: a GGUF file without weights (vocabulary only?) is not a model")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                needed = _gguf_data_end(buf, n_tensors, n_kv)
    except FileNotFoundError as exc:
        raise ModelError(f"model file not found: {p}") from exc
    except OSError as exc:
        raise ModelError(f"cannot read model file {p}: {exc}") from exc
    except _Corrupt as exc:
        raise ModelError(f"{p} is truncated or corrupt: {exc}") from None
    except (struct.error, _Truncated) as exc:
        raise ModelError(f"{p} is truncated or corrupt: its GGUF header is cut short") from exc
    if needed > size:
        raise ModelError(f"{p} is truncated: {size} bytes, but its tensors need {needed}")


class _Truncated(Exception):
    pass


class _Corrupt(Exception):
    """The header says what no complete GGUF file says; the message says what."""


def _gguf_data_end(buf: mmap.mmap, n_tensors: int, n_kv: int) -> int:
    """Walk the GGUF v2/v3 header in `buf`; return the minimum file size it implies."""
    size = len(buf)
    pos = _HEADER.size

    def bound(count: int, least: int, what: str) -> None:
        """`count` entries of at least `least` bytes each must fit in what is left."""
        if count * least > size - pos:
            raise _Corrupt(f"its header counts {count} {what}, more than its {size} bytes can hold")

    bound(n_kv, _MIN_KV, "metadata entries")

    def u32() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        return int(v)

    def u64() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        return int(v)

    def skip(n: int) -> None:
        nonlocal pos
        pos += n
        if pos > size:
            raise _Truncated

    def string() -> bytes:
        n = u64()
        start = pos
        skip(n)
        return bytes(buf[start : start + n])

    def skip_value(vtype: int, depth: int = 0) -> None:
        """Skip one metadata value; `depth`: the arrays it is inside."""
        if vtype == _STRING:
            skip(u64())
        elif vtype == _ARRAY:
            if depth >= _MAX_NESTING:
                raise _Corrupt(f"its metadata arrays are nested more than {_MAX_NESTING} deep")
            item, count = u32(), u64()
            if item in _SCALAR_SIZES:
                skip(_SCALAR_SIZES[item] * count)
            else:
                bound(count, _MIN_ITEM.get(item, 1), "array items")
                for _ in range(count):
                    skip_value(item, depth + 1)
        elif vtype in _SCALAR_SIZES:
            skip(_SCALAR_SIZES[vtype])
        else:
            raise _Corrupt(f"unknown metadata value type {vtype}")

    alignment = 32
    for _ in range(n_kv):
        key = string()
        vtype = u32()
        if key == b"general.alignment" and vtype == _UINT32:
            alignment = u32() or 32
        else:
            skip_value(vtype)

    bound(n_tensors, _MIN_TENSOR, "tensors")
    last_offset, last_end = -1, 0
    for _ in range(n_tensors):
        skip(u64())  # name
        n_dims = u32()
        if n_dims > 8:
            raise _Truncated
        elements = 1
        for _ in range(n_dims):
            elements *= u64()
        ggml_type, offset = u32(), u64()
        if offset > last_offset:
            last_offset = offset
            block_bytes, block_elems = _TYPE_SIZES.get(ggml_type, (0, 1))
            last_end = offset + max(1, elements // block_elems * block_bytes)
    data_start = -(-pos // alignment) * alignment
    return data_start + last_end
