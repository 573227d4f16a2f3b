"""`POST /infill` as llama.vim and llama.vscode call it, and OpenAI's `suffix`, on a code
model with fill-in-the-middle tokens (Qwen2.5-Coder-0.5B, the default model; generations
kept short).

The request bodies are the plugins' own, field for field (llama.vim's `s:fim` and its
ring-buffer warm-up; llama.vscode's `createRequestPayload`), with their default values
except `n_predict`, which is kept small here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead.apps.fim import Chunk, indent_cut, infill_prompt
from lookahead.models import catalog as models
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving

pytestmark = pytest.mark.model

MODEL_ID = "qwen2.5-coder-0.5b"
N_CTX = 2048
N_PREDICT = 24
PREFIX = '#include <cstdio>\n#include "llama.h"\n\nint main() {\n'
MIDDLE = "    int n_threads = llama_"
SUFFIX = "}\n"
EXTRA = [{"filename": "llama.h", "text": "LLAMA_API int32_t llama_n_threads();\n"}]
PLAIN = {"lookahead": {"enabled": False}}  # plain decoding: outputs to compare token for token

# llama.vim's request for a suggestion (autoload/llama.vim, s:fim)
LLAMA_VIM = {
    "id_slot": 0,
    "input_prefix": PREFIX,
    "input_suffix": SUFFIX,
    "input_extra": EXTRA,
    "prompt": MIDDLE,
    "n_predict": N_PREDICT,
    "stop": [],
    "n_indent": 4,
    "top_k": 40,
    "top_p": 0.90,
    "samplers": ["top_k", "top_p", "infill"],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1000,
    "response_fields": [
        "content",
        "timings/prompt_n",
        "timings/prompt_ms",
        "timings/prompt_per_token_ms",
        "timings/prompt_per_second",
        "timings/predicted_n",
        "timings/predicted_ms",
        "timings/predicted_per_token_ms",
        "timings/predicted_per_second",
        "truncated",
        "tokens_cached",
    ],
}
# llama.vim's request that only brings new context (s:ring_update)
LLAMA_VIM_WARMUP = {
    "id_slot": 0,
    "input_prefix": "",
    "input_suffix": "",
    "input_extra": EXTRA,
    "prompt": "",
    "n_predict": 0,
    "temperature": 0.0,
    "samplers": [],
    "stream": False,
    "cache_prompt": True,
    "t_max_prompt_ms": 1,
    "t_max_predict_ms": 1,
    "response_fields": [""],
}
# llama.vscode's request for a suggestion (src/llama-server.ts, createRequestPayload)
LLAMA_VSCODE = {
    "id_slot": 0,
    "input_prefix": PREFIX,
    "input_suffix": SUFFIX,
    "input_extra": [{"text": "LLAMA_API int32_t llama_n_threads();\n", "time": 1733212800, "filename": "llama.h"}],
    "prompt": MIDDLE,
    "n_predict": N_PREDICT,
    "n_cmpl": 3,
    "top_k": 40,
    "top_p": 0.99,
    "stream": False,
    "samplers": ["top_k", "top_p", "infill"],
    "cache_prompt": True,
    "n_indent": 4,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 2500,
}
LLAMA_VSCODE_WARMUP = {
    "id_slot": 0,
    "input_prefix": "",
    "input_suffix": "",
    "input_extra": LLAMA_VSCODE["input_extra"],
    "prompt": "",
    "n_predict": 0,
    "samplers": [],
    "cache_prompt": True,
    "t_max_prompt_ms": 500,
    "t_max_predict_ms": 1,
}


@pytest.fixture(scope="module")
def qwen_path() -> Path:
    return models.resolve_model(MODEL_ID, models.default_cache_dir())


@pytest.fixture(scope="module")
def server(qwen_path: Path) -> Iterator[Running]:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    # no work begun while idle after an answer (tests/test_infill_idle.py covers it): these
    # tests count what each request decodes and finds cached
    config = ServeConfig(model_id=MODEL_ID, idle_tokens=0)
    with serving(config, lambda: load(qwen_path, backend=BackendConfig(n_ctx=N_CTX, n_threads=1))) as running:
        yield running


def post(server: Running, path: str, body: Any) -> httpx.Response:
    with server.client() as c:
        return c.post(path, json=body)


def test_llama_vim_request_gets_the_fields_it_reads(server: Running) -> None:
    r = post(server, "/infill", LLAMA_VIM)
    assert r.status_code == 200, r.text
    # llama.vim checks the raw text before it decodes it (s:fim_on_response)
    assert re.search(r"^\s*{", r.text) and re.search(r"\"content\"\s*:\"", r.text)
    body = r.json()
    assert set(body) == set(LLAMA_VIM["response_fields"])
    assert isinstance(body["content"], str) and body["content"]
    for key in ("timings/prompt_n", "timings/predicted_n", "tokens_cached"):
        assert isinstance(body[key], int), key
    for key in ("timings/prompt_ms", "timings/prompt_per_second", "timings/predicted_ms"):
        assert isinstance(body[key], float), key
    assert body["truncated"] is False and body["timings/predicted_n"] <= N_PREDICT


def test_warm_up_requests_answer_at_once(server: Running) -> None:
    r = post(server, "/infill", LLAMA_VIM_WARMUP)
    assert r.status_code == 200 and r.json() == {}  # response_fields [""] names nothing
    r = post(server, "/infill", LLAMA_VSCODE_WARMUP)
    assert r.status_code == 200
    assert r.json()["content"] == "" and r.json()["tokens_predicted"] == 0


def test_llama_vscode_request_gets_one_answer_per_completion(server: Running) -> None:
    r = post(server, "/infill", LLAMA_VSCODE)
    assert r.status_code == 200, r.text
    answers = r.json()
    assert isinstance(answers, list) and len(answers) == 3  # n_cmpl
    for i, a in enumerate(answers):
        assert a["index"] == i and isinstance(a["content"], str)
        assert isinstance(a["tokens_cached"], int) and isinstance(a["truncated"], bool)
        for key in ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms"):
            assert key in a["timings"]


def test_the_prompt_is_llama_cpp_s_fim_layout(server: Running) -> None:
    model = server.service.model
    expected = infill_prompt(
        model.backend, PREFIX, SUFFIX, extra=[Chunk(**EXTRA[0])], prompt=MIDDLE, n_ctx=N_CTX, n_predict=N_PREDICT
    )
    body = post(server, "/infill", {**LLAMA_VIM, "response_fields": None, **PLAIN, "temperature": 0}).json()
    assert body["tokens_evaluated"] == len(expected.tokens)
    assert body["prompt"].startswith("<|repo_name|>myproject\n<|file_sep|>llama.h\n")
    assert body["prompt"].endswith("<|fim_suffix|>}\n<|fim_middle|>")


def test_greedy_infill_streams_the_same_text(server: Running) -> None:
    request = {**LLAMA_VIM, "response_fields": None, "temperature": 0, "n_indent": 0, "t_max_predict_ms": -1}
    whole = post(server, "/infill", request).json()
    with server.client() as c:
        r = c.post("/infill", json={**request, "stream": True})
    events = [json.loads(ln[len("data: ") :]) for ln in r.text.split("\n") if ln]
    assert events[-1]["stop"] is True and all(not e["stop"] for e in events[:-1])
    assert "".join(e["content"] for e in events) == whole["content"]


def test_n_indent_ends_at_a_line_indented_less_than_the_cursor(server: Running) -> None:
    base = {**LLAMA_VIM, "response_fields": None, **PLAIN, "temperature": 0, "t_max_predict_ms": -1}
    base["input_suffix"] = "\n    return 0;\n}\n\nint other() {\n    return 1;\n}\n"
    free = post(server, "/infill", {**base, "n_indent": 0, "n_predict": 48}).json()
    for n_indent in (1, 4, 8):
        held = post(server, "/infill", {**base, "n_indent": n_indent, "n_predict": 48}).json()
        cut = indent_cut(free["content"], n_indent)
        assert held["content"] == (free["content"] if cut is None else free["content"][:cut]), n_indent
        if cut is not None:
            assert held["stop_type"] == "limit"


def test_t_max_predict_ms_stops_at_the_first_newline_past_the_budget(server: Running) -> None:
    base = {**LLAMA_VIM, "response_fields": None, **PLAIN, "temperature": 0, "n_indent": 0, "n_predict": 48}
    free = post(server, "/infill", {**base, "t_max_predict_ms": -1}).json()
    assert "\n" in free["content"][:-1], free["content"]  # the test needs a newline before the end
    timed = post(server, "/infill", {**base, "t_max_predict_ms": 1}).json()
    first_line = free["content"][: free["content"].index("\n") + 1]
    assert timed["content"].startswith(first_line) and free["content"].startswith(timed["content"])
    assert timed["tokens_predicted"] < free["tokens_predicted"] and timed["stop_type"] == "limit"


def test_a_request_its_time_budget_stops_runs_no_step_past_the_stop(server: Running) -> None:
    """The worker waits for the route's word on each step of an editor's request: the stop
    comes before another step starts, so what was decoded is exactly what was answered (the
    prompt's new tokens, then one token per step of plain decoding)."""
    base = {**LLAMA_VIM, "response_fields": None, **PLAIN, "temperature": 0, "n_indent": 0, "n_predict": 48}
    backend = server.service.model.backend
    before = backend.n_decoded
    timed = post(server, "/infill", {**base, "t_max_predict_ms": 1}).json()
    assert timed["stop_type"] == "limit" and timed["tokens_predicted"] < 48
    # the worker takes requests one at a time: once this one is answered, the last has ended
    warm = post(server, "/infill", {**base, "n_predict": 0}).json()
    decoded = backend.n_decoded - before - max(warm["timings"]["prompt_n"] - 1, 0)  # its last token: not decoded
    assert decoded == timed["timings"]["prompt_n"] - 1 + timed["tokens_predicted"]


def test_openai_suffix_builds_the_same_fim_prompt(server: Running) -> None:
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=120, max_retries=0)
    with_suffix = client.completions.create(
        model=MODEL_ID, prompt=PREFIX + MIDDLE, suffix=SUFFIX, max_tokens=8, temperature=0
    )
    model = server.service.model
    fim = infill_prompt(model.backend, PREFIX + MIDDLE, SUFFIX, n_ctx=N_CTX, n_predict=8)
    assert with_suffix.usage is not None and with_suffix.usage.prompt_tokens == len(fim.tokens)
    native = post(
        server,
        "/infill",
        {"input_prefix": PREFIX + MIDDLE, "input_suffix": SUFFIX, "n_predict": 8, "temperature": 0, **PLAIN},
    ).json()
    assert native["tokens_evaluated"] == len(fim.tokens)  # the same prompt either way


