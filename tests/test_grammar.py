"""Grammars and JSON schemas on the small model: llama.cpp's grammar engine through the
backend, greedy output with drafts equal to plain output token for token, and the
service's `grammar`, `json_schema` and `response_format` on every route that generates,
with both workers (one request at a time, and `--parallel`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from tests.served import loader

pytestmark = pytest.mark.model

MODEL_ID = "smollm2-135m"
CHAT = [{"role": "user", "content": "Does not matter what I say, does it?"}]
LIST = 'root ::= ("- item " [0-9] "\\n"){8}'  # repetitive: drafts get accepted
PEOPLE = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    },
    "minItems": 3,
    "maxItems": 3,
}


# ---- the backend --------------------------------------------------------------------------


def test_an_invalid_grammar_says_what_the_parser_found(smol_model: Any) -> None:
    from lookahead.backend.grammar import Grammar, GrammarError

    with pytest.raises(GrammarError, match="expecting '\\)'"):
        Grammar(smol_model.backend, "root ::= this is (not valid GBNF")
    with pytest.raises(GrammarError, match="Undefined rule identifier 'x'"):
        Grammar(smol_model.backend, "root ::= x")
    with pytest.raises(GrammarError, match="empty"):
        Grammar(smol_model.backend, "  ")


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        (123, "is an object"),
        ({"type": 123}, "Unrecognized schema"),
        ({"type": "hiccup"}, "Unrecognized schema"),
        ({"$ref": "https://example.com/schema.json"}, "only local $ref"),
    ],
)
def test_a_schema_that_cannot_be_used_is_refused(schema: Any, needle: str) -> None:
    from lookahead.backend.grammar import GrammarError
    from lookahead.backend.json_schema import schema_to_gbnf

    with pytest.raises(GrammarError, match=needle.replace("$", "\\$")):
        schema_to_gbnf(schema)


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        ({"type": "string", "maxLength": -1}, "whole number >= 0"),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": "3"}, "whole number >= 0"),
        ({"type": "string", "minLength": 5, "maxLength": 3}, "more than its maximum"),
        ({"type": "string", "pattern": "^a{4,2}$"}, "more than its maximum"),
    ],
)
def test_a_bound_that_is_not_a_count_is_refused(schema: Any, needle: str) -> None:
    from lookahead.backend.grammar import GrammarError
    from lookahead.backend.json_schema import schema_to_gbnf

    with pytest.raises(GrammarError, match=needle):
        schema_to_gbnf(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": 100000},
        {"type": "string", "minLength": 3, "maxLength": 100000},
        {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 100000},
        {"type": "string", "pattern": "^a{0,100000}b{1500}$"},
    ],
)
def test_a_large_bound_is_a_repetition_that_llama_cpp_parses(smol_model: Any, schema: dict[str, Any]) -> None:
    """As llama-server's converter writes it (`x{0,N}`), not N nested groups: llama.cpp's
    parser recurses once per group, and this many ended the process."""
    from lookahead.backend.grammar import Grammar
    from lookahead.backend.json_schema import schema_to_gbnf

    gbnf = schema_to_gbnf(schema)
    assert len(gbnf) < 2000, len(gbnf)
    Grammar(smol_model.backend, gbnf).close()


def test_greedy_output_keeps_within_a_schema_bound(smol_model: Any) -> None:
    from lookahead.backend.grammar import Grammar
    from lookahead.backend.json_schema import schema_to_gbnf

    cases = [
        ("A long word in quotes:", {"type": "string", "maxLength": 5}, lambda v: isinstance(v, str) and len(v) <= 5),
        ("Many numbers:", {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
         lambda v: isinstance(v, list) and len(v) <= 3),
        ("Two or more words:", {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 2,
                                "maxItems": 3}, lambda v: 2 <= len(v) <= 3 and all(len(w) <= 4 for w in v)),
    ]
    for prompt, schema, fits in cases:
        sampling = SamplingConfig(temperature=0.0, constraint=Grammar(smol_model.backend, schema_to_gbnf(schema)))
        for draft in (DraftConfig(enabled=False), DraftConfig(adaptive=False, k=4, branches=2, budget=8)):
            out = smol_model.generate(prompt, max_tokens=60, sampling=sampling, draft=draft)
            assert out.finish_reason == "stop", (schema, out.text)
            assert fits(json.loads(out.text)), (schema, out.text)


def test_the_grammar_allows_an_end_token_only_where_it_may_end(smol_model: Any) -> None:
    from lookahead.backend.grammar import Grammar

    backend = smol_model.backend
    state = Grammar(backend, 'root ::= "a"{3,3}')()
    every = np.arange(backend.n_vocab, dtype=np.int32)
    eog = np.array([backend.is_eog(int(t)) for t in every])
    assert not state.allowed(every)[eog].any()
    for tok in backend.tokenize("aaa", add_special=False):
        state.accept(tok)
    ok = state.allowed(every)
    assert ok.any() and (ok == eog).all()  # finished: only an end token


# ---- the library: exact with drafts -------------------------------------------------------


def test_greedy_with_a_grammar_or_a_schema_equals_plain_decoding_token_for_token(smol_model: Any) -> None:
    from lookahead.backend.grammar import Grammar
    from lookahead.backend.json_schema import schema_to_gbnf

    cases = [
        ("- item 1\n- item 2\n- item 3\n", LIST),
        ("People as JSON:\n", schema_to_gbnf(PEOPLE)),
        ("Say it five times:", 'root ::= "a"{5,5}'),
    ]
    configs = [DraftConfig(adaptive=False, k=8, branches=1), DraftConfig(adaptive=False, k=4, budget=12, branches=3),
               DraftConfig()]
    accepted = 0
    for prompt, gbnf in cases:
        sampling = SamplingConfig(temperature=0.0, constraint=Grammar(smol_model.backend, gbnf))
        plain = smol_model.generate(prompt, max_tokens=120, sampling=sampling, draft=DraftConfig(enabled=False))
        assert plain.finish_reason == "stop"  # the grammar ended it, with an end token
        for config in configs:
            spec = smol_model.generate(prompt, max_tokens=120, sampling=sampling, draft=config)
            assert spec.tokens == plain.tokens, (prompt, config)
            accepted += spec.stats.accepted
    assert accepted > 0  # not vacuous: drafts were taken under the grammar
    five = smol_model.generate("Say it five times:", max_tokens=6, sampling=sampling)
    assert five.text == "aaaaa"


def test_seeded_sampling_with_a_schema_is_the_same_with_and_without_drafts(smol_model: Any) -> None:
    from lookahead.backend.grammar import Grammar
    from lookahead.backend.json_schema import schema_to_gbnf

    grammar = Grammar(smol_model.backend, schema_to_gbnf(PEOPLE))
    for seed in range(3):
        sampling = SamplingConfig(temperature=0.8, top_k=40, seed=seed, constraint=grammar)
        plain = smol_model.generate("People as JSON:\n", max_tokens=80, sampling=sampling,
                                    draft=DraftConfig(enabled=False))
        spec = smol_model.generate("People as JSON:\n", max_tokens=80, sampling=sampling,
                                   draft=DraftConfig(adaptive=False, k=6, branches=2, budget=10))
        assert spec.tokens == plain.tokens
        if plain.finish_reason == "stop":
            people = json.loads(plain.text)
            assert len(people) == 3 and all(set(p) == {"name", "age"} for p in people)


# ---- the service --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID), loader(smol_path, 2048)) as running:
        yield running


def post(server: Running, path: str, body: dict[str, Any]) -> httpx.Response:
    with server.client() as c:
        return c.post(path, json=body)


def chat_text(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def test_grammar_on_every_route_that_generates(server: Running) -> None:
    grammar = 'root ::= "a"{5,5}'
    for path in ("/v1/chat/completions", "/chat/completions"):
        assert chat_text(post(server, path, {"messages": CHAT, "grammar": grammar, "max_tokens": 8})) == "aaaaa"
    r = post(server, "/v1/completions", {"prompt": "Hi", "grammar": grammar, "max_tokens": 8})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "aaaaa", r.text
    r = post(server, "/completion", {"prompt": "Hi", "grammar": grammar, "n_predict": 8})
    assert r.status_code == 200 and r.json()["content"] == "aaaaa", r.text
    assert r.json()["stop_type"] == "eos"  # the grammar ended it with an end token


def test_json_schema_and_response_format_shape_the_reply(server: Running) -> None:
    body = {"messages": CHAT, "max_tokens": 10}
    assert chat_text(post(server, "/chat/completions", {**body, "json_schema": {"const": "42"}})) == '"42"'
    forms = [
        {"type": "json_object", "schema": {"const": "42"}},
        {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"const": "42"}}},
    ]
    for form in forms:
        assert chat_text(post(server, "/v1/chat/completions", {**body, "response_format": form})) == '"42"'
    reply = chat_text(post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Three people with names and ages, as JSON."}],
        "max_tokens": 200,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"schema": PEOPLE}},
    }))
    people = json.loads(reply)
    assert len(people) == 3 and all(isinstance(p["age"], int) for p in people)
    free = chat_text(post(server, "/v1/chat/completions", {**body, "response_format": {"type": "text"}}))
    assert free != '"42"'
    r = post(server, "/completion", {"prompt": "x", "json_schema": {"const": "foooooo"}, "n_predict": 10})
    assert r.status_code == 200 and r.json()["content"] == '"foooooo"', r.text


def test_a_streamed_reply_follows_the_grammar(server: Running) -> None:
    with server.client() as c:
        r = c.post("/v1/chat/completions", json={"messages": CHAT, "grammar": 'root ::= "a"{5,5}', "stream": True})
    pieces = [
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in r.text.splitlines()
        if line.startswith("data: {")
    ]
    assert "".join(pieces) == "aaaaa"


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/v1/chat/completions", {"grammar": "root ::= this is (not valid GBNF"}, "grammar"),
        ("/completion", {"grammar": "root ::= x"}, "grammar"),
        ("/v1/chat/completions", {"response_format": {"type": "sound"}}, "response_format"),
        ("/v1/chat/completions", {"response_format": {"type": "json_object", "schema": 123}}, "response_format"),
        ("/v1/chat/completions", {"response_format": {"type": "json_object", "schema": {"type": 123}}},
         "response_format"),
        ("/chat/completions", {"response_format": {"type": "json_object", "schema": {"type": "hiccup"}}},
         "response_format"),
        ("/v1/completions", {"json_schema": {"type": "hiccup"}}, "json_schema"),
        ("/completion", {"json_schema": {"$ref": "https://example.com/s.json"}}, "json_schema"),
        ("/v1/chat/completions", {"grammar": 'root ::= "a"', "json_schema": {}}, "json_schema"),
        ("/completion", {"grammar": 'root ::= "a"', "grammar_lazy": True}, "grammar_lazy"),
        ("/v1/chat/completions", {"grammar": 'root ::= "a"', "grammar_lazy": True}, "grammar_lazy"),
    ],
)
def test_what_cannot_be_used_is_a_400_in_openai_shape_naming_the_field(
    server: Running, path: str, extra: dict[str, Any], param: str
) -> None:
    body: dict[str, Any] = {"max_tokens": 4, **extra}
    if "chat" in path:
        body["messages"] = CHAT
    else:
        body["prompt"] = "hi"
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert param in err["message"]


def test_the_batch_worker_constrains_each_request_on_its_own(smol_path: Path) -> None:
    import concurrent.futures

    config = ServeConfig(model_id=MODEL_ID, parallel=2, shared_index=False)
    bodies = [
        {"messages": CHAT, "grammar": 'root ::= "a"{5,5}', "max_tokens": 8},
        {"messages": CHAT, "json_schema": {"const": "foooooo"}, "max_tokens": 10},
        {"messages": CHAT, "grammar": 'root ::= "b"{7,7}', "max_tokens": 10},
    ]
    with serving(config, loader(smol_path, 2048)) as running, concurrent.futures.ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda b: chat_text(post(running, "/v1/chat/completions", b)), bodies))
    assert replies == ["aaaaa", '"foooooo"', "bbbbbbb"]
