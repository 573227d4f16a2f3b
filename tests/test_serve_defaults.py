"""llama-server's server-wide flags on `lookahead serve`: `--alias` (the model name reported),
`--temp`, `--seed`, `--n-predict` (defaults for a request that leaves the field out),
`--cors-origins` (which browser origins get CORS headers) and `--no-slots`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookahead.errors import ConfigError
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from lookahead.server.compat import origin_allowed
from lookahead.server.llamacpp.schemas import CompletionRequest as NativeCompletion
from lookahead.server.openai.schemas import ChatCompletionRequest, CompletionRequest
from lookahead.server.request_defaults import RequestDefaults, from_options

ALIAS = "my-coder"
PROMPT = "def fibonacci(n):"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization"}


# --- no model --------------------------------------------------------------------------


def test_a_field_the_request_leaves_out_takes_the_servers_default() -> None:
    d = RequestDefaults(temperature=0.0, seed=7, n_predict=5)
    native = d.apply(NativeCompletion(prompt="x"))
    assert (native.temperature, native.seed, native.n_predict) == (0.0, 7, 5)
    openai = d.apply(CompletionRequest(prompt="x"))
    assert (openai.temperature, openai.seed, openai.max_tokens) == (0.0, 7, 5)
    chat = d.apply(ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}]))
    assert chat.max_tokens == 5 and chat.limit() == 5


def test_a_field_the_request_names_keeps_its_value() -> None:
    d = RequestDefaults(temperature=0.0, seed=7, n_predict=5)
    native = d.apply(NativeCompletion(prompt="x", temperature=0.5, seed=1, max_tokens=9))
    assert (native.temperature, native.seed, native.n_predict) == (0.5, 1, 9)
    openai = d.apply(CompletionRequest(prompt="x", max_tokens=3, seed=2))
    assert (openai.max_tokens, openai.seed, openai.temperature) == (3, 2, 0.0)
    chat = d.apply(ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], max_completion_tokens=4))
    assert chat.limit() == 4


def test_no_server_defaults_leave_the_apis_own() -> None:
    body = CompletionRequest(prompt="x")
    assert RequestDefaults().apply(body) is body and body.max_tokens == 16
    unlimited = RequestDefaults(n_predict=-1)
    assert unlimited.apply(CompletionRequest(prompt="x")).max_tokens is None
    assert unlimited.apply(NativeCompletion(prompt="x")).n_predict == -1
    assert from_options(None, -1, None) == RequestDefaults()


@pytest.mark.parametrize(
    "kwargs, needle",
    [({"temperature": -0.1}, "--temp"), ({"seed": 2**32}, "--seed"), ({"n_predict": 0}, "--n-predict")],
)
def test_bad_server_defaults_are_a_config_error(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        RequestDefaults(**kwargs)


def test_cors_origins_any_localhost_or_a_list() -> None:
    assert origin_allowed("http://evil.com", ("*",))
    local = ("localhost",)
    for origin in ("http://localhost", "http://127.0.0.1:3000", "http://[::1]:8080", "https://localhost"):
        assert origin_allowed(origin, local), origin
    for origin in ("http://localhost.evil.com", "http://notlocalhost", "http://evil.com", "garbage"):
        assert not origin_allowed(origin, local), origin
    listed = ("https://app.example.com", "localhost")
    assert origin_allowed("https://app.example.com", listed) and origin_allowed("http://localhost:1", listed)
    assert not origin_allowed("https://app.example.com:8443", listed)
    assert not origin_allowed("http://app.example.com", listed)


def test_serve_reads_cors_origins_as_a_list() -> None:
    from lookahead.cli.serve_cmd import parse_origins

    assert parse_origins("*") == ("*",)
    assert parse_origins("https://a.example.com/, localhost") == ("https://a.example.com", "localhost")
    with pytest.raises(ConfigError, match="not an origin"):
        parse_origins("a.example.com")
    with pytest.raises(ConfigError, match="empty"):
        parse_origins(" , ")


# --- on a served model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    config = ServeConfig(
        model_id=ALIAS,
        defaults=RequestDefaults(temperature=0.0, seed=7, n_predict=5),
        cors_origins=("https://app.example.com", "localhost"),
        slots_endpoint=False,
    )
    with serving(config, lambda: load(smol_path, backend=BackendConfig(n_ctx=1024, n_threads=1))) as running:
        yield running


@pytest.mark.model
def test_requests_without_the_fields_get_the_server_defaults(server: Running) -> None:
    with server.client() as c:
        native = c.post("/completion", json={"prompt": PROMPT}).json()
        asked = c.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "temperature": 0}).json()
        v1 = c.post("/v1/completions", json={"prompt": PROMPT}).json()
        chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}).json()
        props = c.get("/props").json()
    assert native["tokens_predicted"] == 5 and asked["tokens_predicted"] == 2
    settings = native["generation_settings"]
    assert (settings["temperature"], settings["seed"], settings["n_predict"]) == (0.0, 7, 5)
    assert native["content"].startswith(asked["content"])  # greedy: the server's temperature 0
    assert v1["usage"]["completion_tokens"] == 5 and v1["choices"][0]["text"] == native["content"]
    assert chat["usage"]["completion_tokens"] == 5
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["seed"], params["n_predict"]) == (0.0, 7, 5)


@pytest.mark.model
def test_the_alias_is_the_model_name_reported(server: Running) -> None:
    with server.client() as c:
        models = c.get("/v1/models").json()
        props = c.get("/props").json()
        v1 = c.post("/v1/completions", json={"prompt": PROMPT, "model": "other", "max_tokens": 1}).json()
        native = c.post("/completion", json={"prompt": PROMPT, "n_predict": 1}).json()
    assert [m["id"] for m in models["data"]] == [ALIAS]
    assert props["model_alias"] == ALIAS and v1["model"] == ALIAS and native["model"] == ALIAS


@pytest.mark.model
def test_an_origin_not_listed_gets_no_cors_header(server: Running) -> None:
    with server.client() as c:
        evil = c.options("/completions", headers={"Origin": "http://evil.com", **PREFLIGHT})
        listed = c.options("/completions", headers={"Origin": "https://app.example.com", **PREFLIGHT})
        local = c.get("/health", headers={"Origin": "http://127.0.0.1:3000"})
        evil_get = c.get("/health", headers={"Origin": "http://evil.com"})
    assert evil.status_code == 200 and not any(k.lower().startswith("access-control") for k in evil.headers)
    assert listed.headers["access-control-allow-origin"] == "https://app.example.com"
    assert listed.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    assert local.headers["access-control-allow-origin"] == "http://127.0.0.1:3000"
    assert evil_get.status_code == 200 and "access-control-allow-origin" not in evil_get.headers


@pytest.mark.model
def test_slots_can_be_turned_off_as_in_llama_server(server: Running) -> None:
    with server.client() as c:
        r = c.get("/slots")
        props = c.get("/props").json()
    assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
    assert props["endpoint_slots"] is False


def test_several_hosts_are_each_bound() -> None:
    import socket

    from lookahead.cli.listen import bind_all, split_hosts
    from lookahead.errors import UserError

    assert split_hosts("127.0.0.1, ::1,127.0.0.1") == ["127.0.0.1", "::1"]
    with pytest.raises(ConfigError):
        split_hosts(" , ")
    socks = bind_all(["127.0.0.1", "[::1]"] if socket.has_ipv6 else ["127.0.0.1"], 0)
    try:
        assert socks[0].getsockname()[0] == "127.0.0.1"
        taken = socks[0].getsockname()[1]
        socks[0].listen()
        with pytest.raises(UserError, match="cannot listen on 127.0.0.1"):
            bind_all(["127.0.0.1"], taken)
    finally:
        for s in socks:
            s.close()


@pytest.mark.model
def test_aliases_and_tags_are_listed_with_the_model(smol_path: Path) -> None:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    config = ServeConfig(model_id="code", aliases=("code", "fim", "tiny"), tags=("chat", "small"))
    loader = lambda: load(smol_path, backend=BackendConfig(n_ctx=512, n_threads=1))  # noqa: E731
    with serving(config, loader) as running, running.client() as c:
        (entry,) = c.get("/models").json()["data"]
    assert entry["id"] == "code" and entry["aliases"] == ["code", "fim", "tiny"] and entry["tags"] == ["chat", "small"]
