"""The one function that decides, as tables: every precedence case, the defaults, patterns, pins.

No database and no server here: servers/policy.py is pure.
"""

from __future__ import annotations

import itertools

import pytest

from servers.policy import (
    ALLOW,
    ASK,
    DENY,
    Decision,
    Defaults,
    Rule,
    classify,
    decide,
    definition_diff,
    is_valid_pattern,
    matches,
    tool_fingerprint,
    tool_kind,
)

NAME = "mcp__demo__crash"
READ_ONLY_TOOL = {"name": "crash", "description": "d", "annotations": {"readOnlyHint": True}}
DESTRUCTIVE_TOOL = {"name": "crash", "description": "d", "annotations": {"destructiveHint": True}}
OTHER_TOOL = {"name": "crash", "description": "d", "annotations": {"readOnlyHint": False, "destructiveHint": False}}
BARE_TOOL = {"name": "crash", "description": "d", "inputSchema": {"type": "object"}}

# The six kinds of rule, in the order the issue says they win. Each is written against a
# different pattern that matches NAME, so the test also shows patterns do not change the order.
STEPS = [
    ("team deny", Rule("team", "mcp__demo__crash", DENY, id=1)),
    ("user deny", Rule("user", "mcp__demo", DENY, id=2)),
    ("team ask", Rule("team", "mcp__demo__*", ASK, id=3)),
    ("user ask", Rule("user", "mcp__*__crash", ASK, id=4)),
    ("user allow", Rule("user", "mcp__demo__crash", ALLOW, id=5)),
    ("team allow", Rule("team", "*", ALLOW, id=6)),
]


@pytest.mark.parametrize("present", list(itertools.product([False, True], repeat=len(STEPS))))
@pytest.mark.parametrize("tool", [READ_ONLY_TOOL, DESTRUCTIVE_TOOL], ids=["read-only", "destructive"])
def test_every_combination_of_rules_is_won_by_the_first_in_precedence(present, tool):
    rules = [rule for (_, rule), on in zip(STEPS, present, strict=True) if on]
    decision = decide(NAME, tool, reversed(rules))  # the order rules arrive in must not matter
    if not rules:
        assert decision.rule is None
        assert decision.effect == (ALLOW if tool is READ_ONLY_TOOL else ASK)
    else:
        expected = rules[0]
        assert decision.rule == expected
        assert decision.effect == expected.effect


@pytest.mark.parametrize(
    "rules, effect, winner, enforced",
    [
        # A user can never loosen a team deny or a team ask...
        ([("team", DENY), ("user", ALLOW)], DENY, ("team", DENY), True),
        ([("team", ASK), ("user", ALLOW)], ASK, ("team", ASK), True),
        # ...but can tighten what the team allows, or what the default allows.
        ([("team", ALLOW), ("user", DENY)], DENY, ("user", DENY), False),
        ([("team", ALLOW), ("user", ASK)], ASK, ("user", ASK), False),
        ([("user", ASK)], ASK, ("user", ASK), False),
        # A user's deny beats a team's ask; the team's deny beats the user's.
        ([("team", ASK), ("user", DENY)], DENY, ("user", DENY), False),
        ([("user", DENY), ("team", DENY)], DENY, ("team", DENY), True),
        # A user's allow beats a team's allow (both allow; the user's is the reason given).
        ([("team", ALLOW), ("user", ALLOW)], ALLOW, ("user", ALLOW), False),
        ([("team", ALLOW)], ALLOW, ("team", ALLOW), False),
        # Within one scope: deny > ask > allow.
        ([("team", ALLOW), ("team", ASK)], ASK, ("team", ASK), True),
        ([("user", ALLOW), ("user", DENY)], DENY, ("user", DENY), False),
    ],
)
def test_named_precedence_cases(rules, effect, winner, enforced):
    decision = decide(NAME, READ_ONLY_TOOL, [Rule(scope, NAME, e, id=i) for i, (scope, e) in enumerate(rules)])
    assert decision.effect == effect
    assert (decision.rule.scope, decision.rule.effect) == winner
    assert decision.enforced is enforced
    assert NAME in decision.reason


