"""What llama-server's clients expect of a server beyond its routes:

- the OpenAI routes also without the `/v1` prefix (`/completions`, `/chat/completions`,
  `/models`), as llama-server serves them: an OpenAI client whose base URL lacks `/v1`
  works;
- CORS, so a browser page on another origin (a web UI, an editor in a browser) can call
  the service: the request's origin is allowed back, with credentials, and the preflight
  (`OPTIONS`) is answered without an API key, as llama-server answers it.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

# path without the prefix -> the route that serves it
UNPREFIXED = {
    "/completions": "/v1/completions",
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


def install(app: FastAPI) -> None:
    """Add the unprefixed routes and CORS to the app (CORS outermost)."""
    app.add_middleware(Unprefixed)
    app.add_middleware(
        CORSMiddleware,
        allow_origin_regex=".*",  # the caller's origin, echoed back (credentials need that, not "*")
        allow_credentials=True,
        allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
        allow_headers=["*"],
    )
