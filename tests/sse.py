"""Reading a server-sent event stream as a client must: every payload parsed, an error
payload a failure even though the stream still ends with `data: [DONE]` under a 200."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def payloads(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON payloads of `data:` lines up to `[DONE]`; AssertionError on an error payload,
    on a payload that is not JSON, or on a stream that does not end with `[DONE]`."""
    out: list[dict[str, Any]] = []
    done = False
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        assert not done, f"data after [DONE]: {data[:200]}"
        if data == "[DONE]":
            done = True
            continue
        item = json.loads(data)
        assert "error" not in item, f"an error in the stream: {item['error']}"
        out.append(item)
    assert done, "the stream did not end with [DONE]"
    return out


def streamed_text(items: list[dict[str, Any]]) -> str:
    """The text of a completions or chat stream's chunks."""
    parts = []
    for item in items:
        for choice in item.get("choices", []):
            parts.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    return "".join(parts)