@pytest.mark.parametrize(
    "tool, kind, default_effect",
    [
        (READ_ONLY_TOOL, "read_only", ALLOW),
        (DESTRUCTIVE_TOOL, "destructive", ASK),
        (OTHER_TOOL, "other", ASK),
        # No annotations: MCP says destructiveHint defaults to true for a tool that may write.
        (BARE_TOOL, "destructive", ASK),
        # readOnlyHint wins over a destructiveHint that means nothing for a read-only tool.
        ({"name": "x", "annotations": {"readOnlyHint": True, "destructiveHint": True}}, "read_only", ALLOW),
        # A definition the portal has not seen is never assumed read-only.
        (None, "unknown", ASK),
    ],
)
def test_the_default_follows_annotations(tool, kind, default_effect):
    assert tool_kind(tool) == kind
    decision = decide(NAME, tool, [])
    assert (decision.effect, decision.rule, decision.kind) == (default_effect, None, kind)
    assert decision.can_remember is (default_effect == ASK)


def test_each_team_can_change_its_defaults():
    strict = Defaults(read_only=ASK, destructive=DENY, other=DENY)
    assert decide(NAME, READ_ONLY_TOOL, [], strict).effect == ASK
    assert decide(NAME, DESTRUCTIVE_TOOL, [], strict).effect == DENY
    assert decide(NAME, OTHER_TOOL, [], strict).effect == DENY
    lenient = Defaults(read_only=ALLOW, destructive=ALLOW, other=ALLOW)
    assert decide(NAME, DESTRUCTIVE_TOOL, [], lenient).effect == ALLOW
    # An unseen definition still asks, whatever the defaults say.
    assert decide(NAME, None, [], lenient).effect == ASK
    # Rules still beat defaults.
    assert decide(NAME, DESTRUCTIVE_TOOL, [Rule("user", NAME, DENY)], lenient).effect == DENY


def test_always_allow_rules_are_asked_with_remember_only_when_no_rule_asks():
    assert decide(NAME, DESTRUCTIVE_TOOL, []).can_remember
    assert not decide(NAME, DESTRUCTIVE_TOOL, [Rule("team", NAME, ASK)]).can_remember
    assert not decide(NAME, DESTRUCTIVE_TOOL, [Rule("user", NAME, ASK)]).can_remember
    assert not decide(NAME, DESTRUCTIVE_TOOL, [Rule("user", NAME, ALLOW)]).can_remember


@pytest.mark.parametrize(
    "pattern, name, expected",
    [
        ("mcp__demo__crash", "mcp__demo__crash", True),
        ("mcp__demo__crash", "mcp__demo__crash2", False),
        ("mcp__demo__crash", "mcp__demo2__crash", False),
        ("mcp__demo", "mcp__demo__crash", True),  # a whole server
        ("mcp__demo", "mcp__demo2__crash", False),
        ("mcp__demo", "mcp__demo", True),
        ("mcp__demo__*", "mcp__demo__crash", True),
        ("mcp__demo__*", "mcp__demos__crash", False),
        ("mcp__*__crash", "mcp__other__crash", True),
        ("mcp__demo__read_*", "mcp__demo__read_file", True),
        ("mcp__demo__read_*", "mcp__demo__write_file", False),
        ("mcp__demo*", "mcp__demo2__x", True),
        ("*", "mcp__anything__at_all", True),
        ("mcp__de.o__x", "mcp__demo__x", False),  # regex characters are literal
        ("mcp__Demo__x", "mcp__demo__x", False),  # names are case-sensitive, as in MCP
    ],
)
def test_patterns(pattern, name, expected):
    assert matches(pattern, name) is expected


@pytest.mark.parametrize(
    "pattern, valid",
    [
        ("mcp__demo", True),
        ("mcp__demo__echo", True),
        ("mcp__*", True),
        ("*", True),
        ("mcp__my-server__tool_1", True),
        ("", False),
        ("demo__echo", False),
        ("mcp__demo echo", False),
        ("mcp__demo/echo", False),
        ("mcp__", False),
        ("mcp__" + "x" * 201, False),
    ],
)
def test_pattern_validation(pattern, valid):
    assert is_valid_pattern(pattern) is valid


