"""How much one request may ask for: one table, applied on every route that generates.

Each entry bounds work that grows with a field of the request: per token (`n_probs`
candidates built and sent, `stop` strings searched, `logit_bias` pairs added), per request
(prompts tokenized, completions decoded, `input_extra` chunks indexed) or per parse (a
grammar or a schema). A value over its limit is a 400 that names the field and the limit,
before any work is done: the same on OpenAI's routes and on llama.cpp's, so a guard written
here holds everywhere. docs/api.md publishes this table (a test keeps the two equal).

The numbers leave room for every client seen in use (llama.vim sends 16 `input_extra`
chunks at most, Continue a dozen `stop` strings, OpenAI's own limits are lower still) while
keeping the worst request's cost within a few times an ordinary one's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lookahead.server.errors import APIError


@dataclass(frozen=True)
class Limit:
    """The most a request may ask for in one field, and why the bound is there."""

    field: str  # as the client names it
    most: int
    unit: str  # what is counted
    why: str  # one line for the published table


N_PROBS = Limit("n_probs / top_logprobs / logprobs", 100, "candidates per token", "each is built and sent per token")
STOP = Limit("stop", 16, "strings", "each is searched for after every token")
LOGIT_BIAS = Limit("logit_bias", 1024, "entries (after texts are tokenized)", "each is applied at every token")
PROMPTS = Limit("prompt", 16, "prompts in one /completion request", "each is tokenized and decoded")
COMPLETIONS = Limit("n / n_cmpl", 4, "completions per prompt", "each is a generation of its own")
INPUT_EXTRA = Limit("input_extra", 64, "chunks", "each is tokenized and indexed")
FIM_TEXT = Limit(
    "input_prefix + input_suffix + input_extra + prompt",
    2_000_000,
    "characters",
    "only what fits the context is used; the rest is cut before tokenizing",
)
GRAMMAR = Limit(
    "grammar", 256 << 10, "bytes of GBNF (also a grammar made from a schema)", "checked and parsed per request"
)
SCHEMA = Limit("json_schema / response_format", 256 << 10, "bytes of JSON", "turned into a grammar per request")

TABLE = (N_PROBS, STOP, LOGIT_BIAS, PROMPTS, COMPLETIONS, INPUT_EXTRA, FIM_TEXT, GRAMMAR, SCHEMA)


def over(limit: Limit, count: int) -> str | None:
    """What is wrong when `count` is over `limit` (None when it is not)."""
    if count <= limit.most:
        return None
    return f"{count:,} {limit.unit} asked for, at most {limit.most:,} are accepted ({limit.why})"


def bounded(limit: Limit, count: int, name: str | None = None) -> None:
    """For a request schema's validator: ValueError when `count` is over `limit` (the
    service answers it as a 400 naming the field; a validator of several fields, which
    pydantic names none of, passes the `name` to say)."""
    problem = over(limit, count)
    if problem is not None:
        raise ValueError(f"{name}: {problem}" if name else problem)


def check(limit: Limit, count: int, param: str | None = None) -> None:
    """APIError 400 when `count` is over `limit`, naming the field and the limit."""
    problem = over(limit, count)
    if problem is not None:
        name = param or limit.field
        raise APIError(400, f"{name}: {problem}", param=name, code="limit_exceeded")


# Field validators both dialects' request schemas use (`field_validator(NAME)(one_of_these)`).
def bias_entries(value: Any) -> Any:
    bounded(LOGIT_BIAS, len(value) if isinstance(value, list | dict) else 0)
    return value


def grammar_size(value: Any) -> Any:
    bounded(GRAMMAR, text_size(value))
    return value


def schema_size(value: Any) -> Any:
    bounded(SCHEMA, json_size(value))
    return value


def text_size(value: object) -> int:
    """Bytes of a text as UTF-8 (0 for what is not a text: its own check says so)."""
    return len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else 0


def json_size(value: object) -> int:
    """Bytes of a JSON value written compactly (a schema's size, counted once)."""
    try:
        return len(json.dumps(value, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        return 0  # not JSON: the schema's own check says so


def markdown_table() -> str:
    """The table as docs/api.md publishes it."""
    rows = ["| field | at most | counted in | why |", "| --- | --- | --- | --- |"]
    rows += [f"| `{lim.field}` | {lim.most:,} | {lim.unit} | {lim.why} |" for lim in TABLE]
    return "\n".join(rows)