def test_a_fim_prompt_written_as_text_reads_its_special_tokens(server: Running) -> None:
    # Continue's llama.cpp provider builds the FIM prompt itself and sends it to /completion
    text = f"<|fim_prefix|>{PREFIX}{MIDDLE}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    body = post(server, "/completion", {"prompt": text, "n_predict": 8, "temperature": 0, **PLAIN}).json()
    vocab = server.service.model.backend
    assert body["tokens_evaluated"] == len(vocab.tokenize(text, add_special=True, parse_special=True))
    assert body["tokens_evaluated"] < len(vocab.tokenize(text, add_special=True, parse_special=False))
    assert "threads(" in body["content"], body["content"]  # it fills the middle


def test_a_warm_up_request_fills_the_cache_for_the_next_suggestion(server: Running) -> None:
    """llama.vim's ring update (`n_predict: 0`, a chunk of another file) prefills its prompt
    into the cache and writes nothing; the suggestion that follows, with the same chunk,
    reuses those cells: `tokens_cached` is everything the two prompts share."""
    post(server, "/completion", {"prompt": "Once upon a time", "n_predict": 2, **PLAIN})  # something else cached
    text = Path(__file__).read_text()[:3000]  # a file the user has open
    extra = [{"filename": "tests/test_infill.py", "text": text}]
    backend = server.service.model.backend
    fields = ["content", "tokens_predicted", "tokens_evaluated", "tokens_cached", "timings/prompt_n"]
    before = backend.n_decoded
    warm = post(server, "/infill", {**LLAMA_VIM_WARMUP, "input_extra": extra, "response_fields": fields})
    assert warm.status_code == 200, warm.text
    w = warm.json()
    assert w["content"] == "" and w["tokens_predicted"] == 0
    assert w["tokens_cached"] == 0  # the cache held another prompt
    # every prompt token but the last (which the request that generates decodes first)
    assert backend.n_decoded - before == w["tokens_evaluated"] - 1 > 500
    assert w["timings/prompt_n"] == w["tokens_evaluated"]
    chunk = [Chunk(e["filename"], e["text"]) for e in extra]
    ring = infill_prompt(backend, "", "", extra=chunk, n_ctx=N_CTX, n_predict=0).tokens
    real = infill_prompt(backend, PREFIX, SUFFIX, extra=chunk, prompt=MIDDLE, n_ctx=N_CTX, n_predict=N_PREDICT).tokens
    shared = next(i for i, (a, b) in enumerate(zip(ring, real, strict=False)) if a != b)
    assert shared > 500
    body = post(server, "/infill", {**LLAMA_VIM, "input_extra": extra, "response_fields": None, **PLAIN}).json()
    assert body["tokens_evaluated"] == len(real)
    assert body["tokens_cached"] == shared
    assert body["timings"]["prompt_n"] == len(real) - shared


