"""bench/vim_replay.py: a recorded llama.vim session (requests sent, tokens written) replayed
through the server's prompt building and the engine, on a modeled clock; and the recording
itself, which asks each answer for its tokens and keeps request and answer in order."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench.editing import Server
from bench.editing_vim import post
from bench.vim_replay import kind_of, replay
from bench.vim_session import ctx_local, fim_body, ring_body
from lookahead.api import load
from lookahead.backend.llama import BackendConfig
from lookahead.core.draft_state import DraftConfig
from lookahead.models import catalog as models

FILE = [
    "def area(shape):",
    "    if shape.kind == 'square':",
    "        return shape.side * shape.side",
    "    if shape.kind == 'circle':",
    "        return 3.14159 * shape.radius * shape.radius",
    "",
    "",
    "def perimeter(shape):",
    "    ",
    "    if shape.kind == 'circle':",
    "        return 2 * 3.14159 * shape.radius",
    "    return 0",
]
CURVE = {1: 0.02, 2: 0.024, 4: 0.028, 8: 0.036, 16: 0.05, 32: 0.08, 64: 0.14}


def test_the_ring_update_is_a_warm_up_and_the_rest_keep_their_kind() -> None:
    assert kind_of(ring_body([]), "") == "warm-up"
    assert kind_of(fim_body(ctx_local(FILE, 8, 4), [], quick=True), "quick") == "quick"


@pytest.mark.model
def test_a_session_replays_with_drafts_where_the_answer_copies_the_code_below() -> None:
    path = models.resolve_model("qwen2.5-coder-0.5b", models.default_cache_dir())
    model = load(path, backend=BackendConfig(n_ctx=4096, n_threads=2))
    ctx = ctx_local(FILE, 8, 4)
    body = fim_body(ctx, [], quick=False, seed=1)
    # what the model wrote: the code below the cursor, as an editor's answer often is
    copied = model.backend.tokenize("if shape.kind == 'circle':\n        return 2 * 3.14159 * shape.radius\n",
                                    add_special=False)  # fmt: skip
    data: dict[str, Any] = {
        "n_ctx": 4096, "calibration": CURVE, "slope": {},
        "requests": [
            {"kind": "warm-up", "body": ring_body([]), "tokens": [], "prompt_n": None, "cache_n": None},
            {"kind": "follow-up", "body": body, "tokens": copied, "prompt_n": None, "cache_n": None},
        ],
    }  # fmt: skip
    ratios = replay(model, data, DraftConfig())  # asserts the engine wrote the recorded tokens
    assert ratios.pop("replayed knowing where the answer ends") == [1.0]  # recorded without `after`
    assert list(ratios) == ["follow-up", "time follow-up"]  # a warm-up writes nothing to replay
    assert ratios["follow-up"][0] > 1.2  # drafted from the suffix: fewer, cheap steps
    plain = replay(model, data, DraftConfig(enabled=False))
    model.close()
    assert plain["follow-up"] == [pytest.approx(1.0)]


@pytest.mark.model
def test_drafts_past_the_answers_end_are_verified_and_their_time_counted() -> None:
    """A service does not know where a time budget ends the answer: given the tokens the
    model writes past the end, the replay drafts on into them as the service does, and
    counts that step's time. Drafts that end at the line's end do not pass it."""
    from bench.replay import modeled_clock, replay_request
    from bench.vim_replay import FIM_BATCH
    from lookahead.server.llamacpp.prepare import prepare
    from lookahead.server.llamacpp.schemas import InfillRequest

    path = models.resolve_model("qwen2.5-coder-0.5b", models.default_cache_dir())
    model = load(path, backend=BackendConfig(n_ctx=4096, n_threads=2))
    body = InfillRequest.model_validate(fim_body(ctx_local(FILE, 8, 4), [], quick=True, seed=1))
    prepared = prepare(model, body, 4096, None, FIM_BATCH, [])
    # the answer: the first line of the code below the cursor; the model goes on with its second
    line = model.backend.tokenize("if shape.kind == 'circle':\n", add_special=False)
    rest = model.backend.tokenize("        return 2 * 3.14159 * shape.radius\n", add_special=False)
    cost = modeled_clock(CURVE, {})

    def run(config: DraftConfig, after: list[int] | None) -> Any:
        model.drafting.controllers.clear()  # each replay from the same start
        result, _, _ = replay_request(model, prepared.tokens, line, config, cost, prepared.sources, after, 64)
        return result

    known, unknown = run(DraftConfig(), None), run(DraftConfig(), rest)
    lines = run(DraftConfig(to_line_end=True), rest)
    model.close()
    assert known.tokens == unknown.tokens == lines.tokens == line
    assert unknown.stats.drafted > known.stats.drafted  # the copy ran on past the end
    assert unknown.stats.decode_s > known.stats.decode_s
    assert lines.stats.drafted <= len(line) - 1  # never past the newline the answer ends with


@pytest.mark.model
def test_an_answer_is_extended_past_its_end_only_when_it_decodes_again_the_same() -> None:
    from bench.vim_replay import extend, prepared_requests
    from lookahead.core.engine import Done
    from lookahead.server.llamacpp.prepare import sampling_of

    path = models.resolve_model("qwen2.5-coder-0.5b", models.default_cache_dir())
    model = load(path, backend=BackendConfig(n_ctx=4096, n_threads=2))
    body = fim_body(ctx_local(FILE, 8, 4), [], quick=True, seed=3)
    requests: list[dict[str, Any]] = [{"kind": "quick", "body": body, "tokens": []}]
    ((_, infill, prepared),) = prepared_requests(model, requests, 4096)
    events = model.stream("", tokens=prepared.tokens, max_tokens=10, sampling=sampling_of(model, infill, None),
                          draft=DraftConfig(enabled=False))  # fmt: skip
    written = next(e for e in events if isinstance(e, Done)).result.tokens
    requests = [{"kind": "quick", "body": body, "tokens": written[:4]},
                {"kind": "quick", "body": body, "tokens": [written[0] + 1, written[1]]}]  # fmt: skip
    same = extend(model, requests, 4096, n=6)
    model.close()
    assert same == 1
    assert requests[0]["after"] == written[4:10]  # what the model wrote on, with the same seed
    assert requests[1]["after"] is None  # not this model's answer: replayed knowing its end


class Answers(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(body)
        out = json.dumps({"content": "x", "tokens": [7, 8] if body.get("return_tokens") else []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[int]:
    httpd = HTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


def test_a_recording_server_asks_for_the_tokens_and_keeps_each_answer(stand_in: int, tmp_path: Path) -> None:
    srv = Server.__new__(Server)  # no process: the stand-in on loopback answers
    srv.name, srv.url, srv.answers = "stand-in", f"http://127.0.0.1:{stand_in}", None
    body = fim_body(ctx_local(FILE, 8, 4), [], quick=True, seed=3)
    post(srv, body)
    assert "return_tokens" not in Answers.seen[-1]  # not recording: the body as llama.vim sends it
    srv.answers = []
    ans, _ = post(srv, body)
    sent = Answers.seen[-1]
    assert sent["return_tokens"] is True and sent["response_fields"][-1] == "tokens"
    rest = {k: v for k, v in sent.items() if k != "return_tokens"}
    assert rest == {**body, "response_fields": sent["response_fields"]}
    assert srv.answers == [(sent, ans)] and ans["tokens"] == [7, 8]
