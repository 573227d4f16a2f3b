"""`lookahead serve` from the command line: bad input before the model loads, a real
process that answers and shuts down cleanly on SIGTERM, saving its shared index."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

import lookahead.api
import lookahead.cli.serve_cmd
from lookahead.cli.main import app
from lookahead.server.spawn import ServeProcess

runner = CliRunner()


def error_line(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def no_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    def trap(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was resolved before the input was checked")

    monkeypatch.setattr(lookahead.api, "locate", trap)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "0"], "--port"),
        (["--port", "70000"], "--port"),
        (["--queue", "-1"], "--queue"),
        (["--threads", "-1"], "--threads"),
        (["--api-key", " "], "--api-key"),
        (["--log-level", "loud"], "--log-level"),
        (["--k-max", "0"], "k_max"),
        (["--parallel", "-2"], "--parallel"),
        (["--parallel", "99"], "--parallel"),
        (["--exact", "--parallel", "2"], "--parallel 1"),
        (["--grace-period", "0"], "--grace-period"),
        (["--replica-id", "a b"], "--replica-id"),
        (["--cache-reuse", "-1"], "--cache-reuse"),
        (["--batch-size", "8"], "--batch-size"),
    ],
)
def test_bad_options_fail_before_loading(no_serve: None, args: list[str], needle: str) -> None:
    assert needle in error_line(runner.invoke(app, ["serve", *args]))


def test_the_promise_to_batched_requests_reaches_the_batch_config(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(lookahead.cli.serve_cmd, "run_serve", lambda **kw: seen.update(kw))
    for args, slack in (
        (["--fair"], 0.0),
        (["--batch-total"], None),
        (["--fairness-slack", "0.25"], 0.25),
        ([], 0.1),  # the default: no request more than 10% below its pace without drafts
    ):
        assert runner.invoke(app, ["serve", "--parallel", "4", *args]).exit_code == 0
        assert seen["draft"].fairness_slack == slack and seen["parallel"] == 4
        assert seen["kv_unified"] is False  # the default: one KV stream per request
    assert runner.invoke(app, ["serve", "--parallel", "4", "--kv-unified"]).exit_code == 0
    assert seen["kv_unified"] is True


def test_cache_reuse_is_llama_servers_flag_on_by_default_as_llama_vim_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(lookahead.cli.serve_cmd, "run_serve", lambda **kw: seen.update(kw))
    assert runner.invoke(app, ["serve"]).exit_code == 0
    assert seen["cache_reuse"] == 256
    assert runner.invoke(app, ["serve", "--cache-reuse", "0"]).exit_code == 0
    assert seen["cache_reuse"] == 0


def test_batch_size_is_llama_servers_b_at_llama_vims_value(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(lookahead.cli.serve_cmd, "run_serve", lambda **kw: seen.update(kw))
    assert runner.invoke(app, ["serve"]).exit_code == 0
    assert seen["batch_size"] == 1024
    assert runner.invoke(app, ["serve", "-b", "2048"]).exit_code == 0
    assert seen["batch_size"] == 2048


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fair", "--fairness-slack", "0.2"], "give one"),
        (["--batch-total", "--fairness-slack", "0.2"], "give one"),
        (["--fairness-slack", "1"], "--fairness-slack"),
        (["--fairness-slack", "-0.1"], "--fairness-slack"),
    ],
)
def test_conflicting_or_impossible_promises_fail_before_loading(no_serve: None, args: list[str], needle: str) -> None:
    assert needle in error_line(runner.invoke(app, ["serve", *args]))


def test_a_key_file_that_is_missing_or_empty(no_serve: None, tmp_path: Path) -> None:
    assert "cannot read --api-key-file" in error_line(
        runner.invoke(app, ["serve", "--api-key-file", str(tmp_path / "none")])
    )
    empty = tmp_path / "keys"
    empty.write_text("# no keys here\n\n")
    assert "holds no key" in error_line(runner.invoke(app, ["serve", "--api-key-file", str(empty)]))


def test_a_port_in_use(no_serve: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        line = error_line(runner.invoke(app, ["serve", "--port", str(port)]))
    assert f"cannot listen on 127.0.0.1:{port}" in line


def test_keys_from_flag_and_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nalpha\n\nbeta\nalpha\n")
    assert lookahead.cli.serve_cmd.read_keys("gamma", keys) == ("gamma", "alpha", "beta")
    assert lookahead.cli.serve_cmd.read_keys(None, None) == ()


def test_secrets_come_from_files_or_the_environment_not_only_argv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A key on the command line is visible in `ps` and `docker inspect`: the API key and the
    metrics key can come from the environment or from a file instead."""
    seen: dict[str, object] = {}
    monkeypatch.setattr(lookahead.cli.serve_cmd, "run_serve", lambda **kw: seen.update(kw))
    env = {"LOOKAHEAD_API_KEY": "from-env", "LOOKAHEAD_METRICS_KEY": "metrics-from-env"}
    assert runner.invoke(app, ["serve"], env=env).exit_code == 0
    assert seen["keys"] == ("from-env",) and seen["metrics_key"] == "metrics-from-env"
    key_file = tmp_path / "metrics-key"
    key_file.write_text("# the scraper's key\nmetrics-from-file\n")
    result = runner.invoke(app, ["serve", "--metrics-key-file", str(key_file)], env={"LOOKAHEAD_METRICS_KEY": ""})
    assert result.exit_code == 0, result.output
    assert seen["metrics_key"] == "metrics-from-file"


def test_a_metrics_key_file_that_is_missing_empty_or_doubled(no_serve: None, tmp_path: Path) -> None:
    missing = ["serve", "--metrics-key-file", str(tmp_path / "none")]
    assert "cannot read --metrics-key-file" in error_line(runner.invoke(app, missing))
    two = tmp_path / "two"
    two.write_text("a\nb\n")
    assert "must hold one key" in error_line(runner.invoke(app, ["serve", "--metrics-key-file", str(two)]))
    both = ["serve", "--metrics-key", "k", "--metrics-key-file", str(two)]
    assert "give one" in error_line(runner.invoke(app, both))


def test_loopback_is_told_apart() -> None:
    assert all(map(lookahead.cli.serve_cmd.is_loopback, ["127.0.0.1", "localhost", "::1", "127.0.0.2"]))
    assert not any(map(lookahead.cli.serve_cmd.is_loopback, ["0.0.0.0", "192.168.1.10", "example.org"]))


@pytest.mark.model
def test_a_real_server_answers_and_shuts_down_on_sigterm(smol_path: Path, tmp_path: Path) -> None:
    index = tmp_path / "shared.json"
    args = ["--model", str(smol_path), "--threads", "1", "--index-file", str(index), "--index-scope", "key",
            "--log-level", "warning"]
    with ServeProcess(args, tmp_path / "serve.log") as server:
        server.wait_healthy(120)
        r = httpx.post(server.url + "/v1/completions", json={"prompt": "def add(a, b):", "max_tokens": 8}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 0
        t0 = time.monotonic()
        code = server.stop(60)
        took = time.monotonic() - t0
    assert code == 0, server.output()
    assert took < 30
    assert "Traceback" not in server.output()
    assert json.loads(index.read_text())["partitions"]  # flushed on the way out
