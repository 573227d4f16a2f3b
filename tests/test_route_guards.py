"""Every guard on every route that generates: OpenAI's `/v1/chat/completions` and
`/v1/completions`, llama.cpp's `/completion` and `/infill`. Each test is parametrized by
route, so a guard that one route lacks fails here by name: the limits table
(`request_limits.py`), the `exact` refusal with parallel slots, a 429 that cancels what the
request already queued, a client that leaves, and the prompt cache kept per API key.

On the default (FIM-capable) model, at one thread and a small context, over real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead.models import catalog as models
from lookahead.server import ServeConfig
from lookahead.server import request_limits as limits
from lookahead.server.background import Running, serving

pytestmark = pytest.mark.model

MODEL_ID = "qwen2.5-coder-0.5b"
KEY_A, KEY_B = "tenant-a-key", "tenant-b-key"
ROUTES = ("/v1/chat/completions", "/v1/completions", "/completion", "/infill")
NATIVE = ("/completion", "/infill")


def body_for(route: str, text: str = "def add(a, b):", most: int = 8, **extra: Any) -> dict[str, Any]:
    """A small request of the route's own dialect."""
    if route == "/v1/chat/completions":
        base: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "max_tokens": most}
    elif route == "/v1/completions":
        base = {"prompt": text, "max_tokens": most}
    elif route == "/completion":
        base = {"prompt": text, "n_predict": most}
    else:
        base = {"input_prefix": text + "\n    ", "input_suffix": "\n\nprint(add(1, 2))\n", "n_predict": most}
    return {**base, "temperature": 0, **extra}


def loader(path: Path, n_ctx: int = 1024) -> Callable[[], Any]:
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    return lambda: load(path, backend=BackendConfig(n_ctx=n_ctx, n_threads=1))


@pytest.fixture(scope="module")
def qwen_path() -> Path:
    return models.resolve_model(MODEL_ID, models.default_cache_dir())


@pytest.fixture(scope="module")
def server(qwen_path: Path) -> Iterator[Running]:
    # no work begun while idle after an answer (tests/test_infill_idle.py covers it): these
    # tests count what each request decodes and finds cached
    config = ServeConfig(model_id=MODEL_ID, api_keys=(KEY_A, KEY_B), max_queue=1, shared_index=False, idle_tokens=0)
    with serving(config, loader(qwen_path)) as running:
        yield running


def post(server: Running, route: str, body: Any, key: str = KEY_A, timeout: float = 120) -> httpx.Response:
    with server.client(key, timeout=timeout) as c:
        return c.post(route, json=body)


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    return err


# ---- the limits table ------------------------------------------------------------------------

WORDS = [f"w{i}" for i in range(12000)]


