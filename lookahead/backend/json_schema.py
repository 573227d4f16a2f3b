"""JSON schemas to GBNF, written the way llama-server's converter writes them.

llama-cpp-python's port of llama.cpp's converter (`llama_cpp.llama_grammar.SchemaConverter`)
is an older copy: it writes a bound such as `maxLength: 5` as nested optional groups,
`(c (c (c (c (c)?)?)?)?)?`, and llama.cpp's grammar parser recurses once per group, so
`maxLength: 100000` overflows its stack (the process dies) and a few thousand is refused.
llama.cpp's own converter (`common/json-schema-to-grammar.cpp`, `build_repetition`) writes
GBNF's repetition syntax instead, `c{0,5}`, which the parser expands without recursing and
which costs the same whatever the bound.

`_Converter` is that converter with its two methods that write repetitions (`visit`, for
`minLength`/`maxLength` and `minItems`/`maxItems`, and `_visit_pattern`, for a regex's
`{m,n}`) run against a namespace whose `_build_repetition` is `build_repetition` below (a
port of llama.cpp's); everything else, and llama_cpp's module itself, is left as it is.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from typing import Any

from llama_cpp import llama_grammar

from lookahead.backend.grammar import GrammarError


def build_repetition(
    item_rule: str,
    min_items: int,
    max_items: int | None,
    separator_rule: str | None = None,
    item_rule_is_literal: bool = False,  # noqa: ARG001 - the older signature's; `"ab"{2}` repeats the whole literal
) -> str:
    """GBNF for `min_items` to `max_items` (None: no limit) of `item_rule`, with
    `separator_rule` between two items: llama.cpp's `build_repetition`. The bounds come from
    the schema as written (`minLength`, `maxItems`, a pattern's `{m,n}`): GrammarError for
    what is not a count."""
    for value in (min_items, max_items):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise GrammarError(f"a length or item bound must be a whole number >= 0, got {value!r}")
    if max_items is not None and min_items > max_items:
        raise GrammarError(f"a minimum length or item count ({min_items}) is more than its maximum ({max_items})")
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return f"{item_rule}?"
    if not separator_rule:
        if min_items == 1 and max_items is None:
            return f"{item_rule}+"
        if min_items == 0 and max_items is None:
            return f"{item_rule}*"
        return f"{item_rule}{{{min_items},{'' if max_items is None else max_items}}}"
    rest = build_repetition(
        f"({separator_rule} {item_rule})",
        max(min_items - 1, 0),
        None if max_items is None else max_items - 1,
    )
    result = f"{item_rule} {rest}"
    return f"({result})?" if min_items == 0 else result


def _with_our_repetition(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` reading `_build_repetition` (and only that) from a namespace where it is ours."""
    namespace = {**vars(llama_grammar), "_build_repetition": build_repetition}
    code = method.__code__
    return types.FunctionType(code, namespace, method.__name__, method.__defaults__, method.__closure__)


class _Converter(llama_grammar.SchemaConverter):
    visit = _with_our_repetition(llama_grammar.SchemaConverter.visit)
    _visit_pattern = _with_our_repetition(llama_grammar.SchemaConverter._visit_pattern)


def schema_to_gbnf(schema: Any) -> str:
    """GBNF for a JSON schema (an object; `{}` is any JSON value). GrammarError for what is
    not a usable schema. References must be local (`#/...`): a remote one would be fetched."""
    if not isinstance(schema, dict):
        raise GrammarError(f"a JSON schema is an object, got {type(schema).__name__}")
    try:
        _local_refs_only(schema)
        converter = _Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        converter.visit(converter.resolve_refs(json.loads(json.dumps(schema)), "input"), "")
        return str(converter.format_grammar())
    except GrammarError:
        raise
    except RecursionError as exc:
        raise GrammarError("the JSON schema nests too deeply") from exc
    except Exception as exc:  # the converter raises what it meets: assertions, key and type errors
        raise GrammarError(f"the JSON schema cannot be turned into a grammar: {exc or type(exc).__name__}") from exc


def _local_refs_only(node: Any) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
            raise GrammarError(f"only local $ref (#/...) are supported in a JSON schema, got {ref!r}")
        for value in node.values():
            _local_refs_only(value)
    elif isinstance(node, list):
        for value in node:
            _local_refs_only(value)
