"""Requests read the way llama-server reads them, on every route: bodies as JSON, HEAD as GET.

- **Whatever the content type.** `curl -d '{...}'` sends `application/x-www-form-urlencoded`,
  and llama-server reads such a body as JSON all the same (Ollama's examples send it so
  too); users' scripts rely on it. No route here takes a form, so a POST body that does not say
  it is JSON is read as JSON (and one that is not JSON is the usual 400).
- **A lone UTF-16 surrogate is a 400 naming its field.** JSON may spell a string with
  `\\ud83d` and no second half. Python reads it into a string that is not text (it has no
  UTF-8): the tokenizer cannot take it, and an answer that echoed it (a stop string in
  `generation_settings`) failed to render, a 500. Checked here once for every route, before
  any route reads the body. Bodies without a `\\uD8..`-`\\uDF..` escape, nearly all, are not
  parsed twice; one with such an escape (an emoji is spelled so too) is parsed in a worker
  thread, so a large body does not hold up the event loop. (llama-server answers a lone
  surrogate with a 500.)
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lookahead.server.errors import error_body

# a JSON escape of a UTF-16 surrogate (of a valid pair too: only parsing tells them apart)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_BODY_METHODS = {"POST", "PUT", "PATCH"}


def _lone_surrogate(value: Any, path: str) -> str | None:
    """The path of the first string in `value` (a key too) with a lone surrogate, else None."""
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    items = enumerate(value) if isinstance(value, list) else value.items() if isinstance(value, dict) else ()
    for key, item in items:
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        if isinstance(key, str) and _SURROGATE.search(key):
            return where
        found = _lone_surrogate(item, where)
        if found is not None:
            return found
    return None


def lone_surrogate(body: bytes) -> str | None:
    """Where the JSON `body` holds a lone surrogate (a field's path, "" for the body itself),
    or None: also when it is not JSON (the route's own parser then answers for it)."""
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        data = json.loads(body)
    except ValueError:  # not JSON (UnicodeDecodeError included): left to the route's parser
        return None
    return _lone_surrogate(data, "")


def _as_json(scope: Scope) -> Scope:
    """`scope` with content-type application/json unless it already names JSON."""
    headers = [
        (name, value)
        for name, value in scope.get("headers", [])
        if not (name == b"content-type" and b"json" not in value.lower())
    ]
    if not any(name == b"content-type" for name, _ in headers):
        headers.append((b"content-type", b"application/json"))
    return {**scope, "headers": headers}


class JSONBody:
    """Reads each POST body whole, as every route does anyway: a 400 for a lone surrogate,
    else the app gets the body under a JSON content type; after the body, the app's
    `receive` is the client's own (a streamed answer still hears the client leave)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left (or the body limit refused it)
                await self.app(_as_json(scope), _then(message, receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        where = await run_in_threadpool(lone_surrogate, body) if _SURROGATE_ESCAPE.search(body) else None
        if where is not None:
            await _refuse(send, where)
            return
        first: Message = {"type": "http.request", "body": body, "more_body": False}
        await self.app(_as_json(scope), _then(first, receive), send)


async def _refuse(send: Send, where: str) -> None:
    """The 400 for a lone surrogate at `where`, in OpenAI's error shape."""
    field = f"{where}: " if where else ""
    message = f"{field}the text holds a lone UTF-16 surrogate (half of a pair), which is not valid Unicode"
    body = json.dumps(error_body(400, message, where or None)).encode()
    await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def _then(first: Message, receive: Receive) -> Receive:
    """A receive that answers `first` once, then the client's own messages."""
    pending = [first]

    async def next_message() -> Message:
        return pending.pop() if pending else await receive()

    return next_message


class HeadAsGet:
    """HEAD answered as the GET of the same path without its body, as llama-server answers
    it: uptime monitors and load balancers probe with HEAD."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
