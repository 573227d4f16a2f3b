"""uvicorn with SIGTERM meaning "drain, then exit", within a grace period.

An orchestrator (Kubernetes, docker compose) stops a replica with SIGTERM and kills it with
SIGKILL a grace period later (30 s by default in both). On SIGTERM this server:

1. begins draining (`replica.Drain`): `/health` turns 503, so the load balancer's checks take
   the replica out; a new request gets 503 + `Retry-After` and is retried elsewhere;
2. waits for the requests in flight, queued ones included, up to `grace - RESERVE_S` seconds;
3. past that, ends the ones still running (`on_overdue`: they end with a "shutting down" error,
   not a cut connection);
4. exits the usual way: uvicorn closes its connections, the service saves its index and frees
   the model.

A second SIGTERM, or SIGINT, is uvicorn's own handling (a second SIGINT forces the exit).
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from lookahead.errors import ConfigError
from lookahead.server.replica import Drain, default_replica_id

log = logging.getLogger("lookahead.server")

RESERVE_S = 5.0  # of the grace period, kept for closing connections and saving the index
CLOSE_S = 3  # uvicorn's own wait for connections once a drain is over (SIGINT keeps its own)


class DrainingServer(uvicorn.Server):
    """uvicorn.Server whose first SIGTERM drains (see the module's docstring) before exiting."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Drain,
        grace: float,
        on_overdue: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace = grace
        self.on_overdue = on_overdue

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.drain.draining:
            self.drain.begin()
            threading.Thread(target=self._drain_then_exit, name="drain", daemon=True).start()
            return
        super().handle_exit(sig, frame)

    def _drain_then_exit(self) -> None:
        t0 = time.monotonic()
        log.info("SIGTERM: draining %d request(s) in flight (at most %.0f s)", self.drain.inflight, self.grace)
        if not self.drain.wait_idle(max(0.0, self.grace - RESERVE_S)):
            log.warning("grace period over: ending %d request(s) still running", self.drain.inflight)
            if self.on_overdue is not None:
                self.on_overdue()
        log.info("drained in %.1f s; exiting", time.monotonic() - t0)
        self.config.timeout_graceful_shutdown = CLOSE_S  # what is left of the grace period
        self.should_exit = True


def check_replica(replica_id: str | None, grace_period: float) -> str:
    """The replica id to serve under (the host's name when not given), after checking the
    id fits an HTTP header and the grace period is positive."""
    if not 0 < grace_period <= 3600:
        raise ConfigError(f"--grace-period must be > 0 and at most 3600 seconds, got {grace_period}")
    if replica_id is None:
        return default_replica_id()
    if not re.fullmatch(r"[\x21-\x7e]{1,128}", replica_id):
        raise ConfigError(f"--replica-id must be 1-128 visible ASCII characters, no spaces, got {replica_id!r}")
    return replica_id


def draining_server(config: uvicorn.Config, app: Any, grace: float) -> DrainingServer:
    """A DrainingServer for an app made by `create_app`: past the grace period, the worker is
    closed, which ends the running generations with a "shutting down" error."""
    service = app.state.service

    def overdue() -> None:
        if service.worker is not None:
            service.worker.close(0)

    return DrainingServer(config, app.state.drain, grace, overdue)
