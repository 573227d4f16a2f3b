"""Constrained output as llama-server and OpenAI ask for it: `grammar` (GBNF text),
`json_schema` (a JSON schema), and OpenAI's `response_format`:

    {"type": "text"}                                         no constraint
    {"type": "json_object"}                                  any JSON value
    {"type": "json_object", "schema": {...}}                 JSON that fits the schema (llama.cpp's form)
    {"type": "json_schema", "json_schema": {"schema": {...}}}  JSON that fits the schema (OpenAI's form)

One of them per request. The result is a factory of grammar states for the sampler
(`lookahead.core.constraint`): the grammar is parsed once here (checked first in a child
process, see `lookahead.backend.grammar_guard`), each generation gets its own state.
Whatever cannot be used (an unknown type, an invalid schema or grammar, one over a size
limit, too complex for llama.cpp's parser or crashing it) is a 400 naming the field.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from lookahead.backend.grammar import GrammarError
from lookahead.backend.grammar_guard import CheckerUnavailable
from lookahead.backend.json_schema import schema_to_gbnf
from lookahead.core.constraint import ConstraintFactory
from lookahead.server import request_limits as limits
from lookahead.server.errors import APIError

MAX_GRAMMAR_BYTES = limits.GRAMMAR.most  # GBNF text, given or made from a schema
MAX_SCHEMA_BYTES = limits.SCHEMA.most  # a JSON schema, as compact JSON


def response_format_schema(value: Any) -> dict[str, Any] | None:
    """The JSON schema `response_format` asks for (`{}`: any JSON), None for free text."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise APIError(400, "response_format must be an object with a type", param="response_format")
    kind = value.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = value.get("schema", {})
    elif kind == "json_schema":
        wrapper = value.get("json_schema", {})
        if not isinstance(wrapper, dict):
            raise APIError(400, "response_format.json_schema must be an object", param="response_format")
        schema = wrapper.get("schema", {})
    else:
        raise APIError(
            400,
            f'response_format type must be one of "text", "json_object" or "json_schema", got {kind!r}',
            param="response_format",
        )
    if schema is None:
        return {}
    if not isinstance(schema, dict):
        raise APIError(400, "response_format's schema must be a JSON schema (an object)", param="response_format")
    return schema


def request_grammar(grammar: Any, json_schema: Any, response_format: Any = None) -> tuple[str, str] | None:
    """(GBNF text, the field it came from) for a request, None when it asks for no constraint."""
    asked: list[tuple[str, Any]] = []
    if grammar is not None and grammar != "":
        if not isinstance(grammar, str):
            raise APIError(400, "grammar must be a string of GBNF rules", param="grammar")
        asked.append(("grammar", grammar))
    if json_schema is not None:
        asked.append(("json_schema", json_schema))
    schema = response_format_schema(response_format)
    if schema is not None:
        asked.append(("response_format", schema))
    if not asked:
        return None
    if len(asked) > 1:
        names = " and ".join(f'"{name}"' for name, _ in asked)
        raise APIError(400, f"{names} cannot be given together: use one of them", param=asked[1][0])
    field, value = asked[0]
    if field == "grammar":
        _check_size(field, "the grammar", len(value.encode("utf-8", "surrogatepass")), MAX_GRAMMAR_BYTES)
        return value, field
    try:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    except (ValueError, RecursionError) as exc:
        raise APIError(400, f"{field}: the JSON schema cannot be read: {exc}", param=field) from exc
    _check_size(field, "the JSON schema", len(text.encode("utf-8", "surrogatepass")), MAX_SCHEMA_BYTES)
    try:
        gbnf = _schema_gbnf(text)
    except GrammarError as exc:
        raise APIError(400, f"{field}: {exc}", param=field) from exc
    _check_size(field, "the grammar made from the JSON schema", len(gbnf.encode("utf-8", "surrogatepass")),
                MAX_GRAMMAR_BYTES)
    return gbnf, field


def request_constraint(
    model: Any, grammar: Any, json_schema: Any, response_format: Any = None
) -> ConstraintFactory | None:
    """The grammar a request asks for, parsed for the served model; None for none. Blocking
    (a check in the grammar checker can take its time limit): call it off the event loop."""
    found = request_grammar(grammar, json_schema, response_format)
    if found is None:
        return None
    text, field = found
    try:
        return model.grammars.parse(text)
    except GrammarError as exc:
        raise APIError(400, f"{field}: {exc}", param=field) from exc
    except CheckerUnavailable as exc:
        raise APIError(503, str(exc), param=field, headers={"Retry-After": "1"}) from exc


@lru_cache(maxsize=64)
def _schema_gbnf(schema_json: str) -> str:
    """GBNF for a schema, by its canonical JSON: a repeated schema is converted once."""
    return schema_to_gbnf(json.loads(schema_json))


def _check_size(field: str, what: str, size: int, limit: int) -> None:
    if size > limit:
        raise APIError(400, f"{field}: {what} is {size} bytes, more than the limit of {limit}", param=field)