def test_a_grammar_shapes_every_completion_of_an_infill(server: Running) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8, "temperature": 0,
            "grammar": 'root ::= "x"{3,3}', "n_cmpl": 2}
    r = post(server, "/infill", body)
    assert r.status_code == 200, r.text
    assert [a["content"] for a in r.json()] == ["xxx", "xxx"]  # each completion its own grammar state


def test_the_batch_size_bounds_the_code_around_the_cursor(qwen_path: Path) -> None:
    # llama-server's -b: 3/4 of it for the code before the cursor, 1/4 after (less the prompt)
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    config = ServeConfig(model_id=MODEL_ID, fim_batch=256, idle_tokens=0)
    load_it = lambda: load(qwen_path, backend=BackendConfig(n_ctx=N_CTX, n_threads=1))  # noqa: E731
    long_prefix, long_suffix = "x = 1\n" * 400, "y = 2\n" * 400
    with serving(config, load_it) as s:
        model = s.service.model
        body = {"input_prefix": long_prefix, "input_suffix": long_suffix, "n_predict": 1, "temperature": 0}
        with s.client() as c:
            answer = c.post("/infill", json=body).json()
        small = infill_prompt(model.backend, long_prefix, long_suffix, n_ctx=N_CTX, n_predict=1, n_batch=256)
        large = infill_prompt(model.backend, long_prefix, long_suffix, n_ctx=N_CTX, n_predict=1)
    assert answer["tokens_evaluated"] == len(small.tokens) < len(large.tokens)
    assert len(small.tokens) <= 256 + 8


