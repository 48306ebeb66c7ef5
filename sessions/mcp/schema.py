"""Checking tool arguments against a tool's inputSchema before the server sees them."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

MAX_ERRORS = 50


def validate_arguments(schema: dict[str, Any] | None, arguments: Any) -> list[dict[str, Any]]:
    """Every way `arguments` breaks `schema`, as {path, message} with path a list of keys.

    An invalid schema from the server is the server's problem, not the user's: it is
    reported once, at the root, rather than silently accepted.
    """
    schema = schema or {"type": "object"}
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [{"path": [], "message": f"the tool's input schema is invalid: {exc.message}"}]
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))
    found = []
    for error in errors[:MAX_ERRORS]:
        path = list(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            # Point at the missing field itself, so the form can show the message beside it.
            missing = [name for name in error.validator_value if name not in error.instance]
            path = path + missing[:1]
        found.append({"path": path, "message": error.message})
    return found
