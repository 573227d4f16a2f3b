"""One replica behind a load balancer: its id on every response and in /metrics, readiness
apart from liveness, and the drain on SIGTERM (503 + Retry-After for new requests, running
ones finish, the index is saved, the process exits within its grace period)."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

import lookahead.server.drain as drain_mod
from lookahead.errors import ConfigError, LookaheadError
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from lookahead.server.drain import DrainingServer, check_replica
from lookahead.server.replica import REPLICA_HEADER, Drain
from lookahead.server.spawn import ServeProcess

# greedy, the small model counts on and on: a stream that outlasts the test's actions
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"


@pytest.fixture
def loading() -> Iterator[Running]:
    """A service whose model never finishes loading: every route but the model's answers."""
    release = threading.Event()

    def never() -> Any:
        release.wait(60)
        raise LookaheadError("the test is over")

    config = ServeConfig(model_id="m", api_keys=("k",), replica_id="replica-7")
    try:
        with serving(config, never, wait_ready=False) as running:
            yield running
    finally:
        release.set()


def test_every_response_names_the_replica(loading: Running) -> None:
    with loading.client("k") as c:
        answers = [
            c.get("/health"),  # 503 loading
            c.get("/livez"),
            c.get("/metrics"),
            c.post("/v1/completions", json={"prompt": "hi"}),  # 503 loading
            c.get("/v1/models", headers={"Authorization": "Bearer wrong"}),  # 401
            c.get("/no/such/route"),  # 404
        ]
    assert [r.status_code for r in answers] == [503, 200, 200, 503, 401, 404]
    assert {r.headers.get(REPLICA_HEADER) for r in answers} == {"replica-7"}


def test_liveness_is_apart_from_readiness(loading: Running) -> None:
    with loading.client() as c:
        assert c.get("/health").status_code == 503
        live = c.get("/livez")
    assert live.status_code == 200 and live.json() == {"status": "alive", "replica": "replica-7"}


def test_metrics_carry_the_replica_id_and_the_drain(loading: Running) -> None:
    with loading.client("k") as c:  # /metrics asks for an API key when there are keys
        before = c.get("/metrics").text
        loading.app.state.drain.begin()
        after = c.get("/metrics").text
    assert 'lookahead_replica_info{replica="replica-7"} 1.0' in before
    assert "lookahead_draining 0.0" in before and "lookahead_draining 1.0" in after


def test_a_draining_replica_turns_new_requests_away_but_answers_probes(loading: Running) -> None:
    loading.app.state.drain.begin()
    with loading.client("k") as c:
        r = c.post("/v1/completions", json={"prompt": "hi"})
        health = c.get("/health")
        live = c.get("/livez")
    assert r.status_code == 503
    assert r.headers["Retry-After"] == "1" and r.headers["Connection"] == "close"
    assert r.json()["error"]["code"] == "draining" and r.json()["error"]["type"] == "service_unavailable"
    assert health.status_code == 404 and health.json() == {"status": "draining"}
    assert live.status_code == 200
    assert {x.headers[REPLICA_HEADER] for x in (r, health, live)} == {"replica-7"}


def test_drain_waits_for_the_requests_in_flight() -> None:
    drain = Drain()
    assert drain.enter() and drain.enter()
    drain.begin()
    assert not drain.enter()  # nothing new once draining
    assert drain.inflight == 2
    assert not drain.wait_idle(0.05)
    threading.Timer(0.1, drain.leave).start()
    threading.Timer(0.2, drain.leave).start()
    t0 = time.monotonic()
    assert drain.wait_idle(5)
    assert 0.15 < time.monotonic() - t0 < 2


def _server(grace: float, drain: Drain, overdue: list[str]) -> DrainingServer:
    async def nothing(scope: Any, receive: Any, send: Any) -> None:
        pass

    return DrainingServer(uvicorn.Config(nothing), drain, grace, lambda: overdue.append("overdue"))


def _until(cond: Any, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_sigterm_drains_then_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drain_mod, "RESERVE_S", 0.0)
    drain, overdue = Drain(), []
    server = _server(5.0, drain, overdue)
    assert drain.enter()
    server.handle_exit(signal.SIGTERM, None)
    assert drain.draining and not server.should_exit  # still serving the one in flight
    time.sleep(0.2)
    assert not server.should_exit
    drain.leave()
    assert _until(lambda: server.should_exit)
    assert overdue == []


