"""Keep a quiet event stream alive: while a stream has nothing to say (its request waits in
the queue, or its prompt is being read), send an SSE comment line every few seconds, so that
a proxy's idle timeout (HAProxy's `timeout server`, ingress-nginx's `proxy-read-timeout`)
does not cut it. A comment (`: ping`) is invisible to SSE clients, and to clients that read
only the `data:` lines (llama.vim, llama.vscode, llama.cpp's own test client). The OpenAI
routes get the same from sse-starlette's ping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

PING = ": ping\n\n"


async def with_pings(items: AsyncIterator[str], interval: float) -> AsyncIterator[str]:
    """`items`, with PING written after every `interval` seconds without one; 0 or less: none.

    The next item is awaited in a task of its own, so a ping never interrupts the stream's
    generator (a timeout that cancelled it mid-await would end it)."""
    if interval <= 0:
        async for item in items:
            yield item
        return
    pending: asyncio.Future[str] | None = None
    try:
        while True:
            pending = asyncio.ensure_future(items.__anext__())
            while True:
                done, _ = await asyncio.wait({pending}, timeout=interval)
                if done:
                    break
                yield PING
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield item
    finally:
        if pending is not None:  # the client went away while an item was awaited
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
