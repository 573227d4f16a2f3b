"""The backend probe: a configuration that crashes, hangs or computes garbage in the child is
ruled out, the next one is loaded, the verdict is cached atomically and never trusted when
damaged; when nothing works, one clear line and nothing cached.

The crash this guards against (llama.cpp's AMX weight buffers on Intel Xeons) cannot happen
on CPUs without AMX, so faults are injected into the child through LOOKAHEAD_PROBE_FAULT.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookahead.backend import probe
from lookahead.errors import BackendUnsupported

# ---- no model ---------------------------------------------------------------------------

AMX_INFO = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |"


def test_build_features_reads_llama_cpp_system_info() -> None:
    assert probe.build_features(AMX_INFO) == {"AVX", "AVX2", "F16C", "FMA", "AVX512", "AMX_INT8"}
    assert probe.build_features("CPU : AVX2 = 0 | LLAMAFILE = 1 |") == set()


def sigill(name: str) -> probe.Trial:
    return probe.Trial(name, False, "killed by SIGILL (illegal instruction)", 0.5)


def test_message_for_a_build_made_for_another_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "cpu_flags", lambda: ["avx", "avx2", "fma", "f16c"])
    msg = probe.unsupported_message([sigill("default"), sigill("no-extra-bufts")], AMX_INFO)
    assert "\n" not in msg
    assert "default: killed by SIGILL" in msg and "no-extra-bufts: killed by SIGILL" in msg
    assert "AMX_INT8" in msg and "AVX512" in msg  # the features this CPU lacks
    assert "pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python" in msg


def test_message_for_an_illegal_instruction_on_a_cpu_that_has_the_features(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flags = ["avx", "avx2", "fma", "f16c", "avx512f", "amx_int8", "amx_tile"]
    monkeypatch.setattr(probe, "cpu_flags", lambda: flags)
    msg = probe.unsupported_message([sigill("default"), sigill("no-extra-bufts")], AMX_INFO)
    assert '-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' in msg  # rebuild without AMX


def test_message_for_garbage_logits() -> None:
    trials = [probe.Trial("default", False, "non-finite logits in a batch of 4", 1.0)]
    msg = probe.unsupported_message(trials, "")
    assert "non-finite logits" in msg and "rebuild" in msg


# ---- the child, on the small model ------------------------------------------------------


def choose(path: Path, cache: Path, **kwargs: object) -> probe.Verdict:
    from lookahead.backend.llama import build_info, system_info

    return probe.choose(
        path, threads=1, cache_file=cache, build=build_info(), system_info=system_info(), **kwargs  # type: ignore[arg-type]
    )


@pytest.mark.model
def test_the_first_healthy_candidate_is_chosen_and_cached(smol_path: Path, tmp_path: Path) -> None:
    """llama.cpp's default where it runs (most CPUs); on a Xeon whose AMX buffers crash, the
    default fails in its child process and the next candidate is chosen."""
    cache = tmp_path / "probe.json"
    verdict = choose(smol_path, cache)
    assert not verdict.cached
    names = [c.name for c in probe.CANDIDATES]
    tried = [t.candidate for t in verdict.trials]
    assert tried == names[: len(tried)]  # fastest first, stop at a pass
    assert [t.ok for t in verdict.trials] == [False] * (len(tried) - 1) + [True]
    assert verdict.choice == tried[-1]
    assert verdict.trials[-1].max_diff is not None and verdict.trials[-1].max_diff <= probe.TOLERANCE
    if not probe.cpu_has("amx_int8"):
        assert verdict.choice == "default"
    again = choose(smol_path, cache)
    assert again.cached and again.choice == verdict.choice


@pytest.mark.model
def test_sigill_in_the_default_falls_back_and_is_remembered(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    monkeypatch.setenv(probe.FAULT_ENV, "default=sigill")
    model = load(smol_path, cache_dir=tmp_path / "models", backend=BackendConfig(n_threads=1))
    try:
        assert model.verdict is not None
        assert model.verdict.choice == "no-extra-bufts"
        assert "SIGILL" in model.verdict.trials[0].detail
        assert model.backend.config.repack is False  # the parent loaded what the probe chose
        result = model.generate("def add(a, b):", max_tokens=8)
        assert result.stats.n_tokens > 0
    finally:
        model.close()
    stored = json.loads((tmp_path / "probe.json").read_text())
    assert [v["choice"] for v in stored.values()] == ["no-extra-bufts"]
    # the fault is gone, but the verdict is cached: no new probe, same choice
    monkeypatch.delenv(probe.FAULT_ENV)
    again = load(smol_path, cache_dir=tmp_path / "models", backend=BackendConfig(n_threads=1))
    try:
        assert again.verdict is not None and again.verdict.cached
        assert again.verdict.choice == "no-extra-bufts"
    finally:
        again.close()


@pytest.mark.model
def test_a_hanging_child_is_ruled_out_by_the_timeout(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(probe.FAULT_ENV, "default=hang")
    verdict = choose(smol_path, tmp_path / "probe.json", timeout=20)
    assert verdict.choice == "no-extra-bufts"
    assert verdict.trials[0].detail.startswith("timed out")
    # a timeout may be a busy machine: the fallback is used, not remembered
    assert not (tmp_path / "probe.json").exists()


@pytest.mark.model
def test_finite_but_wrong_batched_logits_rule_a_candidate_out(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage need not be NaN: batched logits that are finite but far from the one-token
    ones fail the candidate too (the tolerance check), and the fallback is chosen."""
    if choose(smol_path, tmp_path / "real.json").choice != "default":
        pytest.skip("llama.cpp's default crashes on this CPU before any logits (AMX): no garbage to inject")
    monkeypatch.setenv(probe.FAULT_ENV, "default=garbage")
    verdict = choose(smol_path, tmp_path / "probe.json")
    assert verdict.choice == "no-extra-bufts"
    assert verdict.trials[0].detail.startswith("batched logits differ from one-token logits by")


@pytest.mark.model
def test_every_candidate_failing_is_one_line_and_caches_nothing(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(probe.FAULT_ENV, "default=sigill,no-extra-bufts=nan")
    cache = tmp_path / "probe.json"
    with pytest.raises(BackendUnsupported) as err:
        choose(smol_path, cache)
    msg = str(err.value)
    assert "\n" not in msg
    assert "default: killed by SIGILL" in msg and "no-extra-bufts: non-finite logits" in msg
    assert not cache.exists()
    assert not list(tmp_path.glob(".*tmp"))  # no half-written file either


@pytest.mark.model
@pytest.mark.parametrize(
    "damage",
    [
        "{not json",
        "[1, 2, 3]",
        None,  # the right key, holding a choice no candidate has
    ],
)
def test_a_damaged_cache_is_probed_again(smol_path: Path, tmp_path: Path, damage: str | None) -> None:
    cache = tmp_path / "probe.json"
    first = choose(smol_path, cache)
    if damage is None:
        data = json.loads(cache.read_text())
        for entry in data.values():
            entry["choice"] = "turbo"
        cache.write_text(json.dumps(data))
    else:
        cache.write_text(damage)
    again = choose(smol_path, cache)
    assert not again.cached and again.choice == first.choice
    assert json.loads(cache.read_text())  # rewritten, valid


@pytest.mark.model
def test_a_verdict_for_another_thread_count_is_not_reused(smol_path: Path, tmp_path: Path) -> None:
    from lookahead.backend.llama import build_info

    cache = tmp_path / "probe.json"
    choose(smol_path, cache)
    other = probe.choose(smol_path, threads=2, cache_file=cache, build=build_info())
    assert not other.cached
    assert len(json.loads(cache.read_text())) == 2
