"""Checking tool arguments against a tool's inputSchema before the server sees them."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

MAX_ERRORS = 50
NOT_FINITE = "is not a finite number (too large for JSON)"


def _non_finite(value: Any, path: list | None = None) -> list[list]:
    path = path or []
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _non_finite(item, [*path, key])]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _non_finite(item, [*path, index])]
    return []


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
    infinite = [{"path": path, "message": NOT_FINITE} for path in _non_finite(arguments)]
    if infinite:
        # 1e400 reads as infinity, which jsonschema calls a number and JSON cannot carry to the server.
        return infinite[:MAX_ERRORS]
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
