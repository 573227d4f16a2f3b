"""`lookahead complete --server URL` (or LOOKAHEAD_SERVER): the completion from a running
service equals the one written by a model loaded here, and a server that cannot be reached
means loading the model here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lookahead.cli.generate_cmd
from lookahead.apps.complete import split_at_cursor
from lookahead.apps.remote import remote_prompt, request_body
from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig
from lookahead.server import ServeConfig
from lookahead.server.background import Running, free_port, serving
from tests.test_cli import assert_cli_error, invoke, no_load, on  # noqa: F401 (a fixture)
from tests.test_complete import SOURCE

KEY = "key-complete-1"


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "stats.py"
    path.write_text(SOURCE, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    config = ServeConfig(model_id="smollm2-135m", api_keys=(KEY,))
    with serving(config, lambda: load(smol_path, backend=BackendConfig(n_ctx=8192, n_threads=1))) as running:
        yield running


def run(args: list[str], env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    result = invoke(["complete", *args, "--json"], env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exc_info)
    return json.loads(result.stdout), result.stderr


def test_the_request_is_an_editor_s_with_complete_s_sampling() -> None:
    split = split_at_cursor("def f():\n    <CURSOR>\n\nprint(f())\n")
    prompt = remote_prompt(split, fim=True)
    body = request_body(
        split, prompt, max_tokens=32, sampling=SamplingConfig(seed=7), stop=("\n\n",), draft=DraftConfig(exact=True)
    )
    # the indentation the cursor sits on is left to the model, as `complete` leaves it
    assert body["input_prefix"] == "def f():\n" and body["input_suffix"] == "\n\nprint(f())\n"
    assert body["prompt"] == "" and prompt.healed == "    "
    assert (body["temperature"], body["top_k"], body["top_p"], body["min_p"], body["seed"]) == (0.0, 40, 1.0, 0.0, 7)
    assert body["stop"] == ["\n\n"] and body["stream"] is True and body["lookahead"]["exact"] is True
    plain = request_body(
        split, remote_prompt(split, fim=False), max_tokens=8, sampling=SamplingConfig(), stop=(), draft=DraftConfig()
    )
    assert plain["prompt"] == "def f():\n" and "input_prefix" not in plain and plain["seed"] == -1


@pytest.mark.model
def test_server_completion_equals_the_local_one(
    server: Running, smol_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, _ = run([str(src), *on(smol_path), "-n", "48", "--no-context"])
    monkeypatch.setattr(lookahead.cli.generate_cmd, "load", _no_local_load)
    env = {"LOOKAHEAD_API_KEY": KEY}
    remote, _ = run([str(src), *on(smol_path), "-n", "48", "--no-context", "--server", server.url], env)
    assert remote["completion"] == local["completion"] and remote["completion"].strip()
    assert remote["fim"] is False  # SmolLM2 has no FIM tokens: the server was asked for the prefix's completion
    assert remote["n_tokens"] == local["n_tokens"] and remote["finish_reason"] == local["finish_reason"]
    # LOOKAHEAD_SERVER names the server where --server is not given
    by_env, _ = run([str(src), *on(smol_path), "-n", "48", "--no-context"], {**env, "LOOKAHEAD_SERVER": server.url})
    assert by_env["completion"] == local["completion"]


@pytest.mark.model
def test_a_server_out_of_reach_means_loading_the_model_here(smol_path: Path, src: Path) -> None:
    local, _ = run([str(src), *on(smol_path), "-n", "16", "--no-context"])
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    fallback, stderr = run([str(src), *on(smol_path), "-n", "16", "--no-context", "--server", url])
    assert fallback["completion"] == local["completion"]
    said = " ".join(stderr.split())  # rich wraps the line
    assert "cannot reach" in said and "loading the model here" in said


@pytest.mark.model
@pytest.mark.usefixtures("no_load")
def test_a_wrong_key_is_the_server_s_message(server: Running, src: Path) -> None:
    result = invoke(["complete", str(src), "--server", server.url, "-n", "4"], env={"LOOKAHEAD_API_KEY": "wrong"})
    assert_cli_error(result, "API key")


@pytest.mark.usefixtures("no_load")
def test_a_server_that_is_no_url_is_a_user_error(src: Path) -> None:
    assert_cli_error(invoke(["complete", str(src), "--server", "localhost:8080"]), "http:// or https:// URL")


def _no_local_load(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the model was loaded here although the server answered")
