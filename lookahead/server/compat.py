"""What llama-server's clients expect of a server beyond its routes:

- the OpenAI chat and model routes also without the `/v1` prefix (`/chat/completions`,
  `/models`), as llama-server serves them: an OpenAI chat client whose base URL lacks `/v1`
  works;
- CORS, so a browser page on another origin (a web UI, an editor in a browser) can call
  the service: an allowed origin (`--cors-origins`: any by default) is allowed back, with
  credentials, and the preflight (`OPTIONS`) is answered without an API key, as
  llama-server answers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# path without the prefix -> the route that serves it
# (`/completions` without the prefix is llama.cpp's own completion in llama-server, and so
# it is here: see native_routes.)
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
    """CORS as llama-server answers it: an allowed caller's origin is allowed back, with
    credentials; a preflight (OPTIONS with an Origin) is answered here, 200, without an API
    key (the browser sends none with it), naming every method and header as allowed. A
    preflight from an origin not allowed gets the same 200 without any `Access-Control-*`
    header (the browser then refuses the call), and so does any other request from it. With
    an API key set, a page on an allowed origin still needs the key to get an answer."""

    METHODS = "GET, POST, DELETE, OPTIONS"

    def __init__(self, app: ASGIApp, origins: Sequence[str] = ("*",)) -> None:
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
        preflight = scope.get("method") == "OPTIONS" and b"access-control-request-method" in headers
        if not origin_allowed(origin.decode("latin-1"), self.origins):
            if preflight:
                await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
            else:
                await self.app(scope, receive, send)
            return
        # the names capitalized as llama-server writes them (some clients compare them so)
        allow = [
            (b"Access-Control-Allow-Origin", origin),
            (b"Access-Control-Allow-Credentials", b"true"),
            (b"Vary", b"Origin"),
        ]
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


def install(app: FastAPI, cors_origins: Sequence[str] = ("*",)) -> None:
    """Add the unprefixed routes and CORS to the app (CORS outermost)."""
    app.add_middleware(Unprefixed)
    app.add_middleware(Cors, origins=cors_origins)
