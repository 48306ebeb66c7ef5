"""Checking tool arguments against a tool's inputSchema before the server sees them."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

MAX_ERRORS = 50


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Draft202012Validator | str:
    """A checked validator for one schema, or the reason the schema is invalid.

    Checking a schema against the meta-schema took about 4 ms, more than the rest of a
    warm tool call; a tool's schema changes only when its server says so, so it is checked
    once per distinct schema (keyed by its canonical JSON, so an edited schema is new).
    """
    schema = json.loads(schema_json)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return exc.message
    return Draft202012Validator(schema)


def validate_arguments(schema: dict[str, Any] | None, arguments: Any) -> list[dict[str, Any]]:
    """Every way `arguments` breaks `schema`, as {path, message} with path a list of keys.

    An invalid schema from the server is the server's problem, not the user's: it is
    reported once, at the root, rather than silently accepted.
    """
    validator = _validator(json.dumps(schema or {"type": "object"}, sort_keys=True))
    if isinstance(validator, str):
        return [{"path": [], "message": f"the tool's input schema is invalid: {validator}"}]
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
