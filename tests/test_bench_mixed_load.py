"""The mixed-load bench's workload and its client loop, with no model: the kinds taken in
turn, each client's share of the requests, tokens counted from `usage`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.mixed_load import KINDS, load_run, mix


def test_the_kinds_are_taken_in_turn() -> None:
    tasks = mix(8)
    assert [t.kind for t in tasks] == [KINDS[i % 3] for i in range(8)]
    assert len({t.id for t in tasks}) == 8  # no prompt twice while the set has more


class Answer(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"usage": {"completion_tokens": 5}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_every_request_is_sent_and_its_tokens_counted(stand_in: str) -> None:
    run = load_run(stand_in, mix(8), clients=4, max_tokens=16)
    assert run["tokens"] == 8 * 5 and not run["errors"]
    assert run["tok_s"] == pytest.approx(run["tokens"] / run["wall_s"])
