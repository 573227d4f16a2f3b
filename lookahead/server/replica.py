"""What one replica behind a load balancer adds to the service: who it is, and how it leaves.

- Every response carries `X-Lookahead-Replica: <id>`, and /metrics has
  `lookahead_replica_info{replica="<id>"} 1`, so a client, a log line or a dashboard can tell
  which replica answered (and so which one holds a tenant's learned index).
- `Drain` counts the requests in flight. Once draining begins (SIGTERM, see `drain.py`), a new
  request is answered at once with 503, `Retry-After` and `Connection: close`, in OpenAI's
  error shape: a load balancer retries it on another replica, a client may retry it. Requests
  already in flight, queued ones included, run to their end.
- Readiness apart from liveness: `/health` is 503 while the model loads (as before) and 404
  while draining. Either takes the replica out of rotation (a Kubernetes readiness probe wants
  2xx-3xx); HAProxy's `http-check disable-on-404` reads the 404 as "stop sending new requests,
  let the running ones finish" rather than "down", which would cut the running streams.
  `/livez` is 200 as long as the process answers at all, so an orchestrator does not kill a
  replica that is loading or draining.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from prometheus_client import Gauge, Info
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lookahead.server import errors

if TYPE_CHECKING:
    from lookahead.server.service import Service

REPLICA_HEADER = "X-Lookahead-Replica"
# answered while draining: the load balancer's and the orchestrator's probes, and the scraper
PROBES = frozenset({"/health", "/livez", "/metrics"})
RETRY_AFTER_S = 1  # another replica can take the request at once


def default_replica_id() -> str:
    """The host's name: in a container or a pod, its own name."""
    return socket.gethostname() or "lookahead"


class Drain:
    """Requests in flight, and whether new ones are still taken. Thread-safe."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._inflight = 0
        self._draining = False

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def inflight(self) -> int:
        with self._cv:
            return self._inflight

    def enter(self) -> bool:
        """Count one request in; False (and nothing counted) once draining."""
        with self._cv:
            if self._draining:
                return False
            self._inflight += 1
            return True

    def leave(self) -> None:
        with self._cv:
            self._inflight -= 1
            self._cv.notify_all()

    def begin(self) -> None:
        """Take no new requests from now on."""
        with self._cv:
            self._draining = True
            self._cv.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until no request is in flight (True) or `timeout` seconds pass (False)."""
        with self._cv:
            return self._cv.wait_for(lambda: self._inflight == 0, timeout)


class ReplicaMiddleware:
    """Tags every response with the replica's id; while draining, turns new requests away."""

    def __init__(self, app: ASGIApp, replica_id: str, drain: Drain) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.lower().encode(), replica_id.encode("latin-1", "replace"))
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        path = scope.get("path", "")
        if path in PROBES:
            if path == "/health" and self.drain.draining:
                await _json(tagged, 404, {"status": "draining"}, close=False)
                return
            await self.app(scope, receive, tagged)
            return
        if not self.drain.enter():
            body = errors.error_body(503, "this replica is shutting down; retry the request", code="draining")
            await _json(tagged, 503, body, close=True)
            return
        try:
            await self.app(scope, receive, tagged)
        finally:
            self.drain.leave()


async def _json(send: Send, status: int, body: object, close: bool) -> None:
    data = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def install(app: FastAPI, service: Service, replica_id: str) -> Drain:
    """Wire a replica's id, drain and liveness route into the app; the Drain is app.state.drain."""
    drain = Drain()
    app.state.drain = drain
    app.state.replica_id = replica_id
    registry = service.metrics.registry
    Info("lookahead_replica", "This replica's id (--replica-id)", registry=registry).info({"replica": replica_id})
    draining = Gauge("lookahead_draining", "1 once the replica has begun draining (SIGTERM)", registry=registry)
    draining.set_function(lambda: float(drain.draining))
    app.add_middleware(ReplicaMiddleware, replica_id=replica_id, drain=drain)

    async def livez() -> JSONResponse:
        """Liveness: the process answers (loading or draining included)."""
        return JSONResponse({"status": "alive", "replica": replica_id})

    app.add_api_route("/livez", livez, methods=["GET"])
    return drain