def test_a_pinned_rule_applies_only_to_the_definition_it_was_given_for():
    approved = {**DESTRUCTIVE_TOOL, "description": "delete one row"}
    changed = {**DESTRUCTIVE_TOOL, "description": "delete every row"}
    pinned = Rule("user", NAME, ALLOW, id=7, fingerprint=tool_fingerprint(approved), definition=approved)
    same = decide(NAME, dict(approved), [pinned])
    assert (same.effect, same.rule) == (ALLOW, pinned) and same.stale == ()
    assert "approved for this definition" in same.reason
    after = decide(NAME, changed, [pinned])
    assert (after.effect, after.rule, after.stale) == (ASK, None, (pinned,))
    assert after.can_remember and "another definition" in after.reason
    # A tool whose definition is unknown cannot match a pinned rule either.
    assert decide(NAME, None, [pinned]).stale == (pinned,)
    # An unpinned rule is not subject to change control.
    assert decide(NAME, changed, [Rule("user", NAME, ALLOW)]).effect == ALLOW
    # A stale pin falls through to whatever else applies, never to "allow" by itself.
    fallback = decide(NAME, changed, [pinned, Rule("team", "mcp__demo", DENY)])
    assert fallback.effect == DENY


def test_fingerprints_cover_name_description_schema_and_annotations_only():
    base = {"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"a": {}}}}
    fingerprint = tool_fingerprint(base)
    assert len(fingerprint) == 64
    # Key order and fields outside the four do not matter.
    reordered = {"inputSchema": {"properties": {"a": {}}, "type": "object"}, "description": "d", "name": "t"}
    assert tool_fingerprint(reordered) == fingerprint
    assert tool_fingerprint({**base, "title": "A new title", "outputSchema": {}}) == fingerprint
    for change in (
        {"name": "u"},
        {"description": "d2"},
        {"inputSchema": {"type": "object"}},
        {"annotations": {"readOnlyHint": True}},
    ):
        assert tool_fingerprint({**base, **change}) != fingerprint, change


def test_the_diff_shows_what_changed():
    before = {"name": "t", "description": "delete one row", "annotations": {"destructiveHint": True}}
    after = {"name": "t", "description": "delete every row", "annotations": {"destructiveHint": True}}
    diff = definition_diff(before, after)
    assert '-  "description": "delete one row",' in diff
    assert '+  "description": "delete every row",' in diff
    assert diff.startswith("--- approved\n+++ now")
    assert definition_diff(None, after) == ""


@pytest.mark.parametrize(
    "name, annotations, expected",
    [
        ("search_code", None, "search"),
        ("searchCode", None, "search"),  # camelCase → snake_case
        ("slack-search-public", None, "search"),  # kebab-case → snake_case
        ("get_file_contents", None, "read"),
        ("getFileContents", None, "read"),
        ("read_file", {"readOnlyHint": False}, "read"),  # a known read tool, whatever its hint
        ("add", {"readOnlyHint": True}, "read"),  # readOnlyHint counts as read
        ("create_issue", None, "write"),
        ("create_issue", {"readOnlyHint": False}, "write"),
        ("crash", {"destructiveHint": True}, "write"),
    ],
)
def test_classification_for_display(name, annotations, expected):
    assert classify(name, annotations) == expected


def test_a_decision_serializes_with_its_rule():
    rule = Rule("team", "mcp__demo", DENY, id=3)
    data = decide(NAME, DESTRUCTIVE_TOOL, [rule]).as_dict()
    assert data["effect"] == "deny" and data["enforced"] is True
    assert data["rule"] == {"id": 3, "scope": "team", "pattern": "mcp__demo", "effect": "deny", "pinned": False}
    assert data["reason"] == "The team rule mcp__demo denies it."
    assert isinstance(decide(NAME, None, []), Decision)
