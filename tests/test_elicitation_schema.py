from sessions.mcp.elicitation import defaults, validate_answer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 10},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "born": {"type": "string", "format": "date"},
        "meet": {"type": "string", "format": "date-time"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number", "minimum": 0.5},
        "subscribe": {"type": "boolean", "default": True},
        "plan": {
            "type": "string",
            "oneOf": [{"const": "free", "title": "Free"}, {"const": "pro", "title": "Pro"}],
            "default": "free",
        },
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1},
    },
    "required": ["name", "email"],
}

GOOD = {
    "name": "Ada",
    "email": "ada@example.com",
    "site": "https://ada.example",
    "born": "1815-12-10",
    "meet": "2026-11-29T10:00:00Z",
    "age": 36,
    "score": 1.5,
    "subscribe": False,
    "plan": "pro",
    "colour": "blue",
    "tags": ["a", "c"],
}


def test_defaults_prefill_the_form():
    assert defaults(SCHEMA) == {"subscribe": True, "plan": "free"}


def test_a_good_answer_passes():
    assert validate_answer(SCHEMA, GOOD) == []


def test_every_field_type_rejects_bad_values():
    bad = {
        "name": "A",
        "email": "not-an-email",
        "site": "no scheme",
        "born": "1815-13-40",
        "meet": "yesterday",
        "age": 200,
        "score": 0.1,
        "subscribe": "yes",
        "plan": "gold",
        "colour": "green",
        "tags": [],
    }
    paths = {e["path"][0] for e in validate_answer(SCHEMA, bad)}
    assert paths == set(bad)


def test_missing_required_fields_and_unknown_fields_are_named():
    errors = validate_answer(SCHEMA, {"extra": 1})
    assert {"path": ["extra"], "message": "'extra' is not a field of this form"} in errors
    assert {tuple(e["path"]) for e in errors} >= {("name",), ("email",)}
    assert validate_answer(SCHEMA, ["not", "an", "object"])[0]["path"] == []
