"""Constrained output as llama-server and OpenAI ask for it: `grammar` (GBNF text),
`json_schema` (a JSON schema), and OpenAI's `response_format`:

    {"type": "text"}                                         no constraint
    {"type": "json_object"}                                  any JSON value
    {"type": "json_object", "schema": {...}}                 JSON that fits the schema (llama.cpp's form)
    {"type": "json_schema", "json_schema": {"schema": {...}}}  JSON that fits the schema (OpenAI's form)

One of them per request. The result is a factory of grammar states for the sampler
(`lookahead.core.constraint`): the grammar is parsed once here, each generation gets its
own state. Whatever cannot be used (an unknown type, an invalid schema or grammar) is a 400
naming the field.
"""

from __future__ import annotations

from typing import Any

from lookahead.backend.grammar import Grammar, GrammarError
from lookahead.backend.json_schema import schema_to_gbnf
from lookahead.core.constraint import ConstraintFactory
from lookahead.server.errors import APIError


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
        return value, field
    try:
        return schema_to_gbnf(value), field
    except GrammarError as exc:
        raise APIError(400, f"{field}: {exc}", param=field) from exc


def request_constraint(
    model: Any, grammar: Any, json_schema: Any, response_format: Any = None
) -> ConstraintFactory | None:
    """The grammar a request asks for, parsed for the served model; None for none."""
    found = request_grammar(grammar, json_schema, response_format)
    if found is None:
        return None
    text, field = found
    try:
        return Grammar(model.backend, text)
    except GrammarError as exc:
        raise APIError(400, f"{field}: {exc}", param=field) from exc
