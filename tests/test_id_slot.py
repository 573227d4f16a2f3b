"""llama.cpp's `id_slot` with `--parallel`, over real HTTP on the small model (SmolLM2): a
request that names a free slot takes it, so an editor that always names one (llama.vim
sends 0) finds its own cached cells there; one that names no slot, or a busy or unknown
one, takes the slot that shares the most of its prompt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookahead.server import ServeConfig
from lookahead.server.background import Running, serving
from tests.test_server_choices import MODEL_ID, loader

pytestmark = pytest.mark.model

PROMPT = "def fibonacci(n):\n    " + "# the nth number of the sequence, counted from zero\n    " * 4


@pytest.fixture(scope="module")
def server(smol_path: Path) -> Iterator[Running]:
    with serving(ServeConfig(model_id=MODEL_ID, parallel=2), loader(smol_path)) as running:
        yield running


def cached(server: Running, **extra: Any) -> int:
    body = {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "cache_prompt": True, **extra}
    with server.client() as c:
        r = c.post("/completion", json=body)
    assert r.status_code == 200, r.text
    return int(r.json()["timings"]["cache_n"])


def test_a_named_slot_is_taken_and_keeps_its_own_cells(server: Running) -> None:
    cached(server, id_slot=0)
    assert cached(server, id_slot=1) == 0  # slot 1 was empty, though slot 0 holds the prompt
    assert cached(server, id_slot=0) > 0
    assert cached(server, id_slot=1) > 0
    assert cached(server) > 0  # no slot named: the one that shares the most
    assert cached(server, id_slot=7) > 0  # no such slot: as if none was named
