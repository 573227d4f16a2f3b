"""Speculative output equals plain decoding on a batch-invariant model (SmolLM2-135M Q4_1).

Greedy and seeded sampling, chains and trees, fixed K and adaptive, over prompts of code,
prose and repetitive text, 128 tokens each.
"""

from __future__ import annotations

import pytest

from lookahead.core.draft_state import DraftConfig
from lookahead.core.sampling import SamplingConfig

pytestmark = pytest.mark.model

PROMPTS = [
    "def quicksort(arr):\n",
    "class Stack:\n    def __init__(self):\n",
    "import json\n\ndef load_config(path):\n",
    "SELECT name, email FROM users WHERE",
    "The history of the Roman Empire",
    "Once upon a time, in a small village by the sea,",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "Monday: gym. Tuesday: work. Wednesday: gym. Thursday: work. Friday:",
    "<ul>\n  <li>apple</li>\n  <li>banana</li>\n",
    "Q: What is the capital of France?\nA: Paris.\nQ: What is the capital of Spain?\nA:",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n",
    "# Python list comprehension examples\nsquares = [x * x for x in range(10)]\n",
    "Dear team,\n\nThis week we",
    "Ingredients:\n- 2 cups flour\n- 1 cup sugar\n",
    # a templated report with data rows: the record index drafts here
    "Servers (name, cpu, disk):\nweb-01, 42, 55\nweb-02, 87, 58\ndb-01, 35, 77\n\n"
    "### web-01\n- CPU: 42%\n- Disk: 55%\n\n### web-02\n- CPU:",
]

CONFIGS = [
    DraftConfig(adaptive=False, k=2, branches=1),
    DraftConfig(adaptive=False, k=8, branches=1),
    DraftConfig(adaptive=False, k=4, budget=12, branches=3),
    DraftConfig(adaptive=False, k=16, budget=32, branches=2),
    DraftConfig(),  # adaptive, the default
]

MAX_TOKENS = 128


@pytest.fixture(scope="module")
def plain_greedy(smol_model):
    return {p: smol_model.generate(p, max_tokens=MAX_TOKENS, draft=DraftConfig(enabled=False)) for p in PROMPTS}


@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: f"k{c.k}-b{c.budget}-br{c.branches}-{'ad' if c.adaptive else 'fx'}"
)
def test_greedy_equals_plain(smol_model, plain_greedy, config: DraftConfig) -> None:
    drafted = accepted = 0
    for prompt in PROMPTS:
        base = plain_greedy[prompt]
        spec = smol_model.generate(prompt, max_tokens=MAX_TOKENS, draft=config)
        assert spec.tokens == base.tokens, f"diverged on {prompt!r}"
        assert spec.text == base.text
        drafted += spec.stats.drafted
        accepted += spec.stats.accepted
    # not vacuous: drafts were verified and some accepted
    assert drafted > 0 and accepted > 0


def test_prompts_generate_long_outputs(plain_greedy) -> None:
    long = [r for r in plain_greedy.values() if r.stats.n_tokens >= MAX_TOKENS]
    assert len(long) >= 10


# adaptive with a low bar: SmolLM2's batches cost 2.7 one-token steps, so at the default bar
# sampled text rarely drafts and the test would prove little
EAGER = DraftConfig(min_gain=0.5)


@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[2], EAGER], ids=["chain", "tree", "adaptive"])
def test_seeded_sampling_equals_plain(smol_model, config: DraftConfig) -> None:
    accepted = 0
    for i, prompt in enumerate(PROMPTS):
        sampling = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.02, seed=1234 + i)
        base = smol_model.generate(prompt, max_tokens=96, sampling=sampling, draft=DraftConfig(enabled=False))
        spec = smol_model.generate(prompt, max_tokens=96, sampling=sampling, draft=config)
        assert spec.tokens == base.tokens, f"diverged on {prompt!r}"
        accepted += spec.stats.accepted
    assert accepted > 0


def test_repeat_penalty_equal_with_drafts(smol_model) -> None:
    sampling = SamplingConfig(repeat_penalty=1.3)
    for prompt in PROMPTS[:4]:
        base = smol_model.generate(prompt, max_tokens=64, sampling=sampling, draft=DraftConfig(enabled=False))
        spec = smol_model.generate(prompt, max_tokens=64, sampling=sampling, draft=CONFIGS[2])
        assert spec.tokens == base.tokens


def test_stop_strings_and_max_tokens(smol_model) -> None:
    base = smol_model.generate(PROMPTS[6], max_tokens=40, draft=DraftConfig(enabled=False))
    stop = base.text[10:14]
    for config in (DraftConfig(enabled=False), CONFIGS[1]):
        r = smol_model.generate(PROMPTS[6], max_tokens=40, stop=[stop], draft=config)
        assert r.text == base.text[: base.text.index(stop)]
        assert r.finish_reason == "stop"
        r = smol_model.generate(PROMPTS[6], max_tokens=7, draft=config)
        assert r.stats.n_tokens == 7 and r.finish_reason == "length"
