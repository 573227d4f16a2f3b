"""OpenAI request fields this service does not implement, refused by name.

Ignoring them would hand the client something other than what it asked for (no tool call
where it offered tools), so a request that sets one gets a 400 naming the field. Values
that ask for nothing (null, false, 0, an empty list, `best_of: 1`) pass.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationInfo

WHY = {
    "tools": "no tool calls",
    "functions": "no function calls",
    "best_of": "one completion per request",
    "grammar_lazy": "a grammar applies from the first token",
}


def asks_nothing(field: str, value: Any) -> bool:
    """Whether `value` leaves the field's feature off."""
    if value is None or value is False or value == 0 or value == [] or value == {}:
        return True
    return field == "best_of" and value == 1


def refuse_unsupported(value: Any, info: ValidationInfo) -> Any:
    """A pydantic field validator: ValueError naming the field when it asks for something."""
    field = info.field_name or "field"
    if not asks_nothing(field, value):
        raise ValueError(f"{field} is not supported by this server ({WHY.get(field, 'not implemented')})")
    return value
