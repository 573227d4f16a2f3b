"""The service with `parallel` > 1 on the small model: requests share batched decodes,
a lone request writes what the library writes, and streams cut off at random keep the KV
cache bounded and leave it empty."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.server import ServeConfig
from lookahead.server.background import serving
from tests.served import loader, metric
from tests.sse import payloads

pytestmark = pytest.mark.model

MODEL_ID = "smollm2-135m"
N_CTX = 2048


def test_a_lone_request_equals_the_library_and_concurrent_ones_share_steps(
    smol_path: Path, smol_model: Any
) -> None:
    config = ServeConfig(model_id=MODEL_ID, parallel=4, shared_index=False)
    prompt = "def fibonacci(n):"
    ref = smol_model.generate(prompt, max_tokens=32, draft=DraftConfig())
    with serving(config, loader(smol_path, N_CTX)) as server:
        assert server.service.worker.n_ctx == N_CTX // 4
        with server.client() as c:
            r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 32, "temperature": 0,
                                                "cache_prompt": False})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == ref.text  # one slot in use: bit-exact

        answers: list[int] = []

        def one(i: int) -> None:
            with server.client() as c:
                # without the prompt cache, so every cell is free at the end
                body = {"prompt": f"Item {i}: the list of", "max_tokens": 24, "temperature": 0, "cache_prompt": False}
                answers.append(c.post("/v1/completions", json=body).status_code)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with server.client() as c:
            text = c.get("/metrics").text
    assert answers == [200] * 4
    assert metric(text, "lookahead_parallel_slots") == 4
    # some step held more than one request
    assert metric(text, "lookahead_batch_requests_count") > metric(text, 'lookahead_batch_requests_bucket{le="1.0"}')
    assert metric(text, "lookahead_kv_cells") == 0


def test_streams_cut_off_at_random_keep_the_kv_cache_bounded(smol_path: Path) -> None:
    config = ServeConfig(model_id=MODEL_ID, parallel=3, max_queue=32)
    prompts = ["def add(a, b):", "The history of Rome", "1, 2, 3, 4,", "SELECT name FROM", "Dear team,"]
    problems: list[str] = []
    cells: list[float] = []
    lock = threading.Lock()
    done = threading.Event()

    with serving(config, loader(smol_path, N_CTX)) as server:
        slots = server.service.worker.slots

        def client_loop(i: int) -> None:
            rng = random.Random(i)
            with httpx.Client(base_url=server.url, timeout=120) as c:
                for j in range(6):
                    body = {"prompt": prompts[(i + j) % len(prompts)], "max_tokens": 40,
                            "temperature": 0.7, "seed": i * 10 + j, "stream": True, "cache_prompt": j % 2 == 0}
                    cut = rng.choice([None, 1, 2, 5])
                    with c.stream("POST", "/v1/completions", json=body) as r:
                        if r.status_code != 200:
                            r.read()
                            if r.status_code != 429:
                                with lock:
                                    problems.append(f"{r.status_code} {r.text[:200]}")
                            continue
                        seen = 0
                        lines: list[str] = []
                        for line in r.iter_lines():
                            lines.append(line)
                            seen += line.startswith("data:")
                            if cut is not None and seen >= cut:
                                break  # the client goes away mid-stream
                        try:  # every payload it read is parsed; an error one is a failure
                            ended = any(line.strip() == "data: [DONE]" for line in lines)
                            payloads(lines if ended or cut is None else [*lines, "data: [DONE]"])
                        except (AssertionError, ValueError) as exc:
                            with lock:
                                problems.append(f"stream: {exc}")

        def watch() -> None:
            while not done.is_set():
                with lock:
                    cells.append(slots.n_used)
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + 30
        while server.service.worker.busy and time.monotonic() < deadline:
            time.sleep(0.02)
        done.set()
        watcher.join()
        assert not server.service.worker.busy
        # what is left is the prompt cache: each slot's committed cells are the tokens it
        # remembers, and a slot that remembers nothing holds no cell in llama.cpp either
        for k in range(slots.slots):
            assert slots.slot_past(k) == len(slots.cache_tokens(k))
            assert slots.held(k) == (slots.slot_used(k) > 0)
        with server.client() as c:
            text = c.get("/metrics").text
    assert not problems, problems[:3]
    assert max(cells) <= N_CTX
    assert metric(text, "lookahead_cancelled_total") >= 1
    assert metric(text, "lookahead_kv_cells") == slots.n_used
