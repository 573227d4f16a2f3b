"""The launcher that stands in for llama-server in llama.cpp's test suite: llama-server's
options become `lookahead serve`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.llamacpp_suite_compare import compare, read_junit, table
from tests.compat.llama_server_shim import serve_args
from tests.compat.real_llama_server import server_args


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
    assert args[:3] == ["serve", "--model", "qwen2.5-coder-0.5b"] and args[-1] == "--no-slots"
    pairs = dict(zip(args[3:-1:2], args[4:-1:2], strict=True))
    assert pairs == {
        "--host": "127.0.0.1",
        "--port": "8080",
        "--parallel": "2",
        "--threads": "0",
        "--n-ctx": "512",
        "--api-key": "sk-secret",
        "--alias": "tinyllama-2",
        "--temp": "0.8",
        "--seed": "42",
        "--cors-origins": "*",  # llama-server's default
    }


def test_the_model_and_threads_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOKAHEAD_COMPAT_MODEL", "smollm2-135m")
    monkeypatch.setenv("LOOKAHEAD_COMPAT_THREADS", "1")
    args = serve_args(["--port", "9000"])
    assert args[2] == "smollm2-135m" and args[args.index("--threads") + 1] == "1"
    assert "--n-ctx" not in args and "--api-key" not in args


def test_llama_servers_default_cors_origins_are_passed_as_it_reads_them() -> None:
    args = serve_args(["--port", "8080"])
    assert args[args.index("--cors-origins") + 1] == "*"  # llama-server's default, not lookahead's


def test_the_request_defaults_and_cors_origins_carry_over() -> None:
    args = serve_args(["--n-predict", "12", "--cors-origins", "localhost", "--seed", "-1"])
    assert args[args.index("--n-predict") + 1] == "12"
    assert args[args.index("--cors-origins") + 1] == "localhost"
    assert args[args.index("--seed") + 1] == "-1"


def test_a_real_llama_server_gets_the_suites_flags_on_the_one_model_file() -> None:
    argv = ["--port", "8080", "--hf-repo", "ggml-org/x", "--hf-file", "a.gguf", "--alias", "tinyllama-2"]
    argv += ["-m", "b.gguf", "--model-url=http://x", "--ctx-size", "512", "--no-slots"]
    assert server_args(argv, "/models/qwen.gguf") == [
        "--port",
        "8080",
        "--alias",
        "tinyllama-2",
        "--ctx-size",
        "512",
        "--no-slots",
        "--model",
        "/models/qwen.gguf",
    ]


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite>
<testcase classname="unit.test_basic" name="test_a" />
<testcase classname="unit.test_basic" name="test_b"><failure message="x" /></testcase>
<testcase classname="unit.test_infill" name="test_c[1]"><skipped /></testcase>
<testcase classname="unit.test_infill" name="test_d" />
</testsuite></testsuites>"""


def test_the_comparison_counts_what_passes_on_llama_server_and_on_lookahead(tmp_path: Path) -> None:
    ref = tmp_path / "ref.xml"
    ref.write_text(JUNIT)
    cand = tmp_path / "cand.xml"
    cand.write_text(JUNIT.replace('name="test_a" />', 'name="test_a"><error /></testcase>').replace(
        'name="test_b"><failure message="x" /></testcase>', 'name="test_b" />'
    ))
    result = compare(read_junit(ref), read_junit(cand))
    assert read_junit(ref)["unit/test_infill.py::test_c[1]"] == "skipped"
    assert result["total"] == {"tests": 4, "reference": 2, "both": 1, "candidate": 2}
    assert result["ratio"] == 0.5
    assert result["pass_on_llama_server_only"] == ["unit/test_basic.py::test_a"]
    assert result["pass_on_lookahead_only"] == ["unit/test_basic.py::test_b"]
    assert "| unit/test_infill.py | 2 | 1 | 1 | 1 |" in table(result, "")
    partial = compare(read_junit(ref), {"unit/test_basic.py::test_a": "passed"})
    assert partial["total"] == {"tests": 1, "reference": 1, "both": 1, "candidate": 1}
    assert len(partial["run_on_one_side_only"]) == 3


def test_the_chat_template_options_carry_over(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOOKAHEAD_COMPAT_CALLER_DIR", str(tmp_path))
    args = serve_args(["--port", "8080", "--no-jinja", "--chat-template", "command-r"])
    assert args[-3:] == ["--chat-template", "command-r", "--no-jinja"]
    # a relative template file is the suite's, read from where the suite started the launcher
    args = serve_args(["--jinja", "--chat-template-file", "../models/t.jinja"])
    assert args[-3:] == ["--chat-template-file", str(tmp_path / "../models/t.jinja"), "--jinja"]
    # without a template, --jinja / --no-jinja say nothing to lookahead serve
    assert not {"--jinja", "--no-jinja"} & set(serve_args(["--no-jinja"]))
