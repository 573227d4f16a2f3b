"""Streams keep their connection alive while they have nothing to say: a proxy cuts a
connection that stays silent past its idle timeout (HAProxy's `timeout server`), and a
llama.cpp-style stream is silent while its request waits in the queue or its prompt is read.
Both dialects send an SSE comment (`: ping`) instead, which clients that read `data:` lines
never see."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path

import pytest

from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from lookahead.server.keepalive import PING, with_pings
from tests.served import loader, metric


async def slow(delays: list[float], closed: list[bool]) -> AsyncIterator[str]:
    try:
        for i, delay in enumerate(delays):
            await asyncio.sleep(delay)
            yield f"data: {i}\n\n"
    finally:
        closed.append(True)


def test_a_silent_stream_pings_and_keeps_its_items_in_order() -> None:
    async def run() -> list[str]:
        return [item async for item in with_pings(slow([0.35, 0.0, 0.35], []), 0.1)]

    out = asyncio.run(run())
    assert [x for x in out if x != PING] == ["data: 0\n\n", "data: 1\n\n", "data: 2\n\n"]
    first = out.index("data: 0\n\n")
    assert first >= 2 and set(out[:first]) == {PING}, out  # pinged while the first item waited
    assert out[first + 1] == "data: 1\n\n"  # an item that comes at once is not delayed by a ping


def test_a_stream_that_talks_often_never_pings_and_zero_turns_pings_off() -> None:
    async def run(delays: list[float], interval: float) -> list[str]:
        return [item async for item in with_pings(slow(delays, []), interval)]

    assert PING not in asyncio.run(run([0.01] * 5, 1.0))
    assert PING not in asyncio.run(run([0.15], 0))


def test_closing_the_stream_while_it_waits_closes_its_source() -> None:
    closed: list[bool] = []

    async def run() -> None:
        stream = with_pings(slow([5.0], closed), 0.05)
        assert isinstance(stream, AsyncGenerator)
        assert await stream.__anext__() == PING  # waiting for the first item
        await stream.aclose()  # the client went away

    asyncio.run(asyncio.wait_for(run(), 2))
    assert closed == [True]


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
