"""The offline replay of bench/replay.py: a verifier that writes a known output, a modeled clock."""

from __future__ import annotations

import pytest

from bench.replay import TruthVerifier, _config, drafting_for, oracle_choice
from lookahead.core.control import ControlConfig, Controller, CostModel
from lookahead.core.draft_state import DraftConfig
from lookahead.core.engine import Done, GenerationConfig, generate
from lookahead.core.propose import Proposer
from lookahead.index.suffix import SuffixIndex

TRUTH = [5, 6, 7, 8, 9] * 12 + [3, 4]
PROMPT = [1, 2] + [5, 6, 7, 8, 9] * 3


def cost(n: int, cells: int = 0) -> float:
    return 0.01 * (1 + 0.4 * (n - 1))


def run(oracle: bool = False) -> tuple[list[int], float, float, int]:
    v = TruthVerifier(TRUTH, n_vocab=16, cost=cost, token_bytes=lambda t: bytes([97 + t]))
    ctl = Controller(ControlConfig(), CostModel({n: cost(n) for n in (1, 2, 4, 8, 16, 32, 64)}))
    if oracle:
        ctl.choose = oracle_choice(ctl, v, cost)  # type: ignore[method-assign]
    events = list(
        generate(v, PROMPT, GenerationConfig(max_tokens=len(TRUTH)), Proposer([SuffixIndex()]), ctl,
                 clock=lambda: v.now)
    )
    last = events[-1]
    assert isinstance(last, Done)
    return last.result.tokens, last.result.stats.decode_s, v.now, last.result.stats.steps


def test_replay_writes_the_known_output_on_a_modeled_clock() -> None:
    tokens, decode_s, now, steps = run()
    assert tokens == TRUTH  # drafts are accepted exactly where they are the output
    assert decode_s == pytest.approx(now)  # the engine timed the steps with the given clock
    assert steps < len(TRUTH) and now < len(TRUTH) * cost(1)  # copying paid


def test_the_clock_prices_the_cells_in_use() -> None:
    """Each verify is charged at the cells the cache holds then (prompt, output so far and
    the batch itself), so a model's context slope reaches the modeled time."""
    seen: list[tuple[int, int]] = []

    def spy(n: int, cells: int = 0) -> float:
        seen.append((n, cells))
        return cost(n)

    v = TruthVerifier(TRUTH, n_vocab=16, cost=spy, token_bytes=lambda t: bytes([97 + t]))
    events = list(generate(v, PROMPT, GenerationConfig(max_tokens=8), None, None, clock=lambda: v.now))
    assert isinstance(events[-1], Done)
    assert seen == [(1, len(PROMPT) + i) for i in range(8)]


def test_oracle_is_at_least_as_fast() -> None:
    tokens, _, oracle_time, _ = run(oracle=True)
    assert tokens == TRUTH
    assert oracle_time <= run()[2] + 1e-12


@pytest.mark.parametrize(
    ("pair", "says"),
    [("bogus=1", "DraftConfig field"), ("min_gain", "FIELD=VALUE"), ("min_gain=abc", "not a Python literal"),
     ("min_gain=-1", "min_gain"), ("k_max=0", "k_max")],
)  # fmt: skip
def test_a_bad_config_pair_ends_the_command_saying_which(pair: str, says: str) -> None:
    with pytest.raises(SystemExit) as exc:
        _config([pair])
    assert says in str(exc.value.code)


def test_config_pairs_set_their_fields() -> None:
    config = _config(["min_gain=1.3", "branches=1"])
    assert (config.min_gain, config.branches) == (1.3, 1)


@pytest.mark.model
def test_the_servers_controller_prices_each_replayed_requests_own_cells(smol_model) -> None:  # type: ignore[no-untyped-def]
    """A replay keeps one controller across requests, as a server does: its cost model reads
    the cells of the request being replayed, not of the first one it was built for."""
    state = smol_model.drafting
    state.controllers.clear()
    cost = lambda n, cells=0: 0.01 * n  # noqa: E731
    first = TruthVerifier([1, 2], smol_model.backend.n_vocab, cost, smol_model.backend.token_bytes)
    first.prefill([5] * 700)
    _, policy = drafting_for(smol_model, DraftConfig(), first)
    later = TruthVerifier([1, 2], smol_model.backend.n_vocab, cost, smol_model.backend.token_bytes)
    later.prefill([5] * 30)
    _, again = drafting_for(smol_model, DraftConfig(), later)
    assert again is policy  # the same controller, learning across requests
    assert isinstance(again, Controller) and again.cost.cells is not None and again.cost.cells() == 30
    assert drafting_for(smol_model, DraftConfig(enabled=False), later) == (None, None)  # plain decoding
