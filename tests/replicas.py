"""`lookahead serve` replicas as real processes behind a real HAProxy, on 127.0.0.1 ports,
configured from the shipped `deploy/haproxy.cfg` (only addresses and check intervals change)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lookahead.server.background import free_port
from lookahead.server.replica import REPLICA_HEADER
from lookahead.server.spawn import ServeProcess

ROOT = Path(__file__).resolve().parent.parent
HAPROXY_CFG = ROOT / "deploy" / "haproxy.cfg"
# Debian installs it in /usr/sbin, which a normal user's PATH may lack
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


class Replica(ServeProcess):
    """One `lookahead serve` replica: its name, its keys and its index file in `workdir`."""

    def __init__(self, name: str, port: int, model: Path, keys_file: Path, workdir: Path) -> None:
        self.name, self.keys_file, self.workdir = name, keys_file, workdir
        args = ["--model", str(model), "--threads", "2", "--parallel", "1", "--n-ctx", "1024",
                "--replica-id", name, "--index-file", str(self.index_file), "--api-key-file", str(keys_file),
                # a drain waits the grace period less 5 s for the streams in flight: 25 s, so a
                # stream whose client reads it slowly on a loaded machine still ends whole
                "--grace-period", "30", "--log-level", "warning"]  # fmt: skip
        super().__init__(args, workdir / f"{name}.log", port)

    @property
    def index_file(self) -> Path:
        return self.workdir / f"{self.name}.index.json"

    def read_log(self) -> str:
        return self.output()[-3000:]

    def queue_depth(self) -> float:
        key = self.keys_file.read_text().split()[0]  # /metrics asks for any API key
        text = httpx.get(self.url + "/metrics", headers=auth(key), timeout=5).text
        found = re.search(r"^lookahead_queue_depth ([0-9.]+)$", text, re.M)
        return float(found.group(1)) if found else 0.0


def haproxy_config(port: int, stats_port: int, replicas: list[Replica]) -> str:
    """The shipped configuration on loopback ports, with checks every 200 ms (tests only)."""
    text = HAPROXY_CFG.read_text()
    text = text.replace("bind :8000", f"bind 127.0.0.1:{port}").replace("bind :8404", f"bind 127.0.0.1:{stats_port}")
    assert "inter 2s fall 2 rise 2" in text
    text = text.replace("inter 2s fall 2 rise 2", "inter 200ms fall 2 rise 1")
    for r in replicas:
        assert f" {r.name}:8000" in text, r.name
        text = text.replace(f" {r.name}:8000", f" 127.0.0.1:{r.port}")
    assert not re.search(r"^\s*server .*:8000", text, re.M), "a server line was not rewritten"
    return text


@dataclass
class Cluster:
    url: str
    replicas: dict[str, Replica]
    haproxy: subprocess.Popen[str]
    owners: dict[str, str] = field(default_factory=dict)  # key -> replica, as first seen

    def post(self, key: str, body: dict[str, Any], retries: int = 3) -> tuple[httpx.Response, int]:
        """A completion through the balancer, as a client should send it: a 502/503 or a
        dropped connection is retried (after a short wait). The response and the retries used."""
        last: Exception | None = None
        for attempt in range(retries + 1):
            try:
                r = httpx.post(self.url + "/v1/completions", json=body, headers=auth(key), timeout=60)
                if r.status_code not in (502, 503) or attempt == retries:
                    return r, attempt
            except httpx.TransportError as exc:
                last = exc
            time.sleep(0.5)
        raise AssertionError(f"no answer after {retries} retries: {last!r}")

    def replica_of(self, key: str) -> str:
        r, _ = self.post(key, {"prompt": "hi", "max_tokens": 1})
        assert r.status_code == 200, r.text
        return r.headers[REPLICA_HEADER]

    def wait_until_served_by(self, key: str, name: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.replica_of(key) != name:
            assert time.monotonic() < deadline, f"{key} never came back to {name}"
            time.sleep(0.2)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def start_cluster(model: Path, workdir: Path, keys: list[str], n: int = 3) -> Cluster:
    keys_file = workdir / "keys"
    keys_file.write_text("\n".join(keys) + "\n")
    replicas = [Replica(f"lookahead-{i + 1}", free_port(), model, keys_file, workdir) for i in range(n)]
    # The first replica alone until it has answered once: a model's cost curve is measured
    # at its first drafting request and cached for every later server; three replicas
    # measuring at once on a small machine cached a curve so steep that none drafted. Two
    # threads, not one: on a 2-vCPU EPYC one thread's batch of 2 cost 3x one token (two
    # threads': 1.9x), so the repeated edit the tests expect drafted was not worth drafting.
    first, rest = replicas[0], replicas[1:]
    first.start().wait_healthy()
    body = {"prompt": "def add(a, b):", "max_tokens": 4, "temperature": 0}
    auth = {"Authorization": f"Bearer {keys[0]}"}
    r0 = httpx.post(first.url + "/v1/completions", json=body, headers=auth, timeout=300)
    assert r0.status_code == 200, r0.text
    for r in rest:
        r.start()
    for r in rest:
        r.wait_healthy()
    port, stats = free_port(), free_port()
    cfg = workdir / "haproxy.cfg"
    cfg.write_text(haproxy_config(port, stats, replicas))
    assert HAPROXY is not None
    check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(workdir / "haproxy.log", "w")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(url + "/health", timeout=2)
            break
        except httpx.TransportError:
            assert proc.poll() is None, (workdir / "haproxy.log").read_text()
            assert time.monotonic() < deadline, "haproxy did not start"
            time.sleep(0.1)
    return Cluster(url, {r.name: r for r in replicas}, proc)


def stop_cluster(cluster: Cluster) -> None:
    for r in cluster.replicas.values():
        r.kill()
    if cluster.haproxy.poll() is None:
        cluster.haproxy.terminate()
        try:
            cluster.haproxy.wait(10)
        except subprocess.TimeoutExpired:
            cluster.haproxy.kill()
