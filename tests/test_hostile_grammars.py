"""Grammars and schemas that used to kill or jam the service: checked in a child process
with a time limit, answered with a 400 in bounded time, the process alive; and a SIGTERM
that ends the process within its grace period even while a request is stuck in C code.
The live cases run `lookahead serve` as a process of its own, so a crash is seen."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead.server.background import free_port
from lookahead.server.spawn import CHECKOUT, ServeProcess
from tests.schema_strategy import _left_recursive, _nested_groups

LEFT_RECURSIVE = _left_recursive(60, 2)  # a 1 KB grammar: llama.cpp's check of it never ends
NESTED = _nested_groups(20000)  # deeper than llama.cpp's parser's stack
ORDINARY = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}, "required": ["name"]}


# ---- the checker, in this process ---------------------------------------------------------


@pytest.mark.model
def test_the_checker_refuses_what_hangs_or_crashes_the_parser_and_recovers(smol_path: Path) -> None:
    from lookahead.backend.grammar import GrammarError
    from lookahead.backend.grammar_guard import GrammarParser
    from lookahead.backend.llama import LlamaVocab

    parser = GrammarParser(LlamaVocab(smol_path, vocab_only=True))
    try:
        parser.start()
        t0 = time.monotonic()
        with pytest.raises(GrammarError, match="too complex"):
            parser.parse(LEFT_RECURSIVE)
        assert time.monotonic() - t0 < parser.checker.limit_s + 1.5
        with pytest.raises(GrammarError, match="crashed"):
            parser.parse(NESTED)
        with pytest.raises(GrammarError, match="expecting"):
            parser.parse("root ::= (x")
        assert parser.parse('root ::= "a" <|im_end|>')  # token literals: the child holds the vocabulary
        restarts = parser.checker.restarts
        t0 = time.monotonic()
        with pytest.raises(GrammarError, match="too complex"):
            parser.parse(LEFT_RECURSIVE)  # the verdict is remembered: no second wait
        assert time.monotonic() - t0 < 0.5 and parser.checker.restarts == restarts
        first = parser.parse('root ::= "b"{2}')
        assert parser.parse('root ::= "b"{2}') is first  # parsed once
        with pytest.raises(GrammarError, match="Unicode"):
            parser.parse('root ::= "\ud800"')
    finally:
        parser.close()


# ---- a live server --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(smol_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    log = tmp_path_factory.mktemp("hostile") / "serve.log"
    args = ["--model", str(smol_path), "--threads", "1", "--parallel", "1", "--n-ctx", "1024",
            "--log-level", "warning"]
    with ServeProcess(args, log) as server:
        server.wait_healthy(180)
        yield server


def _post(server: ServeProcess, path: str, body: dict[str, Any], timeout: float = 5) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=timeout)


def _healthy(server: ServeProcess) -> None:
    t0 = time.monotonic()
    assert httpx.get(server.url + "/health", timeout=1).status_code == 200
    assert time.monotonic() - t0 < 1
    assert server.alive, server.output()[-2000:]


@pytest.mark.model
def test_a_grammar_that_jammed_the_server_is_a_400_within_seconds(served: ServeProcess) -> None:
    t0 = time.monotonic()
    r = _post(served, "/completion", {"prompt": "hi", "n_predict": 1, "grammar": LEFT_RECURSIVE})
    assert r.status_code == 400, r.text
    assert time.monotonic() - t0 < 5
    err = r.json()["error"]
    assert err["param"] == "grammar" and "too complex" in err["message"], err
    r = _post(served, "/completion", {"prompt": "hi", "n_predict": 1, "grammar": NESTED})
    assert r.status_code == 400 and "crashed" in r.json()["error"]["message"], r.text
    _healthy(served)


@pytest.mark.model
@pytest.mark.parametrize("bound", [5000, 100000])
def test_a_large_max_length_in_a_schema_is_served_not_a_crash(served: ServeProcess, bound: int) -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string", "maxLength": bound}}, "required": ["text"]}
    body = {"messages": [{"role": "user", "content": "Say hi in JSON"}], "max_tokens": 8,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    r = _post(served, "/v1/chat/completions", body, timeout=30)
    assert r.status_code == 200, r.text  # llama-server accepts it: so do we
    _healthy(served)


@pytest.mark.model
def test_after_hostile_grammars_an_ordinary_schema_is_served(served: ServeProcess) -> None:
    for grammar in (LEFT_RECURSIVE, NESTED):
        _post(served, "/completion", {"prompt": "hi", "n_predict": 1, "grammar": grammar})
    body = {"messages": [{"role": "user", "content": "Name a cat, as JSON"}], "max_tokens": 24, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "cat", "schema": ORDINARY}}}
    r = _post(served, "/v1/chat/completions", body, timeout=60)
    assert r.status_code == 200, r.text
    reply = r.json()["choices"][0]
    if reply["finish_reason"] == "stop":
        assert set(json.loads(reply["message"]["content"])) == {"name"}
    _healthy(served)


@pytest.mark.model
@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("grammar", "root ::= " + '"a" ' * 70000, "bytes of GBNF"),
        ("json_schema", {"enum": ["x" * 1000] * 300}, "bytes of JSON"),
    ],
)
def test_a_grammar_or_schema_over_its_size_limit_is_a_400_naming_it(
    served: ServeProcess, field: str, value: Any, needle: str
) -> None:
    r = _post(served, "/v1/completions", {"prompt": "hi", "max_tokens": 1, field: value})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and needle in err["message"] and "at most" in err["message"], err


# ---- SIGTERM while a request is stuck --------------------------------------------------------

STUCK_APP = textwrap.dedent(
    """
    import ctypes, signal, sys
    import uvicorn
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from lookahead.server.drain import DrainingServer, hard_exit
    from lookahead.server.replica import Drain

    drain = Drain()

    async def stuck(request):
        drain.enter()
        try:
            await run_in_threadpool(ctypes.CDLL(None).sleep, 600)  # in C code: nothing interrupts it
        finally:
            drain.leave()
        return PlainTextResponse("done")

    config = uvicorn.Config(Starlette(routes=[Route("/stuck", stuck)]), port=int(sys.argv[1]), log_level="critical")
    server = DrainingServer(config, drain, float(sys.argv[2]), None, hard_exit)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)  # as `lookahead serve` does
    server.run()
    """
)


def test_sigterm_ends_the_process_within_the_grace_period_while_a_request_is_stuck_in_c() -> None:
    port, grace = free_port(), 4.0
    proc = subprocess.Popen([sys.executable, "-c", STUCK_APP, str(port), str(grace)], cwd=CHECKOUT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the app did not start"
                time.sleep(0.1)
        threading.Thread(target=lambda: httpx.get(f"http://127.0.0.1:{port}/stuck", timeout=30), daemon=True).start()
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace + 2)  # without the deadline it was still there a minute later
        assert time.monotonic() - t0 < grace + 0.5
        assert proc.returncode == 1
        assert "exiting now" in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.model
def test_sigterm_while_a_hostile_grammar_is_sent_ends_the_server_within_its_grace(
    smol_path: Path, tmp_path: Path
) -> None:
    args = ["--model", str(smol_path), "--threads", "1", "--parallel", "1", "--n-ctx", "512",
            "--grace-period", "6", "--log-level", "warning"]
    with ServeProcess(args, tmp_path / "serve.log") as server:
        server.wait_healthy(180)
        body = {"prompt": "hi", "n_predict": 1, "grammar": LEFT_RECURSIVE}
        threading.Thread(target=lambda: httpx.post(server.url + "/completion", json=body, timeout=30),
                         daemon=True).start()
        time.sleep(0.5)
        t0 = time.monotonic()
        server.signal(signal.SIGTERM)
        server.wait(7)
        assert time.monotonic() - t0 < 6.5, server.output()[-2000:]
