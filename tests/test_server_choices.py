"""OpenAI's `n` and llama-server's `return_progress` on the OpenAI routes, over real HTTP on
the small model (SmolLM2): `n` choices, each a sample of its own (seed + i), the prompt
prefilled once and shared through the prompt cache, usage summed as OpenAI sums it,
streamed with each chunk naming its choice; `prompt_progress` chunks while a prompt goes
in, in `n_batch`-token steps."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from tests.sse import payloads

pytestmark = pytest.mark.model

MODEL_ID = "smollm2-135m"
N_BATCH = 64
PLAIN = {"lookahead": {"enabled": False}}  # plain decoding: each verify decodes one token
MESSAGES = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
# a prompt of some hundreds of tokens: several n_batch chunks
LONG = [{"role": "user", "content": "Summarize: " + " ".join(f"item {i} is red." for i in range(60))}]


def loader(path: Path, n_batch: int = 512) -> Any:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    return lambda: load(path, backend=BackendConfig(n_ctx=2048, n_batch=n_batch, n_threads=1))


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID), loader(smol_path, N_BATCH)) as running:
        yield running


@pytest.fixture(scope="module")
def parallel_server(smol_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID, parallel=2), loader(smol_path)) as running:
        yield running


def post(server: Running, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with server.client() as c:
        r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def stream(server: Running, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with server.client() as c, c.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        return payloads(r.iter_lines())


def decoded(server: Running) -> int:
    """Tokens the server's model has decoded so far (prefill and verify steps alike)."""
    service = server.service
    slots = getattr(service.worker, "slots", None)
    return int(slots.n_decoded if slots is not None else service.model.backend.n_decoded)


def texts(body: dict[str, Any]) -> list[str]:
    key = "message" if body["object"] == "chat.completion" else None
    return [c["message"]["content"] if key else c["text"] for c in body["choices"]]


# ---- n ---------------------------------------------------------------------------------


def test_n_greedy_choices_are_equal_and_usage_counts_the_prompt_once(server: Running) -> None:
    one = post(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8, "temperature": 0})
    three = post(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8, "temperature": 0, "n": 3})
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert all(c["message"]["role"] == "assistant" and c["finish_reason"] == "length" for c in three["choices"])
    assert texts(three) == texts(one) * 3
    usage = three["usage"]
    assert usage["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert usage["completion_tokens"] == 3 * one["usage"]["completion_tokens"] == 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert three["timings"]["predicted_n"] == 24


def test_n_seeded_choices_differ_and_choice_i_is_the_sample_of_seed_plus_i(server: Running) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 1.0, "seed": 40, **PLAIN}
    both = post(server, "/v1/completions", {**body, "n": 2})
    assert [c["index"] for c in both["choices"]] == [0, 1]
    first, second = texts(both)
    assert first != second
    assert post(server, "/v1/completions", {**body, "n": 2})["choices"] == both["choices"]  # repeatable
    assert texts(post(server, "/v1/completions", {**body, "seed": 41})) == [second]


def test_n_choices_prefill_the_prompt_once(server: Running) -> None:
    """On one slot the choices run in turn; each after the first reuses the prompt's cells."""
    body = {"messages": LONG, "max_tokens": 8, "temperature": 0, "n": 3, **PLAIN}
    before = decoded(server)
    out = post(server, "/v1/chat/completions", {**body, "cache_prompt": False})
    n_prompt = out["usage"]["prompt_tokens"]
    assert n_prompt > 4 * N_BATCH
    # the prompt once (all but its last token prefilled, that one the first root), then one
    # token per verify step: 8 per choice
    assert decoded(server) - before == (n_prompt - 1) + 3 * 8