def test_past_the_grace_period_the_running_requests_are_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drain_mod, "RESERVE_S", 0.0)
    drain, overdue = Drain(), []
    server = _server(0.2, drain, overdue)
    assert drain.enter()  # never leaves
    t0 = time.monotonic()
    server.handle_exit(signal.SIGTERM, None)
    assert _until(lambda: server.should_exit)
    assert overdue == ["overdue"] and 0.15 < time.monotonic() - t0 < 3


def test_sigint_keeps_uvicorns_own_handling() -> None:
    drain, overdue = Drain(), []
    server = _server(5.0, drain, overdue)
    server.handle_exit(signal.SIGINT, None)
    assert server.should_exit and not drain.draining


def test_replica_ids_and_grace_periods_are_checked() -> None:
    assert check_replica("web-2", 10) == "web-2"
    assert check_replica(None, 10)  # the host's name
    for bad in ("", "a b", "é", "x" * 200):
        with pytest.raises(ConfigError, match="--replica-id"):
            check_replica(bad, 10)
    for grace in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="--grace-period"):
            check_replica("r", grace)


# ---- a real process ----------------------------------------------------------------------


@pytest.mark.model
def test_sigterm_mid_stream_finishes_it_turns_new_ones_away_and_saves(smol_path: Path, tmp_path: Path) -> None:
    index = tmp_path / "index.json"
    args = ["--model", str(smol_path), "--threads", "1", "--parallel", "1", "--index-file", str(index),
            "--index-scope", "key", "--replica-id", "r1", "--grace-period", "20", "--log-level", "warning"]
    with ServeProcess(args, tmp_path / "serve.log") as server:
        server.wait_healthy(120)
        url = server.url
        body = {"prompt": COUNTING, "max_tokens": 200, "stream": True, "temperature": 0,
                "lookahead": {"enabled": False}}
        events: list[str] = []
        with httpx.Client(timeout=60) as c, c.stream("POST", url + "/v1/completions", json=body) as stream:
            assert stream.headers[REPLICA_HEADER] == "r1"
            lines = stream.iter_lines()
            for line in lines:
                if line.startswith("data:"):
                    events.append(line)
                    break  # streaming: now stop the replica
            t0 = time.monotonic()
            server.signal(signal.SIGTERM)
            time.sleep(0.3)
            turned = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
            health = httpx.get(url + "/health", timeout=10)
            events += [line for line in lines if line.startswith("data:")]
        code = server.wait(60)
    assert turned.status_code == 503 and turned.headers["Retry-After"] == "1"
    assert health.status_code == 404
    assert events[-1] == "data: [DONE]"
    finish = json.loads(events[-2][5:])["choices"][0]["finish_reason"]
    assert finish in ("length", "stop")  # the running stream ran to its end
    assert code == 0 and "Traceback" not in server.output()
    assert time.monotonic() - t0 < 20
    assert json.loads(index.read_text())["partitions"]  # saved on the way out


@pytest.mark.model
def test_past_the_grace_period_a_running_stream_ends_with_an_error(smol_path: Path, tmp_path: Path) -> None:
    args = ["--model", str(smol_path), "--threads", "1", "--parallel", "1", "--n-ctx", "4096",
            "--grace-period", "6", "--log-level", "error"]
    with ServeProcess(args, tmp_path / "serve.log") as server:
        server.wait_healthy(120)
        # far longer than the 6 s grace period allows
        body = {"prompt": COUNTING, "max_tokens": 3000, "stream": True, "temperature": 0,
                "lookahead": {"enabled": False}}
        events: list[str] = []
        with httpx.Client(timeout=60) as c, c.stream("POST", server.url + "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()
            for line in lines:
                if line.startswith("data:"):
                    break
            t0 = time.monotonic()
            server.signal(signal.SIGTERM)
            events = [line for line in lines if line.startswith("data:")]
        ended = time.monotonic() - t0
        code = server.wait(30)
        gone = time.monotonic() - t0
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2][5:])["error"]
    assert "shutting down" in error["message"] and error["type"] == "service_unavailable"
    assert 0.5 < ended < 6 and gone < 6, (ended, gone)  # within the grace period
    assert code == 0 and "Traceback" not in server.output()
