"""The service under hostile input, on the small model over real HTTP (127.0.0.1): every bad
input is a 4xx in OpenAI's shape, nothing is a plain-text 500, and one request's trouble
(a long prediction, a failing drafter or memory, a client gone mid-prompt) stays its own."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import lookahead.server.openai.prepare
import lookahead.server.openai.shape
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done
from lookahead.core.sampling import SamplingConfig
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from lookahead.server.jobs import END, Job

pytestmark = pytest.mark.model

MODEL_ID = "smollm2-135m"
KEY, UNICODE_KEY, METRICS_KEY = "key-a-123", "clé-ünïcode", "metrics-only"


def loader(path: Path) -> Any:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    return lambda: load(path, backend=BackendConfig(n_ctx=2048, n_threads=1))


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    config = ServeConfig(
        model_id=MODEL_ID, api_keys=(KEY, UNICODE_KEY), metrics_key=METRICS_KEY, max_body_bytes=64 << 10
    )
    with serving(config, loader(smol_path)) as running:
        yield running


def post(server: Running, path: str, body: Any, key: str | None = KEY) -> httpx.Response:
    with server.client(key) as c:
        return c.post(path, json=body)


def openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    err: dict[str, Any] = r.json()["error"]
    extra = {"n_prompt_tokens", "n_ctx"} if err.get("type") == "exceed_context_size_error" else set()
    assert set(err) == {"message", "type", "param", "code"} | extra
    return err


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def metrics(server: Running) -> str:
    with server.client(METRICS_KEY) as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    return r.text


# ---- keys --------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"Bearer \xe9", b"Bearer \xc3\xa9t\xc3\xa9", b"Bearer \xff\xfe"])
def test_a_non_ascii_key_is_a_401_not_a_500(server: Running, raw: bytes) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}, headers={b"authorization": raw})
    assert openai_error(r, 401)["type"] == "authentication_error"


def test_a_non_ascii_key_that_is_configured_is_accepted(server: Running) -> None:
    raw = b"Bearer " + UNICODE_KEY.encode("utf-8")
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}, headers={b"authorization": raw})
    assert r.status_code == 200, r.text


def test_metrics_are_behind_their_key(server: Running) -> None:
    with server.client() as c:
        assert openai_error(c.get("/metrics"), 401)["type"] == "authentication_error"
    with server.client(KEY) as c:  # an API key is not the metrics key when one is set
        assert c.get("/metrics").status_code == 401
    assert "lookahead_requests_total" in metrics(server)


def test_metrics_take_any_api_key_without_a_metrics_key(smol_path: Path) -> None:
    with serving(ServeConfig(model_id=MODEL_ID, api_keys=(KEY,)), loader(smol_path)) as s:
        with s.client() as c:
            assert c.get("/metrics").status_code == 401
        with s.client(KEY) as c:
            assert c.get("/metrics").status_code == 200


# ---- predictions -------------------------------------------------------------------------


def test_a_prediction_longer_than_the_context_is_a_400(server: Running) -> None:
    body = {"prompt": "hi", "max_tokens": 4, "prediction": {"type": "content", "content": "word " * 3000}}
    err = openai_error(post(server, "/v1/completions", body), 400)
    assert err["param"] == "prediction" and err["code"] == "context_length_exceeded"
    assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 2048 and err["n_prompt_tokens"] > 0
    assert "2048" in err["message"]


def test_usage_accounting_runs_off_the_event_loop(server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    real = lookahead.server.openai.shape.prediction_counts
    counting = threading.Event()

    def slow(predicted: Any, completion: Any) -> dict[str, int]:
        counting.set()
        time.sleep(3.0)  # a count that takes long: nothing else may wait for it
        return real(predicted, completion)

    monkeypatch.setattr(lookahead.server.openai.shape, "prediction_counts", slow)
    body = {"prompt": "def add(a, b):", "max_tokens": 4, "temperature": 0,
            "prediction": {"type": "content", "content": "    return a + b\n"}}
    answers: list[httpx.Response] = []
    t = threading.Thread(target=lambda: answers.append(post(server, "/v1/completions", body)))
    t.start()
    assert counting.wait(60)
    with server.client() as c:
        t0 = time.perf_counter()
        assert c.get("/health").status_code == 200
        waited = time.perf_counter() - t0
    t.join()
    assert answers[0].status_code == 200
    assert "accepted_prediction_tokens" in answers[0].json()["usage"]["completion_tokens_details"]
    assert waited < 1.5, waited  # on the event loop it would wait out the count (~3 s)


def test_the_queue_is_checked_before_a_prediction_is_indexed(
    smol_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    real = lookahead.server.openai.prepare.PredictionIndex

    def counted(tokens: Any) -> Any:
        built.append(len(tokens))
        return real(tokens)

    monkeypatch.setattr(lookahead.server.openai.prepare, "PredictionIndex", counted)
    config = ServeConfig(model_id=MODEL_ID, max_queue=0)
    with serving(config, loader(smol_path)) as s:
        long_one = threading.Thread(
            target=lambda: post(s, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 300}, None)
        )
        long_one.start()
        deadline = time.monotonic() + 30
        while not s.service.worker.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        body = {"prompt": "hi", "max_tokens": 4, "prediction": {"type": "content", "content": "word " * 1000}}
        r = post(s, "/v1/completions", body, None)
        long_one.join()
    assert openai_error(r, 429)["type"] == "rate_limit_error"
    assert built == []


# ---- errors that were 500s -----------------------------------------------------------------


def test_a_chat_template_error_is_a_400_naming_it(server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    from lookahead.models.chat_template import ChatTemplate

    # a template that refuses the conversation, as Mistral's and Llama 2's do two user turns in a row
    refuses = ChatTemplate("{{ raise_exception('Conversation roles must alternate user/assistant/...') }}")
    monkeypatch.setattr(server.service.chat, "_template", refuses)
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "max_tokens": 2}
    err = openai_error(post(server, "/v1/chat/completions", body), 400)
    assert "roles must alternate" in err["message"] and err["param"] == "messages"


def test_a_bug_anywhere_is_a_500_in_openai_shape_and_counted(
    server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("internal detail")

    before = metric(metrics(server), 'lookahead_errors_total{type="server_error"}')
    monkeypatch.setattr(lookahead.server.openai.prepare, "draft_settings", bug)
    err = openai_error(post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}), 500)
    assert err["type"] == "server_error" and "internal detail" not in err["message"]
    monkeypatch.undo()
    after = metric(metrics(server), 'lookahead_errors_total{type="server_error"}')
    assert after == before + 1
    assert post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_a_failure_to_remember_after_done_keeps_the_answer(server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = server.service.memory
    assert memory is not None

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(memory, "add", full)
    r = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


# ---- bodies: content type, lone surrogates ----------------------------------------------


def test_a_body_sent_as_a_form_is_read_as_json(server: Running) -> None:
    """`curl -d '{...}'` says application/x-www-form-urlencoded; llama-server reads JSON."""
    body = b'{"prompt": "The capital of France is", "n_predict": 2}'
    for kind in ("application/x-www-form-urlencoded", "text/plain"):
        with server.client(KEY) as c:
            r = c.post("/completion", content=body, headers={"content-type": kind})
        assert r.status_code == 200, r.text
        assert r.json()["tokens_predicted"] == 2
    with server.client(KEY) as c:
        r = c.post("/completion", content=b"prompt=hi", headers={"content-type": "application/x-www-form-urlencoded"})
    assert openai_error(r, 400)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/completion", b'{"prompt": "hi", "n_predict": 2, "stop": "\\ud800"}', "stop"),
        ("/infill", b'{"input_prefix": "a", "input_extra": [{"text": "\\udc00"}]}', "input_extra[0].text"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud83d"}], "stream": true}',
         "messages[0].content"),
        ("/tokenize", b'{"content": "x", "\\ud800": 1}', "\ud800"),
    ],
)
def test_a_lone_surrogate_anywhere_is_a_400_naming_its_field(
    server: Running, path: str, body: bytes, field: str
) -> None:
    """Half of a UTF-16 pair (`stop` once made a 500: its answer echoed it)."""
    with server.client(KEY) as c:
        r = c.post(path, content=body, headers={"content-type": "application/json"})
    assert openai_error(r, 400)["param"] == field
    pair = b'{"prompt": "\\ud83d\\ude00", "n_predict": 2, "stop": "\\ud83d\\ude00"}'  # a whole pair is text
    with server.client(KEY) as c:
        r = c.post("/completion", content=pair, headers={"content-type": "application/json"})
    assert r.json()["generation_settings"]["stop"] == ["\U0001f600"]


# ---- body limit, temperature -------------------------------------------------------------------


def test_a_chunked_body_over_the_limit_is_a_413(server: Running) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"prompt": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}'

    with server.client(KEY) as c:
        r = c.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert "larger than" in openai_error(r, 413)["message"]
    assert post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_a_tiny_temperature_writes_the_greedy_text(server: Running) -> None:
    body = {"prompt": "The capital of France is", "max_tokens": 12, "seed": 1}
    greedy = post(server, "/v1/completions", {**body, "temperature": 0}).json()["choices"][0]["text"]
    tiny = post(server, "/v1/completions", {**body, "temperature": 1e-310}).json()["choices"][0]["text"]
    assert tiny == greedy


# ---- scope of the memory, exactness with --parallel ------------------------------------------


def test_without_keys_no_memory_is_shared_unless_asked(smol_path: Path) -> None:
    with serving(ServeConfig(model_id=MODEL_ID), loader(smol_path)) as s:
        assert s.service.memory is None
    with serving(ServeConfig(model_id=MODEL_ID, index_scope="key"), loader(smol_path)) as s:
        assert s.service.memory is not None
    with serving(ServeConfig(model_id=MODEL_ID, api_keys=(KEY,), index_scope="none"), loader(smol_path)) as s:
        assert s.service.memory is None


def test_exact_requests_with_parallel_slots_are_refused(smol_path: Path) -> None:
    with serving(ServeConfig(model_id=MODEL_ID, parallel=2, shared_index=False), loader(smol_path)) as s:
        body = {"prompt": "hi", "max_tokens": 4, "temperature": 0}
        err = openai_error(post(s, "/v1/completions", {**body, "lookahead": {"exact": True}}, None), 400)
        assert err["param"] == "lookahead.exact" and "--parallel 1" in err["message"]
        assert post(s, "/v1/completions", body, None).status_code == 200


# ---- cancellation during prefill -------------------------------------------------------------


class _SetAfter(threading.Event):
    """Reads as set from its `n`-th look on: a client that leaves while the prompt prefills."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.looks = 0
        self.n = n

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks >= self.n or super().is_set()