def test_a_suggestion_cut_by_its_time_budget_is_remembered_by_the_worker(
    qwen_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A completion that `t_max_predict_ms` ends early is an answer: the worker's `on_done`
    keeps it in the key's memory (off the event loop), and the next request drafts from it."""
    import threading
    import time

    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    key = "editor-key"
    config = ServeConfig(model_id=MODEL_ID, api_keys=(key,), idle_tokens=0)
    with serving(config, lambda: load(qwen_path, backend=BackendConfig(n_ctx=N_CTX, n_threads=1))) as s:
        memory = s.service.memory
        assert memory is not None
        added: list[tuple[str, list[list[int]]]] = []
        real_add = memory.add

        def add(partition: str, docs: Any) -> None:
            added.append((threading.current_thread().name, [list(d) for d in docs]))
            real_add(partition, docs)

        monkeypatch.setattr(memory, "add", add)
        base = {**LLAMA_VIM, "response_fields": None, **PLAIN, "temperature": 0, "n_indent": 0, "n_predict": 48}
        with s.client(key) as c:
            timed = c.post("/infill", json={**base, "t_max_predict_ms": 1, "return_tokens": True}).json()
        assert timed["stop_type"] == "limit" and 0 < timed["tokens_predicted"] < 48, timed
        worker = s.service.worker
        assert worker is not None
        deadline = time.monotonic() + 30
        while worker.busy and time.monotonic() < deadline:  # the worker notices the stop at its next step
            time.sleep(0.01)
        assert memory.wait_built()
        ((thread, (doc,)),) = added
        assert thread == "generation"  # the worker's thread, not the event loop's
        n_prompt = timed["tokens_evaluated"]
        assert doc[n_prompt : n_prompt + len(timed["tokens"])] == timed["tokens"]  # the prompt, then the answer
        source = memory.source(memory.partition(key))
        assert source is not None
        source.observe(doc[:-4])
        (cand, *_) = source.propose(4, 1)
        assert cand.tokens.tolist() == doc[-4:]


def test_a_request_with_a_time_budget_drafts_to_the_line_end(
    server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its budget the answer ends at a newline, at a step nobody knows in advance: the
    request's drafts end at the line's end. Without a budget they run on."""
    drafting = server.service.model.drafting
    asked: list[bool] = []
    real = drafting.drafter

    def drafter(config: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(config.to_line_end)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(drafting, "drafter", drafter)
    base = {**LLAMA_VIM, "response_fields": None, "n_predict": 4}
    for budget in (250, -1):
        assert post(server, "/infill", {**base, "t_max_predict_ms": budget}).status_code == 200
    assert asked == [True, False]