def test_n_streamed_chunks_name_their_choice(server: Running) -> None:
    body = {"messages": MESSAGES, "max_tokens": 8, "temperature": 0, "n": 2, "stream_options": {"include_usage": True}}
    whole = post(server, "/v1/chat/completions", body)
    chunks = stream(server, "/v1/chat/completions", body)
    text = {0: "", 1: ""}
    finish: dict[int, str] = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        text[choice["index"]] += choice["delta"].get("content") or ""
        if choice["finish_reason"]:
            finish[choice["index"]] = choice["finish_reason"]
    assert text == {0: texts(whole)[0], 1: texts(whole)[1]}
    assert finish == {0: "length", 1: "length"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 16


def test_n_past_the_bound_is_a_400_naming_it(server: Running) -> None:
    with server.client() as c:
        r = c.post("/v1/chat/completions", json={"messages": MESSAGES, "n": 5})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == "n"


def test_n_with_parallel_slots_and_a_forced_id_slot(parallel_server: Running) -> None:
    """llama.cpp's suite: twice, so the second finds the slots the first left cached."""
    for _ in range(2):
        body = {"messages": MESSAGES, "max_tokens": 8, "n": 2, "id_slot": 0, "seed": 3}
        out = post(parallel_server, "/v1/chat/completions", body)
        assert [c["index"] for c in out["choices"]] == [0, 1]
        assert all(c["finish_reason"] == "length" for c in out["choices"])
        assert out["usage"]["completion_tokens"] == 16
    chunks = stream(parallel_server, "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "n": 2})
    assert {c["choices"][0]["index"] for c in chunks} == {0, 1}


@pytest.fixture(scope="module")
def unified_server(smol_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID, parallel=2, kv_unified=True), loader(smol_path)) as running:
        yield running


@pytest.mark.parametrize("which", ["parallel_server", "unified_server"])
def test_n_with_parallel_slots_decodes_the_prompt_once_and_copies_it(which: str, request: Any) -> None:
    """The second choice starts from a copy of the first's prompt cells in a slot of its own
    (a KV stream of its own, or the cells shared in one stream): nothing of the prompt is
    decoded twice, and a copied stream is right (greedy choices equal a request's alone)."""
    server: Running = request.getfixturevalue(which)
    body = {"messages": LONG, "max_tokens": 8, "temperature": 0, **PLAIN}
    alone = post(server, "/v1/chat/completions", {**body, "cache_prompt": False})
    before = decoded(server)
    three = post(server, "/v1/chat/completions", {**body, "n": 3, "cache_prompt": False})
    n_prompt = three["usage"]["prompt_tokens"]
    assert decoded(server) - before == (n_prompt - 1) + 3 * 8  # the third waits for a slot
    if which == "parallel_server":  # one stream per slot: each request's cells in its solo order
        assert texts(three) == texts(alone) * 3
    else:  # shared cells: neighbours' cells may move logits by rounding (see lookahead.backend.slots)
        assert all(texts(three))


# ---- return_progress ---------------------------------------------------------------------


def progress_of(chunks: list[dict[str, Any]]) -> list[dict[str, int]]:
    return [c["prompt_progress"] for c in chunks if "prompt_progress" in c]


def check_progress(reports: list[dict[str, int]], total: int) -> None:
    """llama.cpp's suite's rules: the first has cache == processed, each later one more
    processed, total and cache fixed, the last all of the prompt."""
    assert reports
    assert reports[0]["cache"] == reports[0]["processed"]
    assert all(r["total"] == total and r["cache"] == reports[0]["cache"] for r in reports)
    assert all(b["processed"] > a["processed"] for a, b in zip(reports, reports[1:], strict=False))
    assert reports[-1]["processed"] == total
    assert all(isinstance(r["time_ms"], int) and r["time_ms"] >= 0 for r in reports)


def test_return_progress_reports_each_n_batch_chunk_then_a_cached_prompt_at_once(server: Running) -> None:
    body = {"messages": LONG, "max_tokens": 4, "return_progress": True, "stream_options": {"include_usage": True}}
    chunks = stream(server, "/v1/chat/completions", {**body, "cache_prompt": False})
    total = chunks[-1]["usage"]["prompt_tokens"]
    reports = progress_of(chunks)
    check_progress(reports, total)
    assert reports[0]["processed"] == 0
    # one before the prefill, one per n_batch chunk of all but the last token, one after the
    # first verify (which decodes the last)
    assert len(reports) == 1 + -(-(total - 1) // N_BATCH) + 1
    progress_chunks = [c for c in chunks if "prompt_progress" in c]
    assert all(c["choices"][0]["delta"] == {"role": "assistant", "content": None} for c in progress_chunks)
    # every report comes before the first text
    first_text = next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("content"))
    assert all("prompt_progress" not in c for c in chunks[first_text:])

    post(server, "/v1/chat/completions", {"messages": LONG, "max_tokens": 4})  # leaves the prompt cached
    again = progress_of(stream(server, "/v1/chat/completions", body))
    assert [(r["cache"], r["processed"]) for r in again] == [(total - 1, total - 1), (total - 1, total)]


def test_return_progress_only_when_asked_and_on_completions_too(server: Running) -> None:
    plain = stream(server, "/v1/completions", {"prompt": "Hello there", "max_tokens": 4})
    assert not progress_of(plain)
    reports = progress_of(stream(server, "/v1/completions", {"prompt": "Hello there", "max_tokens": 4,
                                                             "return_progress": True, "cache_prompt": False}))
    assert [r["processed"] for r in reports][0] == 0
    assert reports[-1]["processed"] == reports[-1]["total"]
    whole = post(server, "/v1/completions", {"prompt": "Hello there", "max_tokens": 4, "return_progress": True})
    assert "prompt_progress" not in whole  # a whole answer has nothing to report progress in


def test_return_progress_with_parallel_slots(parallel_server: Running) -> None:
    chunks = stream(parallel_server, "/v1/chat/completions", {"messages": LONG, "max_tokens": 4,
                                                             "return_progress": True, "cache_prompt": False,
                                                             "stream_options": {"include_usage": True}})
    total = chunks[-1]["usage"]["prompt_tokens"]
    reports = progress_of(chunks)
    check_progress(reports, total)
    assert len(reports) >= 3  # the batch's prefill chunks are smaller than this prompt


def cancelled(server: Running) -> float:
    with server.client() as c:
        text = c.get("/metrics").text
    found = re.search(r"^lookahead_cancelled_total ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_client_that_leaves_during_progress_cancels_its_generation(server: Running) -> None:
    before = cancelled(server)
    body = {"messages": LONG, "max_tokens": 200, "stream": True, "return_progress": True, "cache_prompt": False}
    with server.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if "prompt_progress" in line:
                break
    deadline = time.monotonic() + 60
    while cancelled(server) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cancelled(server) == before + 1


@pytest.mark.parametrize("which", ["server", "parallel_server"])
def test_n_cmpl_on_completion_decodes_the_prompt_once(which: str, request: Any) -> None:
    server: Running = request.getfixturevalue(which)
    prompt = "Summarize: " + " ".join(f"item {i} is blue." for i in range(50))
    body = {"prompt": prompt, "n_predict": 6, "temperature": 0, "cache_prompt": False, "n_cmpl": 2, **PLAIN}
    before = decoded(server)
    answers = post_list(server, "/completion", body)
    n_prompt = answers[0]["tokens_evaluated"]
    assert decoded(server) - before == (n_prompt - 1) + 2 * 6
    assert answers[0]["content"] == answers[1]["content"]


def post_list(server: Running, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with server.client() as c:
        r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]
