"""uvicorn with SIGTERM meaning "drain, then exit", within a grace period.

An orchestrator (Kubernetes, docker compose) stops a replica with SIGTERM and kills it with
SIGKILL a grace period later (30 s by default in both). On SIGTERM this server:

1. begins draining (`replica.Drain`): `/health` turns 503, so the load balancer's checks take
   the replica out; a new request gets 503 + `Retry-After` and is retried elsewhere;
2. waits for the requests in flight, queued ones included, up to `grace - RESERVE_S` seconds;
3. past that, ends the ones still running (`on_overdue`: they end with a "shutting down" error,
   not a cut connection);
4. exits the usual way: uvicorn closes its connections, the service saves its index and frees
   the model;
5. if the process is still there just before the grace period ends (a request stuck in C
   code that nothing can interrupt, a shutdown step that hangs), it logs so and ends with
   `os._exit(1)` (`on_deadline`): the orchestrator's SIGKILL would come a moment later anyway.

A second SIGTERM, or SIGINT, is uvicorn's own handling (a second SIGINT forces the exit).
"""

from __future__ import annotations

import contextlib
import logging
import os
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
HARD_EXIT_EARLY_S = 0.5  # a process still there this long before the grace period ends exits at once


class DrainingServer(uvicorn.Server):
    """uvicorn.Server whose first SIGTERM drains (see the module's docstring) before exiting."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Drain,
        grace: float,
        on_overdue: Callable[[], None] | None = None,
        on_deadline: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace = grace
        self.on_overdue = on_overdue
        self.on_deadline = on_deadline  # called if the process is still there as the grace period ends

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.drain.draining:
            self.drain.begin()
            threading.Thread(target=self._drain_then_exit, name="drain", daemon=True).start()
            if self.on_deadline is not None:
                threading.Thread(target=self._deadline, args=(time.monotonic() + self.grace,), name="deadline",
                                 daemon=True).start()
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


    def _deadline(self, deadline: float) -> None:
        time.sleep(max(0.0, deadline - time.monotonic() - min(HARD_EXIT_EARLY_S, self.grace / 10)))
        log.error(
            "still running %.1f s after SIGTERM (%d request(s) in flight): exiting now, without finishing "
            "the shutdown", self.grace, self.drain.inflight,
        )
        assert self.on_deadline is not None
        self.on_deadline()


def hard_exit() -> None:
    """End the process at once (no cleanup, no joining of stuck threads), its log flushed."""
    for handler in logging.getLogger().handlers + log.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(1)


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
    """A DrainingServer for an app made by `create_app`: near the grace period's end, the worker
    is closed, which ends the running generations with a "shutting down" error; at its end,
    a process still there exits at once (`hard_exit`)."""
    service = app.state.service

    def overdue() -> None:
        if service.worker is not None:
            service.worker.close(0)

    return DrainingServer(config, app.state.drain, grace, overdue, hard_exit)
