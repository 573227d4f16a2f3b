"""bench/oracle.py on the fake model: drafts of the known output are right at every token."""

from __future__ import annotations

import math

import pytest

from bench.oracle import OracleDrafter, OraclePolicy
from lookahead.core.control import FixedPolicy
from lookahead.core.engine import Done, GenerationConfig, Step, generate
from tests.fake_backend import FakeModel

PROMPT = [1, 2, 3, 0, 2]
N = 40


def plain() -> list[int]:
    events = list(generate(FakeModel(n_vocab=6, seed=3), PROMPT, GenerationConfig(max_tokens=N)))
    done = events[-1]
    assert isinstance(done, Done)
    return done.result.tokens


def run(policy_of) -> tuple[list[Step], list[int]]:  # type: ignore[no-untyped-def]
    truth = plain()
    drafter = OracleDrafter(truth)
    events = list(generate(FakeModel(n_vocab=6, seed=3), PROMPT, GenerationConfig(max_tokens=N), drafter,
                           policy_of(drafter)))
    done = events[-1]
    assert isinstance(done, Done) and done.result.tokens == truth
    assert drafter.left_at is None
    return [e for e in events if isinstance(e, Step)], truth


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
def test_fixed_k_oracle_accepts_every_drafted_token(k: int) -> None:
    steps, _ = run(lambda d: FixedPolicy(k))
    assert all(s.accepted == s.drafted for s in steps)
    # K drafted + the bonus token per step, but never drafts past max_tokens
    assert [s.drafted for s in steps[:-1]] == [k] * (len(steps) - 1)
    assert len(steps) == math.ceil(N / (k + 1))


def cost(n: int) -> float:
    """n * t(1) / t(n) peaks at n = 5 (2.78x): the best step verifies 4 drafted tokens."""
    return 1.0 + 0.05 * (n - 1) ** 2


def test_oracle_policy_verifies_the_ceiling_batch() -> None:
    steps, truth = run(lambda d: OraclePolicy(d.next_token, cost))
    assert all(s.accepted == s.drafted for s in steps)
    assert [s.drafted for s in steps[:-1]] == [4] * (len(steps) - 1)
    ceiling = max(n * cost(1) / cost(n) for n in range(1, 65))
    modeled = sum(cost(s.drafted + 1) for s in steps)
    assert len(truth) * cost(1) / modeled == pytest.approx(ceiling, rel=0.05)


def test_oracle_drafter_stops_when_the_output_leaves_the_truth() -> None:
    truth = plain()
    wrong = truth[:5] + [(truth[5] + 1) % 6] + truth[6:]
    drafter = OracleDrafter(wrong)
    events = list(generate(FakeModel(n_vocab=6, seed=3), PROMPT, GenerationConfig(max_tokens=N), drafter,
                           FixedPolicy(4)))
    done = events[-1]
    assert isinstance(done, Done) and done.result.tokens == truth  # greedy output is the model's
    assert drafter.left_at == 5
    steps = [e for e in events if isinstance(e, Step)]
    assert sum(len(s.tokens) for s in steps) == N
    assert all(s.drafted == 0 for s in steps[3:])  # off track: plain decoding from then on


def test_oracle_policy_verifies_only_the_right_prefix_of_a_wrong_draft() -> None:
    truth = [7, 8, 9, 10]
    drafter = OracleDrafter(truth)
    drafter.observe([1])  # the prompt
    policy = OraclePolicy(drafter.next_token, lambda n: 1.0 + 0.01 * n)  # cheap batches: verify all right ones
    from lookahead.core.draft import Draft

    assert policy.choose(Draft.chain([7, 8, 5, 10])) == 2
    assert policy.choose(Draft.chain([6, 8])) == 0
