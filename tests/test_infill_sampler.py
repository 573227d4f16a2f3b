"""llama.cpp's `infill` sampler (`lookahead.core.infill`), rule by rule on hand-made rows, and
its place in the sampler: drafted and plain sampling draw the same tokens (no model)."""

from __future__ import annotations

import numpy as np

from lookahead.core.infill import infill_keep
from lookahead.core.sampling import Sampler, SamplingConfig

END, EOT = 0, 1


class Vocab:
    """Token 0 and 1 end a generation; the others are the texts given."""

    n_vocab = 64

    def __init__(self, texts: dict[int, bytes]) -> None:
        self.texts = texts

    def is_eog(self, token: int) -> bool:
        return token in (END, EOT)

    def token_bytes(self, token: int) -> bytes:
        return self.texts.get(token, b"")

    def eot(self) -> int:
        return EOT


def keep(probs: dict[int, float], texts: dict[int, bytes]) -> list[int]:
    ids = np.array(sorted(probs, key=lambda t: -probs[t]), dtype=np.int64)
    logits = np.log(np.array([probs[int(t)] for t in ids]))
    kept, kept_logits = infill_keep(ids, logits, Vocab(texts))
    assert np.all(np.diff(kept_logits) <= 0)  # still most likely first
    return kept.tolist()


def test_a_likely_end_keeps_only_the_end_tokens() -> None:
    # 3 * 0.1 * 4 = 1.2 > 0.9 of text: the answer ends
    assert keep({2: 0.5, 3: 0.3, 4: 0.1, END: 0.1}, {2: b"a", 3: b"b", 4: b"c"}) == [END]


def test_an_unlikely_end_leaves_the_text_candidates_above_the_thresholds() -> None:
    # 3 * 0.01 * 4 < 0.99; 0.6 and 0.3 pass 0.2 (end tokens always stay), then with two
    # texts left the cut is 1/3 of the renormalized 0.91: 0.3 / 0.91 = 0.33 falls under it
    kept = keep({2: 0.6, 3: 0.3, 4: 0.09, END: 0.01}, {2: b"x", 3: b"y", 4: b"z"})
    assert kept == [2, END]
    assert keep({2: 0.6, 3: 0.35, 4: 0.04, END: 0.01}, {2: b"x", 3: b"y", 4: b"z"}) == [2, 3, END]


def test_a_prefix_merges_into_the_more_likely_token() -> None:
    # " re" is a prefix of " return": its 0.15 goes to " return" (0.35 -> 0.5), and " x"
    # (0.3) stays; " re" is gone even though its own probability was near the cut
    texts = {2: b" return", 3: b" x", 4: b" re", 5: b" y"}
    assert keep({2: 0.35, 3: 0.3, 4: 0.15, 5: 0.2 - 1e-6, END: 1e-6}, texts) == [2, 3, END]


def test_no_text_left_ends_with_the_end_of_turn_token() -> None:
    probs = {i: 0.1 for i in range(2, 12)}  # ten texts at 0.1: none passes 0.2
    assert keep({**probs, END: 1e-9}, {i: bytes([96 + i]) for i in range(2, 12)}) == [EOT]


def test_drafted_and_plain_draws_agree_with_infill_in_the_chain() -> None:
    rng = np.random.default_rng(3)
    vocab = Vocab({i: f"t{i}".encode() for i in range(2, 64)})
    rows = [rng.normal(size=64).astype(np.float32) * 3 for _ in range(40)]
    config = SamplingConfig(temperature=1.0, top_k=40, top_p=0.9, seed=7, infill=vocab)
    a, b = Sampler(config), Sampler(config)
    picks_a = [a.pick(row, []) for row in rows]
    picks_b = [b.pick(row, []) for row in rows]
    assert picks_a == picks_b
    for row, pick in zip(rows, picks_a, strict=True):  # every pick is one the rule kept
        ids = np.argsort(-row.astype(np.float64), kind="stable")[:40]
        vals = row[ids].astype(np.float64)
        p = np.exp(vals - vals[0])
        p /= p.sum()
        cut = int(np.searchsorted(np.cumsum(p), 0.9)) + 1
        kept, _ = infill_keep(ids[:cut], vals[:cut], vocab)
        assert pick in kept.tolist()


def test_an_editor_request_listing_infill_samples_with_it() -> None:
    from types import SimpleNamespace

    from lookahead.server.llamacpp.prepare import sampling_of
    from lookahead.server.llamacpp.schemas import InfillRequest

    vocab = Vocab({})
    model = SimpleNamespace(vocab=vocab, backend=vocab)
    body = {"input_prefix": "a", "input_suffix": "b", "top_k": 40, "top_p": 0.9}
    listed = InfillRequest(**body, samplers=["top_k", "top_p", "infill"])
    assert sampling_of(model, listed, None).infill is vocab  # type: ignore[arg-type]
    assert sampling_of(model, InfillRequest(**body), None).infill is None  # not in the default chain
    greedy = InfillRequest(**body, samplers=["top_k", "top_p", "infill"], temperature=0)
    assert sampling_of(model, greedy, None).infill is None  # greedy picks the most likely token
