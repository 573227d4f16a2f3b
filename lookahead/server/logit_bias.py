"""`logit_bias` as llama.cpp's server and OpenAI take it, read into (token, bias) pairs:

    [[15043, -100], [" Hello", false]]     # llama.cpp: pairs; a string biases each of its tokens
    {"15043": -100, " Hello": 1.5}         # OpenAI's object form (llama.cpp also takes text keys)

A bias is added to the token's logit before sampling; `false` bans the token (-inf), as in
llama.cpp. What cannot be read is a 400 naming the field (llama.cpp skips such entries
silently; a bias the client believes applied and that is not would change its answer).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from lookahead.server.errors import APIError
from lookahead.server.request_limits import LOGIT_BIAS, check

Bias = tuple[tuple[int, float], ...]


def _bias_value(value: Any) -> float:
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value == math.inf:
        raise APIError(400, f"logit_bias: a bias must be a number or false, got {value!r}", param="logit_bias")
    return float(value)


def parse_logit_bias(value: Any, tokenize: Callable[[str], list[int]], n_vocab: int) -> Bias:
    """The (token, bias) pairs of a request's `logit_bias` (None or empty: none)."""
    if not value:
        return ()
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list) and all(isinstance(el, list) and len(el) == 2 for el in value):
        items = [(el[0], el[1]) for el in value]
    else:
        raise APIError(
            400, "logit_bias must be a list of [token, bias] pairs or an object of token: bias", param="logit_bias"
        )
    out: list[tuple[int, float]] = []
    for key, raw in items:
        bias = _bias_value(raw)
        if isinstance(key, str) and key.strip().lstrip("-").isdigit():
            key = int(key)
        if isinstance(key, int) and not isinstance(key, bool):
            if not 0 <= key < n_vocab:
                raise APIError(
                    400, f"logit_bias: token id {key} is not in the vocabulary (0 to {n_vocab - 1})", param="logit_bias"
                )
            out.append((key, bias))
        elif isinstance(key, str):
            out.extend((tok, bias) for tok in tokenize(key))
        else:
            raise APIError(400, f"logit_bias: a token must be an id or a text, got {key!r}", param="logit_bias")
        check(LOGIT_BIAS, len(out))  # texts count as the tokens they stand for
    return tuple(out)


def model_bias(model: Any, value: Any) -> Bias:
    """`parse_logit_bias` with a loaded model's tokenizer (text without special tokens, as llama.cpp)."""
    vocab = model.vocab
    return parse_logit_bias(
        value, lambda text: vocab.tokenize(text, add_special=False, parse_special=False), vocab.n_vocab
    )
