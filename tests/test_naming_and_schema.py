import json

from sessions.mcp.naming import is_valid_name, normalize_name, summarize_description, tool_full_name
from sessions.mcp.schema import validate_arguments


def test_names_normalize_as_in_claude_code():
    assert normalize_name("my server.v2") == "my_server_v2"
    assert tool_full_name("GitHub Enterprise", "create-issue") == "mcp__GitHub_Enterprise__create-issue"
    assert is_valid_name("ok_name-1") and is_valid_name("needs normalizing")
    assert not is_valid_name("") and not is_valid_name("x" * 65)


def test_long_descriptions_are_summarized_at_2048_characters():
    assert summarize_description("short") == "short"
    summary = summarize_description("d" * 5000)
    assert len(summary) == 2048 + len("… [truncated]") and summary.endswith("… [truncated]")


def test_arguments_are_checked_field_by_field():
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["n"],
    }
    assert validate_arguments(schema, {"n": 2, "tags": ["a"]}) == []
    errors = validate_arguments(schema, {"n": 0, "tags": ["a", 3]})
    assert {tuple(e["path"]) for e in errors} == {("n",), ("tags", 1)}
    assert validate_arguments(schema, {}) == [{"path": ["n"], "message": "'n' is a required property"}]


def test_a_broken_schema_from_the_server_is_reported_not_trusted():
    errors = validate_arguments({"type": "no-such-type"}, {})
    assert errors and "invalid" in errors[0]["message"]


def test_a_number_too_large_for_json_is_named_not_taken_for_none():
    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "array"}}}
    arguments = json.loads('{"a": 1e400, "b": [1, -1e999]}')  # as the socket reads them: infinities
    assert validate_arguments(schema, arguments) == [
        {"path": ["a"], "message": "is not a finite number (too large for JSON)"},
        {"path": ["b", 1], "message": "is not a finite number (too large for JSON)"},
    ]
