"""The GGUF header check: complete files pass; truncated, foreign or crafted ones give a ModelError."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import pytest

from lookahead.models.catalog import ModelError
from lookahead.models.gguf import check_gguf


def gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def make_gguf(version: int = 3, alignment: int = 64) -> bytes:
    """A small but structurally complete GGUF: metadata of several kinds, two tensors."""
    kv = [
        gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama"),
        gguf_string("general.alignment") + struct.pack("<II", 4, alignment),
        gguf_string("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, 3)
        + b"".join(gguf_string(t) for t in ["a", "bb", "<s>"]),
        gguf_string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + b"\0" * 12,
        gguf_string("some.flag") + struct.pack("<I", 7) + b"\1",
    ]
    # tensor 0: f32 [4, 2] = 32 bytes at offset 0; tensor 1: Q8_0 [64] = 2 blocks of 34 bytes
    tensors = [
        gguf_string("a.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 2)
        + struct.pack("<IQ", 0, 0),
        gguf_string("b.weight") + struct.pack("<I", 1) + struct.pack("<Q", 64)
        + struct.pack("<IQ", 8, alignment),
    ]  # fmt: skip
    head = struct.pack("<4sIQQ", b"GGUF", version, len(tensors), len(kv)) + b"".join(kv + tensors)
    head += b"\0" * (-len(head) % alignment)
    return head + b"\1" * alignment + b"\2" * 68


def write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_check_gguf_accepts_complete_file(tmp_path: Path) -> None:
    check_gguf(write(tmp_path, make_gguf()))
    check_gguf(write(tmp_path, make_gguf(version=2, alignment=32)))
    check_gguf(write(tmp_path, make_gguf() + b"extra"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a GGUF"),
        (b"PK\3\4" + b"\0" * 100, "not a GGUF"),
        (b"GGUF\3\0", "shorter than a GGUF header"),
        (make_gguf()[:-1], "truncated"),
        (make_gguf()[:200], "truncated"),
        (make_gguf()[:60], "truncated"),
        (make_gguf(version=1), "version 1"),
        (make_gguf(version=0), "invalid GGUF version"),
        (b"GGUF" + struct.pack("<IQQ", 3, 1, 2**40), "truncated or corrupt"),
    ],
)
def test_check_gguf_rejects_bad_files(tmp_path: Path, data: bytes, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        check_gguf(write(tmp_path, data))


def test_check_gguf_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        check_gguf(tmp_path / "nope.gguf")
    with pytest.raises(ModelError, match="not a file"):
        check_gguf(tmp_path)



# --- crafted headers: bounded by the file, one-line errors, never a traceback -------------


def gguf_header(n_tensors: int, kv: list[bytes], tensors: Sequence[bytes] = ()) -> bytes:
    return struct.pack("<4sIQQ", b"GGUF", 3, n_tensors, len(kv)) + b"".join(kv) + b"".join(tensors)


def nested_array(depth: int) -> bytes:
    """A metadata value: `depth` arrays, each holding one array, around an empty u8 array."""
    return struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 0, 0)


def with_one_tensor(kv: list[bytes]) -> bytes:
    """A GGUF v3 file whose metadata is `kv`, with one complete f32 tensor of 4 elements."""
    tensor = gguf_string("t.weight") + struct.pack("<IQ", 1, 4) + struct.pack("<IQ", 0, 0)
    head = gguf_header(1, kv, [tensor])
    return head + b"\0" * (-len(head) % 32) + b"\1" * 16


def test_check_gguf_accepts_arrays_of_arrays(tmp_path: Path) -> None:
    # real files nest metadata arrays a level or two at most
    kv = [gguf_string("x.pairs") + nested_array(2), gguf_string("x.deeper") + nested_array(4)]
    check_gguf(write(tmp_path, with_one_tensor(kv)))


def test_check_gguf_rejects_deeply_nested_metadata_arrays(tmp_path: Path) -> None:
    data = with_one_tensor([gguf_string("x.deep") + nested_array(5000)])
    with pytest.raises(ModelError, match="nested more than") as err:
        check_gguf(write(tmp_path, data))
    assert "\n" not in str(err.value)


def test_check_gguf_rejects_a_header_without_tensors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no tensors"):
        check_gguf(write(tmp_path, gguf_header(0, [])))
    vocab_only = gguf_header(0, [gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("x")])
    with pytest.raises(ModelError, match="no tensors"):
        check_gguf(write(tmp_path, vocab_only))


@pytest.mark.parametrize(
    "data",
    [
        gguf_header(1000, []),  # 1000 tensor entries in 24 bytes
        # 40 metadata entries counted, one present
        struct.pack("<4sIQQ", b"GGUF", 3, 1, 40) + gguf_string("k") + struct.pack("<I", 7) + b"\1",
        # an array of 2**20 strings in a file of a few dozen bytes
        gguf_header(1, [gguf_string("k") + struct.pack("<IIQ", 9, 8, 2**20)]),
        # an array of 2**20 arrays
        gguf_header(1, [gguf_string("k") + struct.pack("<IIQ", 9, 9, 2**20)]),
    ],
    ids=["tensors", "metadata", "strings", "arrays"],
)
def test_check_gguf_rejects_counts_the_file_cannot_hold(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(ModelError, match="more than its .* bytes can hold"):
        check_gguf(write(tmp_path, data))