def over_limit_cases(route: str) -> dict[str, dict[str, Any]]:
    """Per field, a body over that field's limit on `route` (OpenAI's own lower limits apply
    on its routes: 4 stops, 20 top_logprobs)."""
    native = route in NATIVE
    cases: dict[str, dict[str, Any]] = {
        "logit_bias": {"logit_bias": {str(i): -1 for i in range(limits.LOGIT_BIAS.most + 1)}},
        "grammar": {"grammar": "root ::= " + " ".join(['"a"'] * (limits.GRAMMAR.most // 4 + 1))},
        "json_schema": {"json_schema": {"type": "object", "properties": {w: {"type": "string"} for w in WORDS}}},
        "stop": {"stop": WORDS[: (limits.STOP.most if native else 4) + 1]},
    }
    if native:
        cases["n_probs"] = {"n_probs": limits.N_PROBS.most + 1}
        cases["n_cmpl"] = {"n_cmpl": limits.COMPLETIONS.most + 1}
    else:
        cases["n"] = {"n": limits.COMPLETIONS.most + 1}
    if route == "/v1/chat/completions":
        cases["top_logprobs"] = {"logprobs": True, "top_logprobs": 21}
    if route == "/completion":
        cases["prompt"] = {"prompt": ["hi"] * (limits.PROMPTS.most + 1)}
    if route == "/infill":
        cases["input_extra"] = {"input_extra": [{"text": "x"}] * (limits.INPUT_EXTRA.most + 1)}
        cases["input_suffix"] = {"input_suffix": "x" * (limits.FIM_TEXT.most + 1)}
    if route == "/v1/completions":
        cases["suffix"] = {"suffix": "x" * (limits.FIM_TEXT.most + 1)}
    return cases


CASES = [(route, field) for route in ROUTES for field in over_limit_cases(route)]


@pytest.mark.parametrize(("route", "field"), CASES, ids=[f"{r}-{f}" for r, f in CASES])
def test_every_value_over_its_limit_is_a_400_naming_it(server: Running, route: str, field: str) -> None:
    body = body_for(route, **over_limit_cases(route)[field])
    err = error_of(post(server, route, body), 400)
    assert field.split("_")[0] in (err["param"] or "") + err["message"], err
    assert "at most" in err["message"] or "less than or equal" in err["message"], err


def test_the_published_table_is_the_one_applied() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "api.md").read_text()
    assert limits.markdown_table() in doc


def test_candidates_that_cannot_be_drawn_are_left_out_of_n_probs() -> None:
    # a -inf logit among the candidates made the answer invalid JSON (a 500) after generating
    import numpy as np

    from lookahead.core.sampling import top_logprobs

    logp, ids = top_logprobs(np.array([1.0, -np.inf, 0.5, 2.0], dtype=np.float32), 4)
    assert ids.tolist() == [3, 0, 2] and np.isfinite(logp[ids]).all()


def test_n_probs_at_its_limit_with_a_banned_token_answers(server: Running) -> None:
    body = body_for("/completion", most=3, n_probs=limits.N_PROBS.most, logit_bias=[[15, False]])
    r = post(server, "/completion", body)
    assert r.status_code == 200, r.text
    assert all(len(c["top_logprobs"]) == limits.N_PROBS.most for c in r.json()["completion_probabilities"])


# ---- exact with parallel slots ---------------------------------------------------------------


@pytest.fixture(scope="module")
def parallel_server(qwen_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID, parallel=2, shared_index=False), loader(qwen_path, 2048)) as s:
        yield s


@pytest.mark.parametrize("route", ROUTES)
def test_exact_is_refused_with_parallel_slots_on_every_route(parallel_server: Running, route: str) -> None:
    body = body_for(route, most=2)
    with parallel_server.client() as c:
        err = error_of(c.post(route, json={**body, "lookahead": {"exact": True}}), 400)
        assert err["param"] == "lookahead.exact" and "--parallel 1" in err["message"]
        assert c.post(route, json=body).status_code == 200


# ---- a 429 cancels what the request queued; a client that leaves cancels its job ----------------


def busy_with_a_long_request(server: Running) -> threading.Thread:
    """Start a long greedy request on the one slot; return its thread once it runs."""
    long_body = endless("/completion", 400)
    worker = threading.Thread(target=lambda: post(server, "/completion", long_body))
    worker.start()
    deadline = time.monotonic() + 60
    while not server.service.worker.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.service.worker.running
    return worker


def endless(route: str, most: int) -> dict[str, Any]:
    """A greedy request that runs to `most` tokens: counting, the end tokens banned."""
    ban = {"151643": -100, "151645": -100}  # Qwen's <|endoftext|>, <|im_end|>
    text = "count to 1000: 1 2 3 4 5 6 7 8"
    return body_for(route, text=text, most=most, logit_bias=ban, lookahead={"enabled": False})


def choices(route: str, k: int) -> dict[str, Any]:
    return {"n_cmpl": k} if route in NATIVE else {"n": k}


@pytest.mark.parametrize("route", ROUTES)
def test_a_429_cancels_every_job_the_request_queued(
    server: Running, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = server.service.worker
    long_one = busy_with_a_long_request(server)
    queued: list[Any] = []
    real_submit = worker.submit

    def recorded(job: Any) -> None:
        real_submit(job)
        queued.append(job)

    monkeypatch.setattr(worker, "submit", recorded)
    try:
        # one place waits (max_queue 1): the first choice queues, the second is refused
        err = error_of(post(server, route, body_for(route, **choices(route, 3))), 429)
        assert err["type"] == "rate_limit_error"
        assert len(queued) == 1 and queued[0].cancelled.is_set()
    finally:
        monkeypatch.undo()
        for job in worker._running_jobs():
            job.cancel()
        long_one.join(60)


@pytest.mark.parametrize("route", ROUTES)
def test_a_client_that_leaves_cancels_its_generation(server: Running, route: str) -> None:
    worker = server.service.worker
    body = endless(route, 600)
    with pytest.raises(httpx.TimeoutException):
        post(server, route, body, timeout=1.5)
    deadline = time.monotonic() + 8
    while worker.busy and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not worker.busy  # 600 tokens at one thread would take far longer


# ---- the prompt cache respects tenants -----------------------------------------------------------


def cached(route: str, r: httpx.Response) -> int:
    assert r.status_code == 200, r.text
    data = r.json()
    if route in NATIVE:
        return int(data["tokens_cached"])
    return int(data["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))


@pytest.mark.parametrize("route", ROUTES)
def test_a_request_reuses_only_its_own_keys_cached_prompt(server: Running, route: str) -> None:
    text = f"{route}: " + "a long shared preamble about adding numbers, " * 8 + "def add(a, b):"
    body = body_for(route, text=text, most=2)
    post(server, route, body, KEY_A)
    assert cached(route, post(server, route, body, KEY_B)) == 0  # A's cells are not B's
    post(server, route, body, KEY_B)
    assert cached(route, post(server, route, body, KEY_B)) > 0  # B's own are


def test_parallel_slots_reuse_only_their_own_keys_cells(qwen_path: Path) -> None:
    config = ServeConfig(model_id=MODEL_ID, api_keys=(KEY_A, KEY_B), parallel=2, shared_index=False)
    with serving(config, loader(qwen_path, 2048)) as s:
        body = body_for("/completion", text="a shared preamble, " * 20, most=2)
        assert cached("/completion", post(s, "/completion", body, KEY_A)) == 0
        assert cached("/completion", post(s, "/completion", body, KEY_B)) == 0
        assert cached("/completion", post(s, "/completion", body, KEY_A)) > 0


# ---- text that is not valid Unicode ----------------------------------------------------------


@pytest.mark.parametrize("route", [*ROUTES, "/tokenize"])
def test_a_lone_surrogate_is_a_400_not_a_500(server: Running, route: str) -> None:
    body = {"content": "a\ud800b"} if route == "/tokenize" else body_for(route, text="a\ud800b")
    with server.client(KEY_A) as c:  # json.dumps writes the lone surrogate as "\ud800"
        r = c.post(route, content=json.dumps(body), headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, r.text


def test_tokenizing_a_long_text_leaves_the_event_loop_free(server: Running) -> None:
    # /tokenize with pieces once ran on the event loop: /health waited for the whole text
    body = {"content": "word " * 1_200_000, "with_pieces": True}
    took: list[float] = []

    def tokenize() -> None:
        t0 = time.monotonic()
        r = post(server, "/tokenize", body)
        took.append(time.monotonic() - t0)
        assert r.status_code == 200

    worker = threading.Thread(target=tokenize)
    worker.start()
    health: list[float] = []
    with server.client() as c:
        while worker.is_alive():
            t0 = time.monotonic()
            c.get("/health")
            health.append(time.monotonic() - t0)
            time.sleep(0.05)
    worker.join()
    assert took[0] > 1.0, "the text was tokenized too fast to tell"
    assert len(health) > 5 and max(health) < 0.5 * took[0], (max(health), took)
