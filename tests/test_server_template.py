"""Chat templates in the service, on the small model (SmolLM2, whose own template is ChatML)
over real HTTP: `/apply-template` and `/v1/chat/completions/input_tokens` show the prompt a
chat completion reads and its count; `add_generation_prompt`, `continue_final_message` and
llama-server's refusals; `verbose`; a `--chat-template` given to `serve` replaces the
model's own, and a bad one stops `serve` before the model loads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import lookahead.api
import lookahead.cli.serve_cmd
from lookahead.cli.main import app
from lookahead.models.chat_formats import BUILTIN
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from tests.served import loader
from tests.sse import payloads

MODEL_ID = "smollm2-135m"
KEY = "key-template-1"
BOOK = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
CHATML_BOOK = "<|im_start|>system\nBook<|im_end|>\n<|im_start|>user\nWhat is the best book<|im_end|>\n"
OPEN = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID, calibrate=False), loader(smol_path, 2048)) as running:
        yield running


@pytest.fixture(scope="module")
def command_r_server(smol_path: Path) -> Iterator[Running]:
    config = ServeConfig(model_id=MODEL_ID, calibrate=False, chat_template=BUILTIN["command-r"], api_keys=(KEY,))
    with serving(config, loader(smol_path, 2048)) as running:
        yield running


def post(server: Running, path: str, body: dict[str, Any], key: str | None = None) -> Any:
    with server.client(key) as c:
        return c.post(path, json=body)


def ok(server: Running, path: str, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    r = post(server, path, body, key)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def refused(server: Running, body: dict[str, Any], param: str) -> str:
    """The 400 every route that renders messages answers, in OpenAI's error shape."""
    for path in ("/apply-template", "/v1/chat/completions/input_tokens", "/v1/chat/completions"):
        r = post(server, path, {**body, "max_tokens": 2})
        assert r.status_code == 400, (path, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param, error
    return str(error["message"])


@pytest.mark.model
def test_apply_template_answers_the_prompt_text(server: Running) -> None:
    assert ok(server, "/apply-template", {"messages": BOOK}) == {"prompt": CHATML_BOOK + OPEN}
    # without the generation prompt, the assistant's turn is not opened
    body = {"messages": BOOK, "add_generation_prompt": False}
    assert ok(server, "/apply-template", body) == {"prompt": CHATML_BOOK}


@pytest.mark.model
def test_input_tokens_counts_what_a_chat_completion_reads(server: Running) -> None:
    reply = ok(server, "/v1/chat/completions", {"messages": BOOK, "max_tokens": 1, "temperature": 0})
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
        counted = ok(server, path, {"messages": BOOK})
        assert counted == {"input_tokens": reply["usage"]["prompt_tokens"], "object": "response.input_tokens"}
    tokens = ok(server, "/tokenize", {"content": CHATML_BOOK + OPEN, "parse_special": True})["tokens"]
    assert counted["input_tokens"] == len(tokens) > 5


@pytest.mark.model
def test_a_last_assistant_message_is_continued(server: Running) -> None:
    messages = [*BOOK, {"role": "assistant", "content": "Whill"}]
    continued = CHATML_BOOK + OPEN + "Whill"
    explicit = {"messages": messages, "add_generation_prompt": False, "continue_final_message": True}
    assert ok(server, "/apply-template", explicit)["prompt"] == continued
    assert ok(server, "/apply-template", {"messages": messages})["prompt"] == continued  # llama.cpp's prefill
    closed = ok(server, "/apply-template", {"messages": messages, "continue_final_message": False})["prompt"]
    assert closed == CHATML_BOOK + OPEN + "Whill<|im_end|>\n" + OPEN
    reply = ok(server, "/v1/chat/completions", {**explicit, "max_tokens": 3, "temperature": 0, "verbose": True})
    assert reply["__verbose"]["prompt"] == continued
    assert reply["usage"]["prompt_tokens"] == ok(server, "/chat/completions/input_tokens", explicit)["input_tokens"]


@pytest.mark.model
def test_what_llama_server_refuses_is_a_400(server: Running) -> None:
    both = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    message = refused(server, {"messages": both, "continue_final_message": True}, "continue_final_message")
    assert "cannot both be true" in message
    twice = [
        {"role": "user", "content": "test"},
        {"role": "assistant", "content": "test"},
        {"role": "assistant", "content": "test"},
    ]
    assert "2 or more assistant messages" in refused(server, {"messages": twice}, "messages")
    user_last = {"messages": BOOK, "add_generation_prompt": False, "continue_final_message": True}
    assert "not one" in refused(server, user_last, "messages")


@pytest.mark.model
def test_verbose_adds_llama_servers_debug_answer(server: Running) -> None:
    body = {"messages": BOOK, "max_tokens": 2, "temperature": 0}
    plain = ok(server, "/v1/chat/completions", body)
    assert "__verbose" not in plain
    assert "__verbose" not in ok(server, "/v1/chat/completions", {**body, "verbose": False})
    reply = ok(server, "/v1/chat/completions", {**body, "verbose": True})
    verbose = reply["__verbose"]
    assert verbose["prompt"] == CHATML_BOOK + OPEN  # SmolLM2 adds no BOS
    assert verbose["content"] == reply["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert verbose["tokens_evaluated"] == reply["usage"]["prompt_tokens"]
    assert verbose["tokens_predicted"] == reply["usage"]["completion_tokens"] == 2
    assert verbose["stop_type"] == "limit" and verbose["timings"]["predicted_n"] == 2
    with server.client() as c:
        r = c.post("/v1/chat/completions", json={**body, "stream": True, "verbose": True})
    chunks = payloads(r.text.splitlines())
    assert [("__verbose" in c) for c in chunks] == [c["choices"][0]["finish_reason"] is not None for c in chunks]
    assert chunks[-1]["__verbose"]["prompt"] == CHATML_BOOK + OPEN
    # on /v1/completions too, the prompt as the model read it
    completion = ok(server, "/v1/completions", {"prompt": "def f(", "max_tokens": 2, "verbose": True})
    assert completion["__verbose"]["prompt"] == "def f(" and completion["__verbose"]["tokens_predicted"] == 2


@pytest.mark.model
def test_a_chat_template_given_to_serve_replaces_the_models(command_r_server: Running) -> None:
    system_user = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi there"}]
    expected = (
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
        "<|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    )
    assert post(command_r_server, "/apply-template", {"messages": system_user}).status_code == 401
    assert post(command_r_server, "/chat/completions/input_tokens", {"messages": system_user}).status_code == 401
    assert ok(command_r_server, "/apply-template", {"messages": system_user}, KEY) == {"prompt": expected}
    body = {"messages": system_user, "max_tokens": 2, "temperature": 0, "verbose": True}
    assert ok(command_r_server, "/v1/chat/completions", body, KEY)["__verbose"]["prompt"] == expected
    with command_r_server.client(KEY) as c:
        assert c.get("/props").json()["chat_template"] == BUILTIN["command-r"]


runner = CliRunner()


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def trap(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was resolved before the chat template was checked")

    monkeypatch.setattr(lookahead.api, "locate", trap)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--chat-template", "{% for m in messages %}{{ m.content }"], "not valid Jinja"),
        (["--chat-template", "{{ raise_exception('no system') }}"], "cannot render a user message"),
        (["--no-jinja", "--chat-template", "llama-7"], "unknown chat template name 'llama-7'"),
        (["--chat-template-file", "/nonexistent/t.jinja"], "cannot read --chat-template-file"),
        (["--chat-template", "chatml", "--chat-template-file", "t.jinja"], "not both"),
    ],
)
def test_a_bad_chat_template_stops_serve_before_the_model_loads(no_load: None, args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["serve", *args])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr


def test_serve_passes_the_chat_templates_source_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(lookahead.cli.serve_cmd, "run_serve", lambda **kw: seen.update(kw))
    assert runner.invoke(app, ["serve"]).exit_code == 0
    assert seen["chat_template"] is None  # the model's own
    assert runner.invoke(app, ["serve", "--chat-template", "llama3"]).exit_code == 0
    assert seen["chat_template"] == BUILTIN["llama3"]
    assert runner.invoke(app, ["serve", "--jinja", "--chat-template", "llama3"]).exit_code == 0
    assert seen["chat_template"] == "llama3"  # a Jinja template whose text is the word
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}{{ m.content }}{% endfor %}", encoding="utf-8")
    assert runner.invoke(app, ["serve", "--chat-template-file", str(path)]).exit_code == 0
    assert seen["chat_template"] == path.read_text(encoding="utf-8")
