"""What llama-server's clients expect of a server beyond its routes:

- the OpenAI chat and model routes also without the `/v1` prefix (`/chat/completions`,
  `/models`), as llama-server serves them: an OpenAI chat client whose base URL lacks `/v1`
  works;
- CORS, so a browser page on another origin (a web UI, an editor in a browser) can call
  the service, when `--cors-origins` allows that origin. The default allows pages on this
  machine only (`localhost`): a local model server is reachable from every web page its
  user opens, and without that limit any of them could drive it (see `Cors`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lookahead.server.errors import error_body

# path without the prefix -> the route that serves it
# (`/completions` without the prefix is llama.cpp's own completion in llama-server, and so
# it is here: see llamacpp/routes.py.)
UNPREFIXED = {
    "/chat/completions": "/v1/chat/completions",
    "/chat/completions/input_tokens": "/v1/chat/completions/input_tokens",
    "/models": "/v1/models",
}


class Unprefixed:
    """Serve `/completions` as `/v1/completions` (and the others in UNPREFIXED)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            target = UNPREFIXED.get(path.rstrip("/") or path)
            if target is not None:
                scope = dict(scope, path=target, raw_path=target.encode())
        await self.app(scope, receive, send)


LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def is_local_origin(origin: str) -> bool:
    """Whether a browser Origin (`http://localhost:3000`) is a page on this machine."""
    try:
        return urlsplit(origin).hostname in LOCAL_HOSTS
    except ValueError:
        return False


def origin_allowed(origin: str, allowed: Sequence[str]) -> bool:
    """Whether `origin` may call the service: "*" allows any, "localhost" any page on this
    machine (any scheme and port, as llama-server reads it), any other entry that origin
    exactly (`https://app.example.com`, no trailing slash)."""
    return any(e == "*" or e == origin or (e == "localhost" and is_local_origin(origin)) for e in allowed)


class Cors:
    """CORS, and the guard against pages the service does not trust.

    An allowed caller's origin is allowed back; with credentials (cookies, HTTP auth) only
    when it was named (`localhost` or an exact origin), never for `*`, which would let any
    page read answers with the cookies of a proxy in front. A preflight (OPTIONS with an
    Origin) is answered here, 200, without an API key (the browser sends none with it),
    naming every method and header as allowed; a preflight from an origin not allowed gets
    the same 200 without any `Access-Control-*` header, so the browser refuses the call.

    A request that changes something (POST, DELETE, ...) from an origin not allowed is a 403
    before it reaches a route: a page can send a "simple" POST (a form, `text/plain`) with no
    preflight, and browsers send its Origin, also on the same-origin POSTs of a page whose
    name was rebound to this machine (DNS rebinding), so without this the page could make
    the model work for it even though it cannot read the answer. Reads (GET, HEAD) from such
    an origin are answered without CORS headers: the browser keeps the answer from the page.
    With an API key set, a page on an allowed origin still needs the key to get an answer."""

    METHODS = "GET, POST, DELETE, OPTIONS"
    SAFE = ("GET", "HEAD", "OPTIONS")

    def __init__(self, app: ASGIApp, origins: Sequence[str] = ("localhost",)) -> None:
        self.app = app
        self.origins = tuple(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET")
        preflight = method == "OPTIONS" and b"access-control-request-method" in headers
        text = origin.decode("latin-1")
        if not origin_allowed(text, self.origins):
            if preflight:
                await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
            elif method not in self.SAFE:
                await _forbidden(send, text)
            else:
                await self.app(scope, receive, send)
            return
        # the names capitalized as llama-server writes them (some clients compare them so)
        allow = [(b"Access-Control-Allow-Origin", origin), (b"Vary", b"Origin")]
        if credentials_allowed(text, self.origins):
            allow.append((b"Access-Control-Allow-Credentials", b"true"))
        if preflight:
            allow += [
                (b"Access-Control-Allow-Methods", self.METHODS.encode()),
                (b"Access-Control-Allow-Headers", b"*"),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": allow})
            await send({"type": "http.response.body", "body": b""})
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", []), *allow])
            await send(message)

        await self.app(scope, receive, with_cors)


def credentials_allowed(origin: str, allowed: Sequence[str]) -> bool:
    """Whether the origin was named (an exact entry, or `localhost` for a page on this
    machine): `*` alone never allows credentials."""
    return any(e == origin or (e == "localhost" and is_local_origin(origin)) for e in allowed)


async def _forbidden(send: Send, origin: str) -> None:
    message = f"requests from the web page at {origin} are not allowed (see --cors-origins)"
    data = json.dumps(error_body(403, message, code="origin_not_allowed")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def install(app: FastAPI, cors_origins: Sequence[str] = ("localhost",)) -> None:
    """Add the unprefixed routes and CORS to the app (CORS outermost)."""
    app.add_middleware(Unprefixed)
    app.add_middleware(Cors, origins=cors_origins)
