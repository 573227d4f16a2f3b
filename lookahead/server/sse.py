"""The one writer of server-sent events, for both dialects: each payload a `data:` line, and
while a stream has nothing to say (its request waits in the queue, or its prompt is being
read) an SSE comment every `ping` seconds, so that a proxy's idle timeout (HAProxy's
`timeout server`, ingress-nginx's `proxy-read-timeout`) does not cut it. A comment is
invisible to SSE clients and to clients that read only the `data:` lines (llama.vim,
llama.vscode, llama.cpp's own test client). A client that stops reading for `SEND_TIMEOUT_S`
ends its stream, and one that goes away ends it at once (the generator's `finally` cancels
its job).

What each dialect's clients see is its own, byte for byte: OpenAI's lines end in CRLF and
its stream in `data: [DONE]` (the caller's last payload); llama.cpp's end in LF with no end
marker, its keep-alive comment a bare `: ping`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from sse_starlette.sse import EventSourceResponse, ServerSentEvent

SEND_TIMEOUT_S = 60


@dataclass(frozen=True)
class Dialect:
    """How one API writes its event stream."""

    sep: str  # the line separator
    ping: str | None  # the keep-alive comment's text (None: a timestamped `ping - ...`)


OPENAI = Dialect(sep="\r\n", ping=None)
LLAMACPP = Dialect(sep="\n", ping="ping")


def sse_response(payloads: AsyncIterator[str], dialect: Dialect, ping: float) -> EventSourceResponse:
    """A streaming response writing each payload as one event's data; `ping` <= 0: no pings."""

    async def events() -> AsyncIterator[dict[str, str]]:
        try:
            async for data in payloads:
                yield {"data": data}
        finally:
            aclose = getattr(payloads, "aclose", None)
            if aclose is not None:
                await aclose()

    comment = dialect.ping
    return EventSourceResponse(
        events(),
        ping=max(0.0, ping),
        sep=dialect.sep,
        ping_message_factory=None if comment is None else (lambda: ServerSentEvent(comment=comment, sep=dialect.sep)),
        send_timeout=SEND_TIMEOUT_S,
    )
