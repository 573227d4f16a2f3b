"""Streams keep their connection alive while they have nothing to say: a proxy cuts a
connection that stays silent past its idle timeout (HAProxy's `timeout server`), and a
llama.cpp-style stream is silent while its request waits in the queue or its prompt is read.
Both dialects send an SSE comment (`: ping`) instead, which clients that read `data:` lines
never see."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from tests.served import loader, metric


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    config = ServeConfig(model_id="smollm2-135m", stream_ping=0.05)
    with serving(config, loader(smol_path, 2048)) as running:
        yield running


@pytest.mark.model
@pytest.mark.parametrize("path", ["/completion", "/v1/completions"])
def test_a_queued_stream_pings_until_its_first_token(server: Running, path: str) -> None:
    """A stream queued behind a long request writes `: ping` lines, then its tokens as usual."""
    long_body = {"prompt": "def fibonacci(n):", "n_predict": 200, "max_tokens": 200, "temperature": 0,
                 "ignore_eos": True}
    busy = threading.Thread(target=lambda: server.client().post("/completion", json=long_body))
    busy.start()
    deadline = time.monotonic() + 30
    with server.client() as c:
        while metric(c.get("/metrics").text, "lookahead_requests_running") < 1:
            assert time.monotonic() < deadline, "the long request never started"
            time.sleep(0.01)
        body = {"prompt": "def add(a, b):", "n_predict": 4, "max_tokens": 4, "temperature": 0, "stream": True}
        r = c.post(path, json=body)
    busy.join(60)
    assert r.status_code == 200
    lines = [ln for ln in r.text.splitlines() if ln]
    pings = [ln for ln in lines if ln.startswith(":")]
    data = [ln for ln in lines if ln.startswith("data: ")]
    assert pings, "the queued stream stayed silent"
    assert lines.index(pings[0]) < lines.index(data[0])  # the ping came while it waited
    assert len(pings) + len(data) == len(lines)  # nothing else in the stream
    events = [json.loads(ln[6:]) for ln in data if ln != "data: [DONE]"]
    assert events and all(isinstance(e, dict) for e in events)


@pytest.mark.model
@pytest.mark.parametrize(
    ("path", "sep", "last"),
    [("/completion", "\n", None), ("/v1/completions", "\r\n", "data: [DONE]")],
)
def test_each_dialect_writes_its_own_bytes(server: Running, path: str, sep: str, last: str | None) -> None:
    """One writer, two dialects: OpenAI's events end in CRLF and its stream in `[DONE]`;
    llama.cpp's in LF, with no end marker (its clients split on "\n\n")."""
    body = {"prompt": "def add(a, b):", "n_predict": 3, "max_tokens": 3, "temperature": 0, "stream": True}
    with server.client() as c:
        r = c.post(path, json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split(sep + sep) if e]
    data = [e for e in events if e.startswith("data: ")]
    assert data and all(e.startswith(("data: ", ":")) and "\n" not in e.replace(sep, "") for e in events)
    assert ("\r" in r.text) == (sep == "\r\n")
    if last is None:
        assert "[DONE]" not in r.text and json.loads(data[-1][6:])["stop"] is True
    else:
        assert data[-1] == last
