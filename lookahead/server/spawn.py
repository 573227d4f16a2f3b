"""`lookahead serve` as a process of its own on a loopback port, as a user runs it: start it,
wait until `/health` says it is ready, signal or stop it, read its log and its memory.

For tests and benches that need what an in-process server (`background.serving`) cannot give:
a real SIGTERM, the process's own exit status, and the service's RSS apart from its clients'.
The process runs this checkout's code (its working directory is the one holding the
`lookahead` package), and its stdout and stderr go to a file, so a chatty server never blocks
on a full pipe.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from lookahead.server.background import free_port

CHECKOUT = Path(__file__).resolve().parents[2]  # the folder holding the `lookahead` package


class ServeProcess:
    """One `lookahead serve ARGS --port PORT` process; its output goes to `log`."""

    def __init__(self, args: Sequence[str], log: Path, port: int | None = None) -> None:
        self.args = list(args)
        self.log = log
        self.port = port or free_port()
        self.proc: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def start(self) -> ServeProcess:
        self._log = open(self.log, "a")  # noqa: SIM115 - closed in wait() / kill()
        command = [sys.executable, "-m", "lookahead.cli.main", "serve", *self.args, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            command, cwd=CHECKOUT, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, text=True
        )
        return self

    def wait_healthy(self, timeout: float = 180) -> None:
        """Until `/health` answers 200; RuntimeError (with the log's tail) if the process exits
        or `timeout` seconds pass first."""
        import httpx  # a test and bench dependency, not the service's

        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if not self.alive:
                raise RuntimeError(f"the server exited ({self.returncode}): {self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server was not healthy within {timeout:g} s: {self.output()[-3000:]}")
            time.sleep(0.2)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None, "not started"
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        """The exit status, once the process ends (subprocess.TimeoutExpired past `timeout`)."""
        assert self.proc is not None, "not started"
        code = self.proc.wait(timeout)
        self._close_log()
        return code

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, as an orchestrator stops it (the service drains), then its exit status."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL if it still runs (as in a crash: no drain, no last save)."""
        if self.alive:
            os.kill(self.pid, signal.SIGKILL)
            assert self.proc is not None
            self.proc.wait(30)
        self._close_log()

    def output(self) -> str:
        """Everything it wrote to stdout and stderr so far."""
        if self._log is not None:
            self._log.flush()
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def rss_mb(self) -> float:
        """Its resident memory now, in MiB (Linux; 0.0 where /proc says nothing)."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0.0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.kill()
