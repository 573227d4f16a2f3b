"""The Python API's one-time measurements: taken on a clean context, per backend configuration."""

from __future__ import annotations

import pytest

from lookahead.core.engine import GenerationError
from tests.costs import calibrate_quietly


@pytest.mark.model
def test_calibration_after_a_generation_measures_an_empty_cache(smol_model, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Cells left by an earlier generation (a long context, parked cells) would make every
    size look dearer, and the table is cached for good."""
    smol_model.generate("def add(a, b):\n    return a + b\n\n" * 20, max_tokens=16)
    assert smol_model.backend.n_used > 100  # the generation left its cells
    seen: list[int] = []
    real = smol_model.backend.measure_cost

    def spy(*args: object, **kwargs: object) -> dict[int, float]:
        seen.append(smol_model.backend.n_used)
        return {1: 0.01, 2: 0.015}

    monkeypatch.setattr(smol_model.backend, "measure_cost", spy)
    monkeypatch.setattr(smol_model.tuning, "cache_dir", tmp_path)  # no cached table: measure
    smol_model.tuning.calibrate()
    # empty first; then deeper, for the context slope; the cache is left empty
    assert seen[0] == 0
    assert seen[1:] == [min(1024, smol_model.backend.n_ctx // 2)]
    assert smol_model.backend.n_used == 0
    monkeypatch.setattr(smol_model.backend, "measure_cost", real)
    smol_model.tuning.ready = False


@pytest.mark.model
def test_calibration_caches_the_context_slope(smol_model, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """t(n) deep in the cache over t(n) on an empty one, per cell: measured once, then read
    from the cache with the curve; the controller's cost model prices the cells in use."""
    calls: list[int] = []

    def fake(*args: object, **kwargs: object) -> dict[int, float]:
        calls.append(smol_model.backend.n_used)
        deep = smol_model.backend.n_used > 0
        return {n: 0.01 * n * (1.5 if deep and n >= 8 else 1.0) for n in (1, 2, 4, 8, 16, 32, 64)}

    monkeypatch.setattr(smol_model.backend, "measure_cost", fake)
    monkeypatch.setattr(smol_model.tuning, "cache_dir", tmp_path)
    calibrate_quietly(monkeypatch)
    try:
        smol_model.tuning.calibrate()
        depth = calls[1]
        assert smol_model.tuning.cost_slope[1] == 0.0
        assert smol_model.tuning.cost_slope[8] == pytest.approx(0.5 / depth)
        smol_model.tuning.calibrate()  # from the cache
        assert len(calls) == 2
        assert smol_model.tuning.cost_slope[64] == pytest.approx(0.5 / depth)
        cost = smol_model.drafting.cost
        smol_model.backend.prefill(smol_model.backend.tokenize("x " * 40))
        cells = smol_model.backend.n_used
        assert cost.seconds(8) == pytest.approx(0.08 * (1 + 0.5 * cells / depth))
        assert cost.seconds(1) == pytest.approx(0.01)
    finally:
        smol_model.backend.reset()
        smol_model.tuning.ready = False


@pytest.mark.model
def test_exact_mode_in_a_small_context_says_what_to_do(smol_path) -> None:  # type: ignore[no-untyped-def]
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig
    from lookahead.tuning.exact import EXACT_MIN_CTX

    model = load(smol_path, backend=BackendConfig(n_ctx=256, n_threads=1))
    try:
        with pytest.raises(GenerationError, match=f"at least {EXACT_MIN_CTX}"):
            model.tuning.exact_limits()
    finally:
        model.close()


@pytest.mark.model
def test_a_small_n_batch_cuts_drafts_instead_of_failing(smol_path) -> None:  # type: ignore[no-untyped-def]
    """An API user's BackendConfig(n_batch=8): every verify holds the root and at most 7
    draft nodes, and the output is still plain greedy decoding's."""
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig
    from lookahead.core.draft_state import DraftConfig

    model = load(smol_path, backend=BackendConfig(n_ctx=512, n_batch=8, n_threads=1))
    try:
        prompt = "for i in range(10):\n    print(i)\nfor j in range(10):\n"
        plain = model.generate(prompt, max_tokens=48, draft=DraftConfig(enabled=False))
        spec = model.generate(prompt, max_tokens=48, draft=DraftConfig(adaptive=False, k=16, budget=32, branches=2))
        assert spec.tokens == plain.tokens
        assert max(spec.stats.k_trace) == 7
    finally:
        model.close()


def test_a_batch_too_small_for_a_draft_is_a_config_error() -> None:
    from lookahead.backend.llama import BackendConfig
    from lookahead.errors import ConfigError

    with pytest.raises(ConfigError, match="n_batch"):
        BackendConfig(n_batch=1)


def test_a_warm_up_prefill_starts_at_the_thread_count_the_cpu_probe_gives(smol_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # an editor's n_predict 0 request is a prefill at a request's start, like a generation's
    from lookahead.tuning.threads import ThreadGovernor

    class Load:  # other processes' CPUs, as the test sets them
        cpus, value = 2, 1.0

        def others(self) -> float:
            return self.value

        def now(self) -> float:  # looking ahead: the same load
            return self.value

    load = Load()
    seen: list[int] = []
    real = smol_model.backend.set_threads
    monkeypatch.setattr(smol_model.backend, "set_threads", lambda n: (seen.append(n), real(n)))
    monkeypatch.setattr(smol_model.tuning, "adapt_threads", True)
    monkeypatch.setattr(smol_model.tuning, "governor", ThreadGovernor(2, lambda n: 0.01 * n, load=load))  # type: ignore[arg-type]
    tokens = smol_model.prompt_tokens("def add(a, b):\n    return a + b\n" * 4)
    try:
        assert smol_model.warm(tokens).stats.tokens_cached == 0
        load.value = 0.0  # the other process has stopped
        assert smol_model.warm(tokens).stats.tokens_cached == len(tokens) - 1
        assert seen == [1, 2]  # one thread beside the busy process, then every thread
    finally:
        real(1)
