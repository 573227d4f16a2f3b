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
