"""What llama-server's clients expect of a server beyond its routes:

- the OpenAI chat and model routes also without the `/v1` prefix (`/chat/completions`,
  `/models`), as llama-server serves them: an OpenAI chat client whose base URL lacks `/v1`
  works;
- CORS, so a browser page on another origin (a web UI, an editor in a browser) can call
  the service: the request's origin is allowed back, with credentials, and the preflight
  (`OPTIONS`) is answered without an API key, as llama-server answers it.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# path without the prefix -> the route that serves it
# (`/completions` without the prefix is llama.cpp's own completion in llama-server, and so
# it is here: see native_routes.)
UNPREFIXED = {
    "/chat/completions": "/v1/chat/completions",
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


class Cors:
    """CORS as llama-server answers it: the caller's origin is allowed back, with
    credentials; a preflight (OPTIONS with an Origin) is answered here, 200, without an API
    key (the browser sends none with it), naming every method and header as allowed. With
    an API key set, a page on another origin still needs the key to get an answer."""

    METHODS = "GET, POST, DELETE, OPTIONS"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        # the names capitalized as llama-server writes them (some clients compare them so)
        allow = [
            (b"Access-Control-Allow-Origin", origin),
            (b"Access-Control-Allow-Credentials", b"true"),
            (b"Vary", b"Origin"),
        ]
        if scope.get("method") == "OPTIONS" and b"access-control-request-method" in headers:
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


def install(app: FastAPI) -> None:
    """Add the unprefixed routes and CORS to the app (CORS outermost)."""
    app.add_middleware(Unprefixed)
    app.add_middleware(Cors)
