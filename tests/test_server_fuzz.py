"""Property-based fuzzing of the HTTP API from its own OpenAPI schema, against a live server
on the small model: bodies drawn from each endpoint's request schema (`schema_strategy`)
and arbitrary JSON. Whatever comes in: no 5xx, every error in OpenAI's shape, every stream
free of error payloads, and the server healthy with its KV cache empty afterwards. Hostile
grammars and schemas (deep nesting, large bounds, left recursion) go to `lookahead serve` in
a process of its own, so that a crash is seen.

Bounded: a fixed number of examples per endpoint, and drawn generation lengths are capped
at a few tokens (the length fields are still fuzzed by the arbitrary bodies), so the run
takes a minute or two."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from lookahead.server.spawn import ServeProcess
from tests.schema_strategy import from_schema, hostile_grammars, hostile_schemas
from tests.sse import payloads

pytestmark = pytest.mark.model

MODEL_ID = "smollm2-135m"
EXAMPLES = 25  # per endpoint and kind of body
MAX_DRAWN_TOKENS = 4
OPENAI = ("/v1/completions", "/v1/chat/completions")
NATIVE = ("/completion", "/infill", "/tokenize", "/detokenize")  # llama.cpp's own routes
ENDPOINTS = OPENAI + NATIVE


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    config = ServeConfig(model_id=MODEL_ID, max_body_bytes=256 << 10, max_queue=4)
    with serving(config, lambda: load(smol_path, backend=BackendConfig(n_ctx=512, n_threads=1))) as running:
        yield running


def inline(node: Any, components: dict[str, Any]) -> Any:
    """The schema with every `#/components/schemas/...` reference replaced by its target."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            return inline(components[ref.rsplit("/", 1)[1]], components)
        return {k: inline(v, components) for k, v in node.items()}
    if isinstance(node, list):
        return [inline(v, components) for v in node]
    return node


@pytest.fixture(scope="module")
def body_schemas(server: Running) -> dict[str, Any]:
    with server.client() as c:
        spec = c.get("/openapi.json").json()
    components = spec.get("components", {}).get("schemas", {})
    out = {}
    for path in ENDPOINTS:
        content = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        out[path] = inline(content["schema"], components)
    return out


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
# names the endpoints know, so arbitrary bodies reach the fields' own checks
FIELDS = ("prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "stream",
          "seed", "n", "echo", "prediction", "lookahead", "stream_options", "model",
          # llama.cpp's names
          "n_predict", "input_prefix", "input_suffix", "input_extra", "n_probs", "logit_bias", "n_cmpl", "samplers",
          "n_indent", "t_max_predict_ms", "response_fields", "content", "tokens", "with_pieces", "grammar")
arbitrary = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), json_values, max_size=6)


def bounded(body: Any, ours: bool) -> Any:
    """A drawn body with its generation length capped (and, if `ours`, our model's name)."""
    if not isinstance(body, dict):
        return body
    body = dict(body)
    for field in ("max_tokens", "max_completion_tokens", "n_predict"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and (value > 0 or field == "n_predict"):
            body[field] = min(value, MAX_DRAWN_TOKENS) if value >= 0 else MAX_DRAWN_TOKENS  # -1: to the end
    if "messages" in body or "prompt" in body or "input_prefix" in body:
        body.setdefault("max_tokens", MAX_DRAWN_TOKENS)
        body.setdefault("n_predict", MAX_DRAWN_TOKENS)
    if ours:
        body["model"] = MODEL_ID
    return body


def check(server: Running, path: str, body: Any) -> None:
    with server.client() as c:
        r = c.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code < 500, (r.status_code, r.text[:300], body)
    if r.status_code >= 400:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], err
        return
    assert r.status_code == 200
    streamed = isinstance(body, dict) and body.get("stream") is True
    if path in NATIVE:  # llama.cpp's streams end without [DONE]; every data line is JSON
        items = [json.loads(ln[5:]) for ln in r.text.splitlines() if ln.startswith("data:")] if streamed else [r.json()]
        assert items and all("error" not in item for item in items if isinstance(item, dict)), r.text[:300]
    elif streamed:
        payloads(r.text.splitlines())
    else:
        assert r.json()["choices"], r.text[:300]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_bodies_from_the_schema_are_answered_without_a_5xx(
    server: Running, body_schemas: dict[str, Any], path: str
) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(body=from_schema(body_schemas[path]), ours=st.booleans())
    def run(body: Any, ours: bool) -> None:
        check(server, path, bounded(body, ours))

    run()


@pytest.mark.parametrize("path", ENDPOINTS)
def test_arbitrary_json_is_answered_without_a_5xx(server: Running, path: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(body=arbitrary | json_values, ours=st.booleans())
    def run(body: Any, ours: bool) -> None:
        check(server, path, bounded(body, ours))

    run()


def test_the_server_is_healthy_after_the_fuzzing(server: Running) -> None:
    with server.client() as c:
        assert c.get("/health").json()["status"] == "ok"
        # without the prompt cache (on by default), which would keep this prompt's cells
        r = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "cache_prompt": False})
    assert r.status_code == 200
    assert not server.service.worker.busy and server.service.model.backend.n_used == 0
    with httpx.Client(base_url=server.url) as c:
        assert c.get("/metrics").status_code == 200  # no key configured: open


# ---- hostile grammars and schemas, against `lookahead serve` in a process of its own --------

HOSTILE_EXAMPLES = 30
CONSTRAINED_ROUTES = ("/completion", "/v1/completions", "/v1/chat/completions")


@pytest.fixture(scope="module")
def served(smol_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    log = tmp_path_factory.mktemp("fuzz") / "serve.log"
    args = ["--model", str(smol_path), "--threads", "1", "--parallel", "1", "--n-ctx", "512", "--log-level", "warning"]
    with ServeProcess(args, log) as server:
        server.wait_healthy(180)
        yield server


def _constrained_body(route: str, field: str, value: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"max_tokens": 2, "n_predict": 2} if route == "/completion" else {"max_tokens": 2}
    if "chat" in route:
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    if field == "response_format":
        body[field] = {"type": "json_schema", "json_schema": {"name": "x", "schema": value}}
    else:
        body[field] = value
    return body


def test_hostile_grammars_and_schemas_are_answered_and_the_server_stays_up(served: ServeProcess) -> None:
    fields = st.sampled_from(["grammar"]).map(lambda f: (f, hostile_grammars)) | st.sampled_from(
        ["json_schema", "response_format"]).map(lambda f: (f, hostile_schemas))

    @settings(max_examples=HOSTILE_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(route=st.sampled_from(CONSTRAINED_ROUTES), data=st.data(), field=fields)
    def run(route: str, data: st.DataObject, field: tuple[str, st.SearchStrategy[Any]]) -> None:
        name, values = field
        if name == "response_format" and route == "/completion":
            name = "json_schema"
        body = _constrained_body(route, name, data.draw(values))
        r = httpx.post(served.url + route, content=json.dumps(body), headers={"content-type": "application/json"},
                       timeout=30)
        assert r.status_code < 500, (r.status_code, r.text[:300], str(body)[:300])
        assert served.alive, served.output()[-2000:]
        t0 = time.monotonic()
        assert httpx.get(served.url + "/health", timeout=1).status_code == 200
        assert time.monotonic() - t0 < 1

    run()
