"""What the service promises that the other server tests leave unchecked, on the small model:
`stop`, `echo`, `max_completion_tokens`, the `developer` role, a client that leaves a request
that is not streamed, and four concurrent `--parallel` requests each writing its solo text."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from tests.sse import payloads, streamed_text

pytestmark = pytest.mark.model

MODEL_ID = "smollm2-135m"


def loader(path: Path) -> Any:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    return lambda: load(path, backend=BackendConfig(n_ctx=2048, n_threads=1))


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID, shared_index=False), loader(smol_path)) as running:
        yield running


def greedy(smol_model: Any, prompt: Any, n: int, *, chat: bool = False, stop: tuple[str, ...] = ()) -> Any:
    return smol_model.generate(
        prompt, chat=chat, max_tokens=n, stop=stop, sampling=SamplingConfig(top_k=0), draft=DraftConfig()
    )


def test_a_stop_sequence_ends_the_text_before_it(server: Running, smol_model: Any) -> None:
    prompt = "1, 2, 3, 4, 5, 6,"
    free = greedy(smol_model, prompt, 24).text
    assert " 9" in free  # the stop below is reached
    ref = greedy(smol_model, prompt, 24, stop=(" 9",))
    with server.client() as c:
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stop": [" 9", "never here"]}
        whole = c.post("/v1/completions", json=body).json()
        streamed = c.post("/v1/completions", json={**body, "stream": True})
    choice = whole["choices"][0]
    assert choice["text"] == ref.text == free[: free.index(" 9")]
    assert choice["finish_reason"] == "stop"
    items = payloads(streamed.text.splitlines())
    assert streamed_text(items) == ref.text
    assert [ch["finish_reason"] for i in items for ch in i["choices"] if ch["finish_reason"]] == ["stop"]


def test_echo_puts_the_prompt_before_the_text(server: Running, smol_model: Any) -> None:
    prompt = "def square(x):"
    with server.client() as c:
        r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0, "echo": True})
    assert r.json()["choices"][0]["text"] == prompt + greedy(smol_model, prompt, 8).text


def test_max_completion_tokens_bounds_a_chat_answer(server: Running) -> None:
    messages = [{"role": "user", "content": "Tell me a long story about a dragon."}]
    with server.client() as c:
        r = c.post("/v1/chat/completions", json={"messages": messages, "max_completion_tokens": 5, "temperature": 0})
    body = r.json()
    assert body["usage"]["completion_tokens"] == 5 and body["choices"][0]["finish_reason"] == "length"


def test_a_developer_message_is_a_system_message(server: Running, smol_model: Any) -> None:
    ask = {"role": "user", "content": "Name a colour."}
    ref = greedy(smol_model, [{"role": "system", "content": "Answer in French."}, ask], 12, chat=True)
    messages = [{"role": "developer", "content": "Answer in French."}, ask]
    with server.client() as c:
        r = c.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 12, "temperature": 0})
    assert r.json()["choices"][0]["message"]["content"] == ref.text


def cancelled(server: Running) -> float:
    with server.client() as c:
        text = c.get("/metrics").text
    found = re.search(r"^lookahead_cancelled_total ([0-9.]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_client_that_leaves_a_whole_request_frees_the_model(server: Running) -> None:
    before = cancelled(server)
    # without the prompt cache: with it (the default) the committed cells stay cached
    body = {"prompt": "Once upon a time", "max_tokens": 1500, "temperature": 0, "cache_prompt": False}
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=server.url, timeout=1.5) as c:
        c.post("/v1/completions", json=body)  # gives up long before 1500 tokens
    deadline = time.monotonic() + 15
    while server.service.worker.busy and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.service.worker.busy
    assert cancelled(server) == before + 1
    assert server.service.model.backend.n_used == 0


def test_four_concurrent_requests_each_write_their_solo_text(smol_path: Path, smol_model: Any) -> None:
    """SmolLM2's batched logits equal its one-token logits, so a batch worker that mixed up
    requests, or let a neighbour change a request's text, fails here."""
    prompts = ["def fibonacci(n):", "The history of Rome", "1, 2, 3, 4,", "SELECT name FROM users"]
    solo = [greedy(smol_model, p, 32).text for p in prompts]
    assert len(set(solo)) == 4
    texts: dict[int, str] = {}
    start = threading.Barrier(4)
    config = ServeConfig(model_id=MODEL_ID, parallel=4, shared_index=False)
    with serving(config, loader(smol_path)) as s:

        def one(i: int) -> None:
            with s.client() as c:
                start.wait()
                body = {"prompt": prompts[i], "max_tokens": 32, "temperature": 0, "stream": i % 2 == 1}
                r = c.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text
                texts[i] = streamed_text(payloads(r.text.splitlines())) if body["stream"] else \
                    r.json()["choices"][0]["text"]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [texts.get(i) for i in range(4)] == solo
