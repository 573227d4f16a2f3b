"""The launcher that stands in for llama-server in llama.cpp's test suite: llama-server's
options become `lookahead serve`'s."""

from __future__ import annotations

import pytest

from tests.compat.llama_server_shim import serve_args


def test_the_service_options_carry_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOKAHEAD_COMPAT_MODEL", raising=False)
    monkeypatch.delenv("LOOKAHEAD_COMPAT_THREADS", raising=False)
    argv = [
        "--port",
        "8080",
        "--temp",
        "0.8",
        "--seed",
        "42",
        "--host",
        "127.0.0.1",
        "--hf-repo",
        "ggml-org/x",
        "--ctx-size",
        "512",
    ]
    argv += [
        "--batch-size",
        "32",
        "--parallel",
        "2",
        "--no-slots",
        "--api-key",
        "sk-secret",
        "--no-jinja",
        "--alias",
        "tinyllama-2",
    ]
    args = serve_args(argv)
    assert args[:3] == ["serve", "--model", "qwen2.5-coder-0.5b"]
    pairs = dict(zip(args[3::2], args[4::2], strict=True))
    assert pairs == {
        "--host": "127.0.0.1",
        "--port": "8080",
        "--parallel": "2",
        "--threads": "0",
        "--n-ctx": "512",
        "--api-key": "sk-secret",
    }


def test_the_model_and_threads_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOKAHEAD_COMPAT_MODEL", "smollm2-135m")
    monkeypatch.setenv("LOOKAHEAD_COMPAT_THREADS", "1")
    args = serve_args(["--port", "9000"])
    assert args[2] == "smollm2-135m" and args[args.index("--threads") + 1] == "1"
    assert "--n-ctx" not in args and "--api-key" not in args
