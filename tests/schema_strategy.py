"""Hypothesis strategies from the JSON Schema subset that FastAPI writes for our request
bodies (object, array, string, integer, number, boolean, null, enum, const, anyOf, bounds),
so the fuzz test draws bodies from the served OpenAPI document itself."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that satisfy `schema` (references already inlined)."""
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s) for s in schema[key]])
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return from_schema(schema["allOf"][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}) for k in kind])
    if kind == "object" or "properties" in schema:
        return _object(schema)
    if kind == "array":
        items = from_schema(schema.get("items", {}))
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 4), 4))
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 40), 40))
    if kind == "integer":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -(2**31) - 1) + 1)
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 2**31 + 1) - 1)
        return st.integers(lo, hi)
    if kind == "number":
        return st.floats(
            min_value=schema.get("minimum", schema.get("exclusiveMinimum")),
            max_value=schema.get("maximum", schema.get("exclusiveMaximum")),
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
            allow_nan=False,
            allow_infinity=False,
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return st.none() | st.booleans() | st.integers() | st.text(max_size=10)  # {}: anything


def _object(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    fixed = {k: from_schema(v) for k, v in props.items() if k in required}
    optional = {k: from_schema(v) for k, v in props.items() if k not in required}
    return st.fixed_dictionaries(fixed, optional=optional)


# ---- hostile constraints: what a client may send as `grammar`, `json_schema` or `response_format`


def _nested_schema(depth: int, leaf: dict[str, Any]) -> dict[str, Any]:
    for i in range(depth):
        leaf = {"type": "object", "properties": {f"k{i}": leaf}, "required": [f"k{i}"]} if i % 2 else \
            {"type": "array", "items": leaf}
    return leaf


_bound = st.sampled_from([0, 1, 3, 1999, 2000, 2001, 16000, 100000, 10**9])
_leaf_schemas = st.one_of(
    st.builds(lambda n: {"type": "string", "maxLength": n}, _bound),
    st.builds(lambda lo, hi: {"type": "string", "minLength": lo, "maxLength": hi}, _bound, _bound),
    st.builds(lambda lo, hi: {"type": "array", "items": {"type": "integer"}, "minItems": lo, "maxItems": hi},
              _bound, _bound),
    st.builds(lambda n, m: {"type": "string", "pattern": f"^(ab|c){{{n},{m}}}x{{{n}}}$"}, _bound, _bound),
    st.sampled_from([{}, {"type": "integer"}, {"enum": ["a", "b"]}, {"$ref": "#"}, {"$ref": "#/$defs/x"},
                     {"type": ["string", "null"], "maxLength": -1}, {"type": "string", "pattern": "("}]),
)
hostile_schemas = st.builds(_nested_schema, st.sampled_from([0, 1, 5, 60, 300]), _leaf_schemas)


def _left_recursive(n: int, alternatives: int) -> str:
    alt = " | ".join(["a{j}"] * alternatives)
    rules = "".join(f"a{i} ::= " + alt.format(j=i + 1) + "\n" for i in range(n))
    return f"root ::= a0\n{rules}a{n} ::= \"x\"\n"


def _nested_groups(n: int) -> str:
    return "root ::= " + '("a" ' * n + ")?" * n


hostile_grammars = st.one_of(
    st.builds(_left_recursive, st.sampled_from([3, 20, 60]), st.sampled_from([1, 2, 3])),
    st.builds(_nested_groups, st.sampled_from([10, 1000, 5000, 20000])),
    st.builds(lambda n: f'root ::= "a"{{{n}}}', _bound),
    st.builds(lambda n: f'root ::= [a-z]{{0,{n}}} "."', _bound),
    st.sampled_from(["root ::= root", "root ::= x", "root ::= (", "root ::= \"a\" <|im_end|>", "", "  ",
                     "x ::= \"a\""]),
    st.text(max_size=200),
)
