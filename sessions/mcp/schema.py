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
    return [{"path": path, "message": message} for path, message in located(errors)][:MAX_ERRORS]


def located(errors: list) -> list[tuple[list, str]]:
    """(path, message) per error, a missing required field pointing at the field itself, so a form
    can show the message beside it. jsonschema raises one `required` error per missing field, each
    naming the whole list, hence the de-duplication."""
    found: list[tuple[list, str]] = []
    for error in errors:
        path = list(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            for name in error.validator_value:
                entry = (path + [name], f"{name!r} is a required property")
                if name not in error.instance and entry not in found:
                    found.append(entry)
            continue
        found.append((path, error.message))
    return found
