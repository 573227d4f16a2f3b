"""Models from Hugging Face (`hf:OWNER/REPO[:QUANT]`, `hf:OWNER/REPO/FILE.gguf`), against a
stand-in hub on loopback (tests/hub_standin.py): a fresh pull, a resumed one, a damaged
file (refused, nothing left in the cache), offline use of the cache, a 404, a private
repository with HF_TOKEN. The CLI runs as a subprocess, so `huggingface_hub` reads its
environment as it would for a user."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lookahead.models.catalog import ModelError
from lookahead.models.gguf import check_gguf
from lookahead.models.hub import HubRef, _bar_class, parse_ref, pick_file
from tests.hub_standin import COMMIT, Hub, Repo, hub_env, serve, tiny_gguf
from tests.test_cli import assert_user_error

ROOT = Path(__file__).resolve().parent.parent
GGUF = tiny_gguf()
REPO = "acme/tiny-GGUF"
FILES = {"tiny-Q4_K_M.gguf": GGUF, "tiny-Q8_0.gguf": tiny_gguf(seed=1), "README.md": b"# tiny\n"}


def lookahead(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lookahead.cli.main", *args],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def hub() -> Hub:
    with serve(Hub({REPO: Repo(dict(FILES)), "acme/private": Repo({"p.gguf": GGUF}, token="s3cret")})) as running:
        yield running  # type: ignore[misc]


def env_for(hub: Hub, tmp_path: Path, **extra: str) -> dict[str, str]:
    return hub_env(hub.url, str(tmp_path / "hf"), str(tmp_path / "xdg"), **extra)


def repo_folder(tmp_path: Path, repo: str = REPO) -> Path:
    return tmp_path / "hf" / ("models--" + repo.replace("/", "--"))


# --- references and the choice of a file (no hub needed) --------------------------------------


def test_references_parse() -> None:
    assert parse_ref("hf:a/b") == HubRef("a/b")
    assert parse_ref("hf:a/b:Q8_0") == HubRef("a/b", quant="Q8_0")
    assert parse_ref("hf:a/b/sub/m.gguf") == HubRef("a/b", filename="sub/m.gguf")
    for bad in ("hf:a", "hf:a/", "hf:/b", "hf:a/b/readme.md", "hf:a/b:", "hf:a/b/m.gguf:Q4_0"):
        with pytest.raises(ModelError, match="expected hf:OWNER/REPO"):
            parse_ref(bad)


def test_a_quantization_picks_its_file_and_none_means_q4_k_m() -> None:
    files = ["m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf", "README.md"]
    assert pick_file(HubRef("a/b"), files) == "m-Q4_K_M.gguf"
    assert pick_file(HubRef("a/b", quant="q8_0"), files) == "m-Q8_0.gguf"
    assert pick_file(HubRef("a/b"), ["only.gguf", "mmproj.gguf"]) == "only.gguf"
    with pytest.raises(ModelError, match="no Q4_K file"):  # a whole token: not Q4_K_M nor Q4_K_S
        pick_file(HubRef("a/b", quant="Q4_K"), files)
    with pytest.raises(ModelError, match="no .gguf"):
        pick_file(HubRef("a/b"), ["README.md"])
    with pytest.raises(ModelError, match="none is Q4_K_M"):
        pick_file(HubRef("a/b"), ["m-Q5_0.gguf", "m-Q8_0.gguf"])


def test_the_progress_adapter_reports_bytes_from_where_it_resumed() -> None:
    seen: list[tuple[str, int, int | None]] = []
    bar_class = _bar_class(lambda d, n, t: seen.append((d, n, t)), "fetching m.gguf")
    with bar_class(total=100, initial=40, desc="m.gguf", unit="B", unit_scale=True) as bar:
        bar.update(10)
        bar.set_postfix_str("1 MB/s", refresh=False)  # what a Xet download calls too
        bar.update(50)
    assert seen == [("fetching m.gguf", 40, 100), ("fetching m.gguf", 50, 100), ("fetching m.gguf", 100, 100)]


# --- against the stand-in hub ----------------------------------------------------------------


def test_the_stand_in_serves_a_real_gguf() -> None:
    path = Path(__file__).parent / "_tiny.gguf"
    try:
        path.write_bytes(GGUF)
        check_gguf(path)
    finally:
        path.unlink()


def test_a_fresh_pull_downloads_checks_and_prints_the_path(hub: Hub, tmp_path: Path) -> None:
    proc = lookahead(["models", "pull", f"hf:{REPO}"], env_for(hub, tmp_path))
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip())
    assert path == repo_folder(tmp_path) / "snapshots" / COMMIT / "tiny-Q4_K_M.gguf"
    assert path.read_bytes() == GGUF
    assert len(hub.gets("tiny-Q4_K_M.gguf")) == 1
    # named by its file, and a second time: from the cache, checked once (no new download)
    proc = lookahead(["models", "path", f"hf:{REPO}/tiny-Q4_K_M.gguf"], env_for(hub, tmp_path))
    assert proc.returncode == 0 and Path(proc.stdout.strip()) == path, proc.stderr
    assert len(hub.gets("tiny-Q4_K_M.gguf")) == 1


def test_a_dropped_connection_resumes_where_it_stopped(hub: Hub, tmp_path: Path) -> None:
    # huggingface_hub writes in 10 MiB chunks: a file of 24 MiB, cut at half, has one on disk
    big = tiny_gguf(n_floats=6 << 20, seed=2)
    hub.repos["acme/big-GGUF"] = Repo({"big-Q4_K_M.gguf": big}, drops=1)  # the first GET is cut halfway
    proc = lookahead(["models", "pull", "hf:acme/big-GGUF:Q4_K_M"], env_for(hub, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).read_bytes() == big
    first, second = hub.gets("big-Q4_K_M.gguf")
    assert "Range" not in first
    start = int(second["Range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < start < len(big)  # only the rest was asked for again


def test_a_file_that_does_not_match_the_hubs_sha256_is_refused_and_removed(hub: Hub, tmp_path: Path) -> None:
    damaged = bytearray(GGUF)
    damaged[len(damaged) // 2] ^= 0xFF  # same size: only the hash can tell
    hub.repos[REPO].served["tiny-Q4_K_M.gguf"] = bytes(damaged)
    proc = lookahead(["models", "pull", f"hf:{REPO}"], env_for(hub, tmp_path))
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "sha256", "removed it from the cache")
    assert not repo_folder(tmp_path).exists()  # no blob, no snapshot entry, nothing
    # --model hf:... on a generating command refuses it the same way, before any model loads
    proc = lookahead(["generate", "hi", "--model", f"hf:{REPO}"], env_for(hub, tmp_path))
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "sha256")


def test_offline_the_cache_is_used_and_nothing_is_asked(hub: Hub, tmp_path: Path) -> None:
    assert lookahead(["models", "pull", f"hf:{REPO}"], env_for(hub, tmp_path)).returncode == 0
    before = len(hub.requests)
    offline = env_for(hub, tmp_path, HF_HUB_OFFLINE="1")
    for ref in (f"hf:{REPO}", f"hf:{REPO}:Q4_K_M", f"hf:{REPO}/tiny-Q4_K_M.gguf"):
        proc = lookahead(["models", "path", ref], offline)
        assert proc.returncode == 0, proc.stderr
        assert Path(proc.stdout.strip()).read_bytes() == GGUF
    assert len(hub.requests) == before
    # what was never downloaded is a clear error offline
    proc = lookahead(["models", "path", f"hf:{REPO}:Q8_0"], offline)
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "HF_HUB_OFFLINE", "Q8_0")
    proc = lookahead(["models", "path", "hf:acme/never"], offline)
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "HF_HUB_OFFLINE", "acme/never")


def test_a_missing_repository_or_file_is_one_clear_line(hub: Hub, tmp_path: Path) -> None:
    proc = lookahead(["models", "pull", "hf:acme/nothing-here"], env_for(hub, tmp_path))
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "no model acme/nothing-here")
    proc = lookahead(["models", "pull", f"hf:{REPO}/absent.gguf"], env_for(hub, tmp_path))
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "has no file absent.gguf")
    proc = lookahead(["generate", "hi", "-m", "hf:acme/nothing-here"], env_for(hub, tmp_path))
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "no model acme/nothing-here")


def test_a_private_repository_needs_hf_token(hub: Hub, tmp_path: Path) -> None:
    proc = lookahead(["models", "pull", "hf:acme/private"], env_for(hub, tmp_path))
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "HF_TOKEN")
    proc = lookahead(["models", "pull", "hf:acme/private"], env_for(hub, tmp_path, HF_TOKEN="s3cret"))
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).read_bytes() == GGUF


def test_an_unreachable_hub_falls_back_to_the_cache_or_says_so_in_one_line(hub: Hub, tmp_path: Path) -> None:
    env = hub_env("http://127.0.0.1:9", str(tmp_path / "hf"), str(tmp_path / "xdg"))  # port 9: nothing listens
    proc = lookahead(["models", "pull", f"hf:{REPO}"], env)
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, "cannot reach Hugging Face", "HF_HUB_OFFLINE")
    assert lookahead(["models", "pull", f"hf:{REPO}"], env_for(hub, tmp_path)).returncode == 0
    proc = lookahead(["models", "path", f"hf:{REPO}"], env)
    assert proc.returncode == 0 and Path(proc.stdout.strip()).read_bytes() == GGUF, proc.stderr


@pytest.mark.model
def test_generate_runs_a_model_named_by_hf_reference(smol_path: Path, tmp_path: Path) -> None:
    with serve(Hub({"acme/smol-GGUF": Repo({"smol-Q4_1.gguf": smol_path.read_bytes()})})) as hub:
        args = ["generate", "def add(a, b):", "-m", "hf:acme/smol-GGUF", "-n", "4", "--no-spec", "-t", "1"]
        proc = lookahead(args, env_for(hub, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
