"""Elicitation forms: the requested schema's defaults, and checking a person's answer before it is sent.

MCP restricts a requested schema to a flat object of primitives: string (with format email, uri,
date, date-time; minLength, maxLength), number / integer (minimum, maximum), boolean, and enums
(single-select as `enum` or `oneOf` with `const`/`title`; multi-select as an array of them).
The browser validates too; this is the check that counts.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker

from .schema import located

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
formats = FormatChecker(formats=())


@formats.checks("email")
def _is_email(value: object) -> bool:
    return not isinstance(value, str) or bool(_EMAIL.match(value))


@formats.checks("uri")
def _is_uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parts = urlsplit(value)
    return bool(parts.scheme and (parts.netloc or parts.path))


@formats.checks("date", raises=ValueError)
def _is_date(value: object) -> bool:
    return not isinstance(value, str) or bool(date.fromisoformat(value))


@formats.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(datetime.fromisoformat(value.replace("Z", "+00:00")))


def defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema's `default`s, to pre-fill the form (the SDK does not fill them)."""
    return {
        name: prop["default"]
        for name, prop in (schema.get("properties") or {}).items()
        if isinstance(prop, dict) and "default" in prop
    }


def validate_answer(schema: dict[str, Any], content: Any) -> list[dict[str, Any]]:
    """Every way `content` breaks the requested schema, as {path, message}."""
    if not isinstance(content, dict):
        return [{"path": [], "message": "The answer must be an object of field values."}]
    unknown = set(content) - set(schema.get("properties") or {})
    errors = [{"path": [name], "message": f"{name!r} is not a field of this form"} for name in sorted(unknown)]
    validator = Draft202012Validator(schema, format_checker=formats)
    ordered = sorted(validator.iter_errors(content), key=lambda e: list(map(str, e.absolute_path)))
    errors.extend({"path": path, "message": message} for path, message in located(ordered))
    return errors
