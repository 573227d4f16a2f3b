"""llama.cpp's own server API on the service (`/completion`, `/tokenize`, `/props`, ...), the
OpenAI routes without `/v1`, CORS and any model name, on the small model over real HTTP.

SmolLM2 has no fill-in-the-middle tokens: its `/infill` is the clear 400 tested here; the FIM
path itself is tested on a code model in test_infill.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving

pytestmark = pytest.mark.model

KEY = "key-llamacpp-1"
MODEL_ID = "smollm2-135m"
PROMPT = "def fibonacci(n):"
TIMING_KEYS = {
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
}


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    # no work begun while idle after an answer (tests/test_infill_idle.py covers it): these
    # tests count what each request decodes and finds cached
    config = ServeConfig(model_id=MODEL_ID, api_keys=(KEY,), idle_tokens=0)
    with serving(config, lambda: load(smol_path, backend=BackendConfig(n_ctx=2048, n_threads=1))) as running:
        yield running


def post(server: Running, path: str, body: Any, key: str | None = KEY) -> httpx.Response:
    with server.client(key) as c:
        return c.post(path, json=body)


def greedy(smol_model: Any, n: int) -> Any:
    sampling = SamplingConfig(temperature=0.0, top_k=0)
    return smol_model.generate(PROMPT, max_tokens=n, sampling=sampling, draft=DraftConfig())


def test_completion_answers_in_llama_cpp_shape_and_equals_the_library(server: Running, smol_model: Any) -> None:
    r = post(server, "/completion", {"prompt": PROMPT, "n_predict": 24, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    ref = greedy(smol_model, 24)
    assert body["content"] == ref.text
    assert body["stop"] is True and body["model"] == MODEL_ID
    assert body["tokens_predicted"] == ref.stats.n_tokens
    assert body["tokens_evaluated"] == len(smol_model.prompt_tokens(PROMPT))
    assert body["stop_type"] == ("limit" if ref.finish_reason == "length" else "eos")
    assert body["tokens_cached"] == 0 and body["truncated"] is False
    assert set(body["timings"]) == TIMING_KEYS
    assert body["timings"]["predicted_n"] == body["tokens_predicted"]
    assert body["timings"]["draft_n_accepted"] <= body["timings"]["draft_n"]
    assert body["generation_settings"]["n_predict"] == 24


def test_completion_takes_token_ids_and_a_stop_word(server: Running, smol_model: Any) -> None:
    ids = smol_model.prompt_tokens(PROMPT)
    as_text = post(server, "/completion", {"prompt": PROMPT, "n_predict": 24, "temperature": 0}).json()
    as_ids = post(server, "/completion", {"prompt": ids, "n_predict": 24, "temperature": 0, "return_tokens": True})
    assert as_ids.json()["content"] == as_text["content"]
    assert len(as_ids.json()["tokens"]) == as_ids.json()["tokens_predicted"]
    word = as_text["content"][5:8]
    stopped = post(server, "/completion", {"prompt": PROMPT, "n_predict": 24, "temperature": 0, "stop": [word]}).json()
    assert stopped["stop_type"] == "word" and stopped["stopping_word"] == word
    assert stopped["content"] == as_text["content"][: as_text["content"].index(word)]


def test_completion_streams_as_llama_cpp_does(server: Running) -> None:
    whole = post(server, "/completion", {"prompt": PROMPT, "n_predict": 24, "temperature": 0}).json()
    with server.client(KEY) as c:
        r = c.post("/completion", json={"prompt": PROMPT, "n_predict": 24, "temperature": 0, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    lines = [ln for ln in r.text.split("\n") if ln]
    assert all(ln.startswith("data: ") for ln in lines) and "[DONE]" not in r.text
    events = [json.loads(ln[len("data: ") :]) for ln in lines]
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["content"] == "" and set(events[-1]["timings"]) == TIMING_KEYS
    assert events[-1]["tokens_predicted"] == whole["tokens_predicted"]


def test_response_fields_pick_nested_fields_by_path(server: Running) -> None:
    fields = ["content", "timings/prompt_n", "timings/predicted_ms", "truncated", "tokens_cached", "no/such"]
    body = post(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "response_fields": fields}).json()
    assert set(body) == {"content", "timings/prompt_n", "timings/predicted_ms", "truncated", "tokens_cached"}
    assert isinstance(body["timings/prompt_n"], int) and isinstance(body["timings/predicted_ms"], float)


def test_infill_on_a_model_without_fim_tokens_is_a_clear_400(server: Running) -> None:
    r = post(server, "/infill", {"input_prefix": "def f():\n", "input_suffix": "\n", "prompt": "    return"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "fill-in-the-middle" in err["message"] and err["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/completion", {"prompt": "hi", "n_probs": -1}, "n_probs"),
        ("/completion", {"prompt": "hi", "logit_bias": [[10**9, -100]]}, "logit_bias"),
        ("/completion", {"prompt": "hi", "logit_bias": [[15, "x"]]}, "logit_bias"),
        ("/v1/completions", {"prompt": "hi", "logit_bias": 3}, "logit_bias"),
        ("/completion", {"prompt": "hi", "grammar": "root ::= x"}, "grammar"),
        ("/completion", {"prompt": ""}, "empty"),
        ("/completion", {"prompt": [10**9]}, "not in the vocabulary"),
        ("/completion", {"prompt": []}, "empty"),
        ("/completion", {"prompt": {"prompt_string": "hi", "multimodal_data": ["eA=="]}}, "multimodal_data"),
        ("/completion", {"prompt": [[1, 2], 3.5]}, "a prompt is"),
        ("/completion", {"prompt": ["a", "b"], "stream": True}, "several prompts"),
        ("/completion", {"prompt": "word " * 3000}, "context size"),
        ("/completion", {"prompt": "hi", "stream": True, "n_cmpl": 2}, "n_cmpl"),
        ("/infill", {"input_prefix": "a"}, "input_suffix"),
        (
            "/infill",
            {"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": 123, "text": "x"}]},
            "filename",
        ),
        ("/infill", {"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "ok"}]}, "text"),
        ("/detokenize", {"tokens": [-1]}, "vocabulary"),
    ],
)
def test_bad_requests_are_a_400_naming_the_field(server: Running, path: str, body: Any, needle: str) -> None:
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_tokenize_and_detokenize_round_trip(server: Running, smol_model: Any) -> None:
    tokens = post(server, "/tokenize", {"content": "hello world"}).json()["tokens"]
    assert tokens == smol_model.backend.tokenize("hello world", add_special=False, parse_special=True)
    assert post(server, "/detokenize", {"tokens": tokens}).json() == {"content": "hello world"}
    pieces = post(server, "/tokenize", {"content": "hello world", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == tokens and "".join(p["piece"] for p in pieces) == "hello world"


def test_props_and_slots(server: Running) -> None:
    with server.client(KEY) as c:
        props = c.get("/props").json()
        slots = c.get("/slots").json()
    assert props["model_path"].endswith(".gguf") and props["total_slots"] == 1
    assert props["default_generation_settings"]["n_ctx"] == 2048
    assert len(slots) == 1 and slots[0]["n_ctx"] == 2048 and slots[0]["is_processing"] is False
    assert props["endpoint_slots"] is True


def test_openai_routes_without_v1_and_any_model_name(server: Running) -> None:
    import openai

    client = openai.OpenAI(base_url=server.url, api_key=KEY, timeout=120, max_retries=0)
    chat = client.chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0
    )
    assert chat.model == MODEL_ID and chat.choices[0].message.content
    assert [m.id for m in client.models.list()] == [MODEL_ID]
    v1 = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, timeout=120, max_retries=0)
    resp = v1.completions.create(model="gpt-3.5-turbo", prompt=PROMPT, max_tokens=4, temperature=0)
    assert resp.model == MODEL_ID and resp.choices[0].text
    # /completions without the prefix is llama.cpp's own completion, as in llama-server
    native = post(server, "/completions", {"prompt": PROMPT, "max_tokens": 4, "temperature": 0}).json()
    assert native["content"] == resp.choices[0].text and native["tokens_predicted"] == 4


def test_the_api_key_is_still_required_on_every_route(server: Running) -> None:
    for path in ("/completions", "/completion", "/infill", "/tokenize"):
        r = post(server, path, {"prompt": "hi", "content": "hi"}, key=None)
        assert r.status_code == 401, path
    with server.client() as c:  # Anthropic's header for the key, as llama-server takes it
        assert c.post("/tokenize", json={"content": "hi"}, headers={"X-Api-Key": KEY}).status_code == 200
        assert c.post("/tokenize", json={"content": "hi"}, headers={"X-Api-Key": "nope"}).status_code == 401


def test_cors_lets_a_browser_page_call_the_service(server: Running) -> None:
    with server.client() as c:
        pre = c.options(
            "/completions",
            headers={
                "Origin": "http://localhost:3000",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "Authorization",
            },
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert pre.headers["access-control-allow-credentials"] == "true"
        assert pre.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
        assert pre.headers["access-control-allow-headers"] == "*"
        r = c.get("/health", headers={"Origin": "http://localhost:3000"})
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
        # the names as llama-server capitalizes them (some clients compare them as written)
        assert b"Access-Control-Allow-Origin" in [k for k, _ in r.headers.raw]
        # by default a page elsewhere gets no CORS header, and cannot make the model work
        assert "access-control-allow-origin" not in c.get("/health", headers={"Origin": "http://example.org"}).headers
        r = c.post("/completion", json={"prompt": PROMPT, "n_predict": 1}, headers={"Origin": "http://example.org"})
        assert r.status_code == 403


def test_an_image_in_a_chat_is_a_400_not_ignored(server: Running) -> None:
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "file://x.jpeg"}}]
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": parts}], "max_tokens": 1})
    assert r.status_code == 400 and "image_url content is not supported" in r.json()["error"]["message"]


def test_a_prompt_that_extends_the_last_one_prefills_only_its_new_tail(server: Running) -> None:
    # llama.cpp's cache_prompt (on by default): the KV cells of the common prefix are reused
    first = PROMPT + "\n    # " + "the next number is the sum of the two before it, " * 6
    a = post(server, "/completion", {"prompt": first, "n_predict": 4, "temperature": 0}).json()
    b = post(server, "/completion", {"prompt": first + "starting from 0 and 1", "n_predict": 4, "temperature": 0})
    assert b.status_code == 200, b.text
    warm = b.json()
    assert a["tokens_evaluated"] - 2 <= warm["tokens_cached"] < warm["tokens_evaluated"]
    assert warm["timings"]["cache_n"] == warm["tokens_cached"]
    assert warm["timings"]["prompt_n"] == warm["tokens_evaluated"] - warm["tokens_cached"]
    body = {"prompt": first + "starting from 0 and 1", "n_predict": 4, "temperature": 0, "cache_prompt": False}
    cold = post(server, "/completion", body).json()
    assert cold["tokens_cached"] == 0 and cold["timings"]["prompt_n"] == cold["tokens_evaluated"]


def test_logit_bias_bans_tokens_by_id_or_text_on_every_route(server: Running) -> None:
    """The greedy continuation's first token, banned (by id, by its text, OpenAI's object
    form), is never written; a positive bias on another token makes it the first."""
    base = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "return_tokens": True}
    plain = post(server, "/completion", base).json()
    first = plain["tokens"][0]
    piece = post(server, "/detokenize", {"tokens": [first]}).json()["content"]
    for bias in ([[first, False]], {str(first): -100}, [[piece, -100]]):
        out = post(server, "/completion", {**base, "logit_bias": bias}).json()
        assert first not in out["tokens"], bias
    forced = post(server, "/completion", {**base, "logit_bias": [[42, 1000]]}).json()
    assert forced["tokens"] and set(forced["tokens"]) == {42}
    v1 = post(
        server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logit_bias": {"42": 100}}
    ).json()
    assert v1["choices"][0]["text"] == post(server, "/detokenize", {"tokens": [42] * 4}).json()["content"]


def test_n_probs_reports_each_tokens_logprob_and_candidates(server: Running) -> None:
    base = {"prompt": PROMPT, "n_predict": 5, "temperature": 0, "n_probs": 3, "return_tokens": True}
    out = post(server, "/completion", base).json()
    probs = out["completion_probabilities"]
    assert [p["id"] for p in probs] == out["tokens"] and len(probs) == 5
    for p in probs:
        assert p["logprob"] <= 0 and isinstance(p["token"], str) and isinstance(p["bytes"], list)
        tops = p["top_logprobs"]
        assert len(tops) == 3 and tops[0]["id"] == p["id"]  # greedy: the most likely was picked
        assert tops[0]["logprob"] == pytest.approx(p["logprob"]) and tops[0]["logprob"] >= tops[1]["logprob"]
    with server.client(KEY) as c, c.stream("POST", "/completion", json={**base, "stream": True}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    streamed = [p for e in events if not e["stop"] for p in e.get("completion_probabilities", [])]
    assert [p["id"] for p in streamed] == out["tokens"]
    post_probs = post(server, "/completion", {**base, "temperature": 1, "post_sampling_probs": True, "seed": 1})
    for p in post_probs.json()["completion_probabilities"]:
        assert 0 < p["prob"] <= 1 and sum(t["prob"] for t in p["top_probs"]) <= 1 + 1e-6


def test_a_list_of_prompts_is_answered_with_a_list_in_order(server: Running) -> None:
    ids = post(server, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    base = {"n_predict": 4, "temperature": 0}
    one = post(server, "/completion", {**base, "prompt": PROMPT}).json()
    several = post(server, "/completion", {**base, "prompt": [ids, PROMPT, {"prompt_string": PROMPT}, "x = 1"]})
    answers = several.json()
    assert isinstance(answers, list) and [a["index"] for a in answers] == [0, 1, 2, 3]
    assert [a["content"] for a in answers[:3]] == [one["content"]] * 3
    assert answers[3]["tokens_evaluated"] < answers[0]["tokens_evaluated"]
    mixed = post(server, "/completion", {**base, "prompt": [*ids[:2], "fibonacci", 13]}).json()
    assert isinstance(mixed, dict) and mixed["tokens_evaluated"] > 3  # ids and text: one prompt


def test_openai_logprobs_on_chat_and_completions(server: Running) -> None:
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, timeout=120, max_retries=0)
    msgs: Any = [{"role": "user", "content": "Write a haiku"}]
    chat = client.chat.completions.create(
        model="m", messages=msgs, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3
    )
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == chat.usage.completion_tokens  # type: ignore[union-attr]
    assert "".join(t.token for t in content) == chat.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token
    stream = client.chat.completions.create(
        model="m", messages=msgs, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2, stream=True
    )
    streamed = [
        t.token for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content or []
    ]
    assert streamed == [t.token for t in content]
    legacy = client.completions.create(model="m", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2)
    lp = legacy.choices[0].logprobs
    assert lp is not None and "".join(lp.tokens or []) == legacy.choices[0].text
    assert len(lp.token_logprobs or []) == 4 and all(len(d) <= 2 for d in lp.top_logprobs or [])
    assert lp.text_offset == sorted(lp.text_offset or []) and (lp.text_offset or [1])[0] == 0
    plain = client.chat.completions.create(model="m", messages=msgs, max_tokens=2, temperature=0)
    assert plain.choices[0].logprobs is None


def test_a_chat_stream_opens_with_the_role_alone_and_ends_with_timings(server: Running) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with server.client(KEY) as c, c.stream("POST", "/chat/completions", json=body) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all("role" not in e["choices"][0]["delta"] for e in events[1:] if e["choices"])
    usage = events[-1]
    assert usage["choices"] == [] and usage["timings"]["predicted_n"] == usage["usage"]["completion_tokens"]


def test_n_cmpl_completion_i_samples_with_seed_plus_i(server: Running) -> None:
    """As llama-server seeds its n_cmpl children: sampled completions differ, and each is
    the one a single request with that seed writes."""
    body = {"prompt": "Once upon a time", "n_predict": 12, "temperature": 1.0, "seed": 40,
            "lookahead": {"enabled": False}}
    r = post(server, "/completion", {**body, "n_cmpl": 2})
    assert r.status_code == 200, r.text
    first, second = (a["content"] for a in r.json())
    assert first != second
    alone = post(server, "/completion", {**body, "seed": 41})
    assert alone.json()["content"] == second


def test_completion_streams_prompt_progress_when_asked(server: Running) -> None:
    body = {"prompt": PROMPT * 8, "n_predict": 4, "temperature": 0, "stream": True, "cache_prompt": False}
    with server.client(KEY) as c, c.stream("POST", "/completion", json={**body, "return_progress": True}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    reports = [e["prompt_progress"] for e in events if "prompt_progress" in e]
    total = events[-1]["tokens_evaluated"]
    assert reports[0]["processed"] == reports[0]["cache"] == 0
    assert [r["processed"] for r in reports][1:] == sorted({r["processed"] for r in reports[1:]})
    assert reports[-1]["processed"] == total and all(r["total"] == total for r in reports)
    assert all(e["content"] == "" and e["stop"] is False for e in events if "prompt_progress" in e)
    with server.client(KEY) as c, c.stream("POST", "/completion", json=body) as r:
        plain = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert not any("prompt_progress" in e for e in plain)
