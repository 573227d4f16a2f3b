"""The service on a real uvicorn server in a background thread of this process (127.0.0.1,
a free port): for tests, the bench, and programs that embed the service."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from lookahead.server import ServeConfig, create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    url: str  # http://127.0.0.1:PORT
    app: Any

    @property
    def service(self) -> Any:
        return self.app.state.service

    def client(self, key: str | None = None, timeout: float = 120) -> Any:
        """An httpx.Client on this server (httpx is a test and bench dependency)."""
        import httpx

        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)


@contextmanager
def serving(
    config: ServeConfig, loader: Callable[[], Any], wait_ready: bool = True, ready_timeout: float = 600
) -> Iterator[Running]:
    app = create_app(config, loader)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    running = Running(f"http://127.0.0.1:{port}", app)
    try:
        if wait_ready:
            assert app.state.service.ready.wait(ready_timeout), app.state.service.load_error
        yield running
    finally:
        server.should_exit = True
        thread.join(60)
