"""The batched service with one KV stream per request (`serve --parallel 4 --kv-per-request`):
four concurrent greedy requests, drafts on, each answer equal to the same prompt decoded
alone without drafts, on the batch-invariant small model (SmolLM2 Q4_1). With one shared KV
cache a request's cells interleave with its neighbours' and an answer may part at a near
tie; with a stream each, its cells keep their solo order whatever the others accept.

The prompts are copyable (a function to repeat, a list to continue), so drafts are verified
and accepted in steps shared by the four: the test checks that they were. With one shared
cache (`kv_unified=True`) the same test fails on this build: an answer parts from its solo one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.server import ServeConfig
from lookahead.server.background import serving
from tests.served import loader, metric

pytestmark = pytest.mark.model

N_CTX = 2048
MAX_TOKENS = 40
PROMPTS = [
    "def add(a, b):\n    return a + b\n\n\ndef add(a, b):\n",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday,",
    "import numpy as np\n\ndef mean(values):\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
]


def test_four_concurrent_drafted_requests_each_equal_their_solo_plain_output(
    smol_path: Path, smol_model: Any
) -> None:
    plain = DraftConfig(enabled=False)
    alone = {p: smol_model.generate(p, max_tokens=MAX_TOKENS, draft=plain).text for p in PROMPTS}
    # --batch-total and a fixed K: the most drafts, so neighbours' rejected cells come and go
    # the most, and drafts are verified whatever this machine's cost curve would advise
    batch_total = DraftConfig(fairness_slack=None, adaptive=False, k=4)
    config = ServeConfig(
        model_id="smollm2-135m", parallel=4, kv_unified=False, shared_index=False, draft=batch_total
    )
    with serving(config, loader(smol_path, N_CTX)) as server:
        assert server.service.worker.slots.separate
        answers: dict[str, str] = {}
        accepted: list[int] = []
        start = threading.Barrier(len(PROMPTS))

        def one(prompt: str) -> None:
            with server.client() as c:
                start.wait()
                body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
                r = c.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text
                answers[prompt] = r.json()["choices"][0]["text"]
                accepted.append(int(r.json().get("lookahead", {}).get("accepted", 0)))

        threads = [threading.Thread(target=one, args=(p,)) for p in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with server.client() as c:
            text = c.get("/metrics").text
    assert answers == alone
    assert sum(accepted) > 0  # drafts were verified and accepted, not plain decoding
    # some step held more than one request
    assert metric(text, "lookahead_batch_requests_count") > metric(text, 'lookahead_batch_requests_bucket{le="1.0"}')
    # every cell left is the prompt cache's (per-request streams park no rejected cells)
    assert metric(text, "lookahead_kv_cells") == metric(text, "lookahead_kv_cells_cached") > 0
