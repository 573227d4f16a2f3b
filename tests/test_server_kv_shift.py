"""`serve --cache-reuse N` on the small model: a prompt that dropped a line near its start is
answered with the moved cells counted in `tokens_cached` / `timings.cache_n`, and in
`/metrics`' `lookahead_prompt_tokens_shifted`, one request at a time and in the batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from lookahead.server import ServeConfig
from lookahead.server.background import serving
from tests.served import metric
from tests.test_kv_shift_model import LINES

pytestmark = pytest.mark.model


def loader(path: Path):  # type: ignore[no-untyped-def]
    from lookahead.api import load
    from lookahead.backend.llama import BackendConfig

    return lambda: load(path, backend=BackendConfig(n_ctx=2048, n_threads=1, cache_reuse=32))


@pytest.mark.parametrize("parallel", [1, 2])
def test_moved_cells_are_reported_as_cached_and_counted(smol_path: Path, parallel: int) -> None:
    first = "\n".join(LINES) + "\n"
    second = "\n".join(LINES[:1] + LINES[2:]) + "\n"
    config = ServeConfig(model_id="smollm2-135m", parallel=parallel, shared_index=False)
    with serving(config, loader(smol_path)) as server, server.client() as c:
        r = c.post("/completion", json={"prompt": first, "n_predict": 4, "cache_prompt": True})
        assert r.status_code == 200, r.text
        r = c.post("/completion", json={"prompt": second, "n_predict": 4, "cache_prompt": True})
        assert r.status_code == 200, r.text
        body = r.json()
        text = c.get("/metrics").text
    n_prompt = body["tokens_evaluated"]
    assert body["tokens_cached"] == body["timings"]["cache_n"] >= n_prompt - 4
    shifted = metric(text, "lookahead_prompt_tokens_shifted_total")
    assert 32 <= shifted <= body["tokens_cached"]
