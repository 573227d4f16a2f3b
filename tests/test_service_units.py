"""The service's parts that need no model: key files, the shared index's secret and file
modes, the bounded controller cache, tiny temperatures, one failing drafter in a batch,
and `serve --help`'s example."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lookahead.cli.main import app
from lookahead.cli.serve_cmd import read_keys
from lookahead.core.control import ControlConfig, Controller
from lookahead.core.draft import Draft
from lookahead.core.draft_state import MAX_CONTROLLERS, DraftConfig, DraftState
from lookahead.core.engine import Done, GenerationConfig
from lookahead.core.multi import Batch
from lookahead.core.sampling import Sampler, SamplingConfig
from lookahead.server.memory import SharedIndex, partition_of
from tests.fake_backend import FakeMultiModel, TreeDrafter

VOCAB = 4


def test_a_key_file_saved_with_a_bom_keeps_its_first_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_bytes("\ufeffkey-one\nkey-two\n".encode())
    assert read_keys(None, keys) == ("key-one", "key-two")


def test_the_index_file_and_its_secret_are_private_and_names_are_keyed(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    old = os.umask(0o022)
    try:
        mem = SharedIndex("tok", path=path)
        name = mem.partition("key-a")
        mem.add(name, [list(range(10, 60))])
        mem.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.with_name(path.name + ".secret")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert name != partition_of("key-a")  # not the key's plain hash: the secret is in it
    assert name not in {partition_of("key-a", b""), partition_of(None)}
    again = SharedIndex("tok", path=path)
    try:
        assert again.partition("key-a") == name  # the same secret after a restart
        assert again.partition("key-b") != name
        assert again.stats()["documents"] == 1
    finally:
        again.close()
    other = SharedIndex("tok")  # no file: a secret of its own
    try:
        assert other.partition("key-a") != name
    finally:
        other.close()


def test_the_controller_cache_is_bounded(tmp_path: Path) -> None:
    state = DraftState(
        tokenize=lambda s: [1], tokenizer_id="t", token_bytes=lambda t: b"x", corpus_cache=tmp_path
    )
    first = state.policy(DraftConfig(k_max=1, budget=1))
    for k in range(2, 60):  # a client sending every (k_max, budget) pair it likes
        state.policy(DraftConfig(k_max=k, budget=k))
    assert len(state.controllers) <= MAX_CONTROLLERS
    assert isinstance(first, Controller)
    recent = DraftConfig(k_max=59, budget=59)
    assert state.policy(recent) is state.policy(recent)  # still cached while in use


@pytest.mark.parametrize("temperature", [1e-310, 1e-30, 1e-9])
def test_a_tiny_temperature_is_greedy(temperature: float) -> None:
    config = SamplingConfig(temperature=temperature, top_k=0, seed=1)
    assert config.greedy
    logits = np.array([0.5, 3.0, -1.0, 2.9], dtype=np.float32)
    sampler = Sampler(config)
    assert [sampler.pick(logits, []) for _ in range(20)] == [1] * 20


class _Broken(TreeDrafter):
    def propose(self, budget: int, max_depth: int, branches: int) -> Draft:
        if len(self.stream) > 6:
            raise RuntimeError("a drafting bug")
        return super().propose(budget, max_depth, branches)


def test_one_request_whose_drafting_raises_fails_alone_in_an_isolating_batch() -> None:
    model = FakeMultiModel(slots=3, n_vocab=VOCAB, seed=1)
    batch = Batch(model, budget=8)
    batch.isolate = True
    config = GenerationConfig(max_tokens=30, sampling=SamplingConfig())
    broken = batch.add([1, 2, 3], config, _Broken(VOCAB), Controller(ControlConfig(budget=8, branches=2)))
    good = [batch.add([i, 2, 1], config, TreeDrafter(VOCAB), Controller(ControlConfig(budget=8, branches=2)))
            for i in range(2)]
    done: dict[int, int] = {}
    failed = []
    while not batch.idle:
        for req, event in batch.step():
            if isinstance(event, Done):
                done[req.id] = len(event.result.tokens)
        failed.extend(batch.failed)
        batch.failed.clear()
    assert [(r.id, str(e)) for r, e in failed] == [(broken.id, "a drafting bug")]
    assert sorted(done) == sorted(r.id for r in good) and all(n == 30 for n in done.values())
    assert model.n_used == 0


def test_without_isolation_a_drafting_error_still_propagates() -> None:
    model = FakeMultiModel(slots=2, n_vocab=VOCAB, seed=1)
    batch = Batch(model, budget=8)
    config = GenerationConfig(max_tokens=30, sampling=SamplingConfig())
    batch.add([1, 2, 3], config, _Broken(VOCAB), Controller(ControlConfig(budget=8, branches=2)))
    with pytest.raises(RuntimeError):
        while not batch.idle:
            batch.step()


def test_serve_help_shows_a_curl_example_that_sends_json() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "-H 'Content-Type: application/json'" in result.output
    assert "--index-scope" in result.output and "--metrics-key" in result.output


def test_a_draft_config_that_drafts_to_the_line_end_reads_newlines_from_the_vocabulary(tmp_path: Path) -> None:
    text = {1: b"x = ", 2: b"1\n", 3: b"y"}
    state = DraftState(
        tokenize=lambda s: [1], tokenizer_id="t", token_bytes=lambda t: text.get(t, b"z"), corpus_cache=tmp_path
    )
    drafter = state.drafter(DraftConfig(to_line_end=True, shipped_corpora=False))
    assert drafter.ends_line is not None and [drafter.ends_line(t) for t in (1, 2, 3)] == [False, True, False]
    assert state.drafter(DraftConfig(shipped_corpora=False)).ends_line is None


@pytest.mark.parametrize("budget", [250, 1000, -1, 0])
def test_a_native_request_with_a_time_budget_drafts_to_the_line_end(budget: int) -> None:
    from lookahead.server.llamacpp.drafting import request_drafting
    from lookahead.server.llamacpp.schemas import InfillRequest

    body = InfillRequest(input_prefix="a", input_suffix="b", t_max_predict_ms=budget)
    draft = request_drafting(DraftConfig(min_gain=1.3), body)
    assert draft.to_line_end == (budget > 0) and draft.min_gain == 1.3