def test_the_serial_worker_stops_a_prefill_whose_client_left(smol_path: Path) -> None:
    import asyncio

    with serving(ServeConfig(model_id=MODEL_ID, shared_index=False), loader(smol_path)) as s:
        model = s.service.model
        prompt = model.prompt_tokens("word " * 1500)  # three prefill chunks of 512
        loop = asyncio.new_event_loop()
        cancelled = _SetAfter(3)  # the worker's look, the first chunk's, then the second's
        job = Job(tokens=prompt, max_tokens=8, stop=(), sampling=SamplingConfig(), draft=DraftConfig(),
                  sources=(), loop=loop, cancelled=cancelled)
        seen: list[int] = []
        real = model.backend._decode

        def counting(n: int, stop: Any = None) -> None:
            seen.append(n)
            real(n, stop)

        model.backend._decode = counting  # type: ignore[method-assign]
        try:
            s.service.worker.submit(job)
            deadline = time.monotonic() + 30
            while (s.service.worker.busy or not job.events.qsize()) and time.monotonic() < deadline:
                loop.run_until_complete(asyncio.sleep(0.01))
        finally:
            model.backend._decode = real  # type: ignore[method-assign]
        items = []
        while not job.events.empty():
            items.append(job.events.get_nowait())
        loop.close()
        assert seen == [512]  # one chunk, not the whole prompt
        assert items[-1] is END and not any(isinstance(i, Done) for i in items)
        assert model.backend.n_used == 0
        assert metric(metrics_open(s), "lookahead_cancelled_total") == 1


def metrics_open(s: Running) -> str:
    with s.client() as c:
        return c.get("/metrics").text
