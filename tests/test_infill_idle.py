"""Idle work on the default code model, through `/infill` as llama.vim sends it: after a
suggestion that its time budget ended, the follow-up that assumes it accepted finds its
prompt already read and drafts from what was written while idle; without idle work the same
follow-up reads its new tokens itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from lookahead.models import catalog as models
from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from lookahead.server.idle import accepted
from tests.costs import frozen_costs, use_curve
from tests.served import metric

pytestmark = pytest.mark.model

MODEL_ID = "qwen2.5-coder-0.5b"
PREFIX = "def area(shape, a, b=0):\n"
SUFFIX = "\n\ndef perimeter(shape, a, b=0):\n    pass\n"
QUICK = {
    "input_prefix": PREFIX,
    "input_suffix": SUFFIX,
    "input_extra": [{"filename": "shapes.py", "text": "SHAPES = ('square', 'rectangle', 'circle')\n"}],
    "prompt": "",
    "n_predict": 64,
    "temperature": 0.0,  # greedy, so that the two servers' suggestions are the same
    "samplers": ["top_k", "top_p", "infill"],
    "cache_prompt": True,
    "t_max_predict_ms": 1,  # past the budget at once: the answer ends at its first newline
    "response_fields": ["content", "stop_type", "timings/prompt_n", "timings/draft_n_accepted", "tokens_cached"],
}


def serve(path: Path, idle_tokens: int) -> Any:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    config = ServeConfig(model_id=MODEL_ID, idle_tokens=idle_tokens, calibrate=False)
    return serving(config, lambda: load(path, backend=BackendConfig(n_ctx=2048, n_threads=1, cache_reuse=256)))


def quiet(server: Running, timeout: float = 60.0) -> str:
    """/metrics once the server does no idle work."""
    t0 = time.monotonic()
    with server.client() as c:
        while True:
            text = str(c.get("/metrics").text)
            if metric(text, "lookahead_idle_work") == 0 or time.monotonic() - t0 > timeout:
                return text
            time.sleep(0.05)


def suggestion_then_follow_up(server: Running) -> tuple[dict[str, Any], dict[str, Any], str]:
    with server.client() as c:
        first = c.post("/infill", json=QUICK).json()
        time.sleep(0.2)  # the answer is out; the idle work (if any) has begun
        text = quiet(server)
        prefix, prompt = accepted(QUICK["input_prefix"], QUICK["prompt"], first["content"])
        body = {**QUICK, "input_prefix": prefix, "prompt": prompt, "t_max_predict_ms": 1000, "n_predict": 16}
        return first, c.post("/infill", json=body).json(), text


@pytest.fixture(scope="module")
def qwen_path() -> Path:
    return models.resolve_model(MODEL_ID, models.default_cache_dir())


# A machine where verifying a few tokens costs little more than one (as on a Xeon with
# AVX-512): whether the follow-up drafts from the idle tokens is then for the tokens to
# decide, not for this machine's cost curve (where a batch of 2 costs 2.5 one-token steps,
# the follow-up's three tokens are worth no draft, rightly)
FLAT = {1: 0.02, 2: 0.021, 4: 0.023, 8: 0.026, 16: 0.032, 32: 0.045, 64: 0.07}


def test_the_follow_up_finds_its_prompt_read_and_drafts_from_the_idle_tokens(
    qwen_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_curve(monkeypatch, FLAT)
    with frozen_costs(), serve(qwen_path, idle_tokens=24) as server:
        first, follow, text = suggestion_then_follow_up(server)
    assert first["stop_type"] == "limit" and first["content"].endswith("\n"), first
    assert metric(text, 'lookahead_idle_tokens_total{kind="written"}') >= 1
    assert follow["timings/prompt_n"] <= 2, follow  # the guess was the follow-up: all of it cached
    assert follow["timings/draft_n_accepted"] >= 1, follow


def test_without_idle_work_the_follow_up_reads_its_new_tokens(qwen_path: Path) -> None:
    with serve(qwen_path, idle_tokens=0) as server:
        first, follow, text = suggestion_then_follow_up(server)
    assert first["stop_type"] == "limit", first
    assert metric(text, 'lookahead_idle_tokens_total{kind="written"}') == 0
    assert follow["timings/prompt_n"] >= 10, follow  # the suggestion and the suffix, read again


# A prefix longer than the window the server keeps of it (3/4 of a 128-token batch). The
# follow-up's window stays where the cached prompt had it (`apps/fim_window.py`), a line
# above llama.cpp's cut, and so must the guess's: a guess cut where llama.cpp cuts reads a
# window that never comes (when the follow-up arrives at once, as llama.vim sends it, it
# finds the cache holding its old window, not the guess's)
LONG_PREFIX = "".join(f"def area_{i}(a, b):\n    return a * b + {i}\n\n" for i in range(40))


def test_the_guess_keeps_the_prefix_window_where_the_cache_has_it(qwen_path: Path) -> None:
    from types import SimpleNamespace

    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig
    from lookahead.core.draft_state import DraftConfig
    from lookahead.server.idle import plan
    from lookahead.server.llamacpp.prepare import infill_tokens
    from lookahead.server.llamacpp.schemas import InfillRequest

    model = load(qwen_path, backend=BackendConfig(n_ctx=2048, n_threads=1))
    n_ctx, batch = 2048, 128
    quick = InfillRequest(**{**QUICK, "input_prefix": LONG_PREFIX})
    cached = [infill_tokens(model, quick, n_ctx, batch)[0]]  # what the quick request left
    content = "def area(shape, a, b=0):\n    return a * b\n"
    prefix, prompt = accepted(quick.input_prefix, quick.prompt, content)
    follow = quick.model_copy(update={"input_prefix": prefix, "prompt": prompt})
    expected = infill_tokens(model, follow, n_ctx, batch, cached)[0]  # as the follow-up is shaped
    assert expected != infill_tokens(model, follow, n_ctx, batch)[0]  # the window stayed put

    worker = SimpleNamespace(n_ctx=n_ctx, cached_prompts=lambda owner, slot=-1: cached)
    config = ServeConfig(model_id=MODEL_ID, idle_tokens=8, fim_batch=batch)
    service = SimpleNamespace(model=model, worker=worker, config=config)
    job = plan(service, quick, content, DraftConfig(), owner="", after=0)
    assert job is not None and job.tokens == expected
