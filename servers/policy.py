"""Who may call which tool: one pure function decides, and says which rule decided.

No Django and no database here. The caller loads a team's and a user's rules into
`Rule`s and the team's defaults into `Defaults` (servers/permissions.py does it in
two queries), hands over the tool's definition as the server listed it, and gets a
`Decision` back. The same function answers the playground, the worker's last check
before a call and the pages that explain "why", so they can never disagree.

Precedence (docs/permissions.md): team deny > user deny > team ask > user ask >
user allow > team allow > the team's default for the tool's annotations. A user
rule can tighten what the team allows but never loosen a team deny or a team ask.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

Effect = Literal["allow", "deny", "ask"]
Scope = Literal["team", "user"]
ALLOW: Effect = "allow"
DENY: Effect = "deny"
ASK: Effect = "ask"
EFFECTS: tuple[Effect, ...] = (ALLOW, ASK, DENY)

# The order rules win in. Within one step the most specific pattern is reported.
PRECEDENCE: tuple[tuple[Scope, Effect], ...] = (
    ("team", DENY),
    ("user", DENY),
    ("team", ASK),
    ("user", ASK),
    ("user", ALLOW),
    ("team", ALLOW),
)

# mcp__<server>, mcp__<server>__<tool>, either with * wildcards, or * alone.
VALID_PATTERN = re.compile(r"^(\*|mcp__[A-Za-z0-9_*-]{1,200})$")
FINGERPRINTED_FIELDS = ("name", "description", "inputSchema", "annotations")

# How a tool's annotations place it for the team's defaults.
READ_ONLY, DESTRUCTIVE, OTHER, UNKNOWN = "read_only", "destructive", "other", "unknown"
KIND_LABELS = {
    READ_ONLY: "read-only (readOnlyHint)",
    DESTRUCTIVE: "destructive (destructiveHint, or no hint: MCP's default for a tool that writes)",
    OTHER: "not read-only, not destructive (destructiveHint: false)",
    UNKNOWN: "not listed yet",
}


@dataclass(frozen=True)
class Rule:
    scope: Scope
    pattern: str
    effect: Effect
    id: int | None = None
    # Set on rules made by "Always allow": they apply only to the definition that was approved.
    fingerprint: str = ""
    definition: Mapping[str, Any] | None = field(default=None, compare=False)

    def describe(self) -> str:
        owner = "the team rule" if self.scope == "team" else "your rule"
        return f"{owner} {self.pattern}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scope": self.scope,
            "pattern": self.pattern,
            "effect": self.effect,
            "pinned": bool(self.fingerprint),
        }


@dataclass(frozen=True)
class Defaults:
    """A team's effect for tools no rule covers, by what their annotations say."""

    read_only: Effect = ALLOW
    destructive: Effect = ASK
    other: Effect = ASK


@dataclass(frozen=True)
class Decision:
    effect: Effect
    reason: str
    rule: Rule | None = None
    kind: str = UNKNOWN
    fingerprint: str = ""
    # "Always allow" rules for this tool that were given for another definition.
    stale: tuple[Rule, ...] = ()

    @property
    def enforced(self) -> bool:
        """A team rule decided: no user rule can change the answer."""
        return self.rule is not None and self.rule.scope == "team" and self.effect != ALLOW

    @property
    def can_remember(self) -> bool:
        """Whether "Always allow" may be offered: only when no rule asked on purpose."""
        return self.effect == ASK and self.rule is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "effect": self.effect,
            "reason": self.reason,
            "rule": self.rule.as_dict() if self.rule else None,
            "kind": self.kind,
            "fingerprint": self.fingerprint,
            "stale": [rule.as_dict() for rule in self.stale],
            "enforced": self.enforced,
            "can_remember": self.can_remember,
        }


def decide(
    tool_name: str,
    tool: Mapping[str, Any] | None,
    rules: Iterable[Rule],
    defaults: Defaults = Defaults(),
) -> Decision:
    """The effect for calling `tool_name` (mcp__<server>__<tool>) whose definition is `tool`.

    `tool` is None when the caller has not seen the definition; such a tool is never
    assumed read-only, and pinned rules cannot match it.
    """
    fingerprint = tool_fingerprint(tool) if tool is not None else ""
    kind = tool_kind(tool)
    winners: dict[tuple[Scope, Effect], Rule] = {}
    stale: list[Rule] = []
    for rule in rules:
        if not matches(rule.pattern, tool_name):
            continue
        if rule.fingerprint and rule.fingerprint != fingerprint:
            stale.append(rule)
            continue
        key = (rule.scope, rule.effect)
        if key not in winners or _specificity(rule) > _specificity(winners[key]):
            winners[key] = rule
    changed = " An earlier approval was for another definition of this tool." if stale else ""
    for key in PRECEDENCE:
        rule = winners.get(key)
        if rule is not None:
            return Decision(rule.effect, _rule_reason(rule) + changed, rule, kind, fingerprint, tuple(stale))
    if kind == UNKNOWN:
        reason = "The portal has not seen this tool's definition, so it is not assumed read-only: ask."
        return Decision(ASK, reason + changed, None, kind, fingerprint, tuple(stale))
    effect: Effect = getattr(defaults, kind)
    reason = f"No rule matches; the team's default for {KIND_LABELS[kind]} tools is {effect}."
    return Decision(effect, reason + changed, None, kind, fingerprint, tuple(stale))


def _rule_reason(rule: Rule) -> str:
    who = rule.describe()
    who = who[0].upper() + who[1:]
    if rule.effect == DENY:
        return f"{who} denies it."
    if rule.effect == ASK:
        return f"{who} asks every time."
    pinned = " (approved for this definition)" if rule.fingerprint else ""
    return f"{who} allows it{pinned}."


def _specificity(rule: Rule) -> tuple[int, int, int]:
    # Exact names beat wildcards, longer patterns beat shorter; the id keeps it deterministic.
    return (rule.pattern.count("*") == 0, len(rule.pattern.replace("*", "")), -(rule.id or 0))


# -- patterns -------------------------------------------------------------------------------


def is_valid_pattern(pattern: str) -> bool:
    return bool(VALID_PATTERN.match(pattern))


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern[str]:
    body = ".*".join(re.escape(part) for part in pattern.split("*"))
    # mcp__<server> (nothing after the server's name) covers every tool of that server.
    if pattern.startswith("mcp__") and "__" not in pattern[5:]:
        body += "(?:__.*)?"
    return re.compile(body + r"\Z", re.DOTALL)


def matches(pattern: str, tool_name: str) -> bool:
    return _compile(pattern).match(tool_name) is not None


# -- definitions ----------------------------------------------------------------------------


def tool_kind(tool: Mapping[str, Any] | None) -> str:
    """read_only, destructive, other or unknown, from the annotations the server gave.

    MCP says destructiveHint defaults to true for a tool that is not read-only, so a
    tool with no annotations counts as destructive.
    """
    if tool is None:
        return UNKNOWN
    annotations = tool.get("annotations") or {}
    if annotations.get("readOnlyHint") is True:
        return READ_ONLY
    if annotations.get("destructiveHint") is False:
        return OTHER
    return DESTRUCTIVE


def _definition(tool: Mapping[str, Any]) -> dict[str, Any]:
    return {name: tool.get(name) for name in FINGERPRINTED_FIELDS}


def tool_fingerprint(tool: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the tool's name, description, input schema and annotations."""
    canonical = json.dumps(_definition(tool), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def definition_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    """A unified diff of what changed in a tool's definition since it was approved."""
    if before is None:
        return ""

    def lines(tool: Mapping[str, Any]) -> list[str]:
        return json.dumps(_definition(tool), indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    return "\n".join(difflib.unified_diff(lines(before), lines(after), "approved", "now", lineterm=""))


# -- classification for display (search / read / write, as Claude Code folds results) ---------

SEARCH_TOOLS = frozenset(
    {
        "search",
        "search_code",
        "search_repositories",
        "search_issues",
        "search_users",
        "search_files",
        "search_nodes",
        "search_documents",
        "search_messages",
        "search_pages",
        "slack_search_public",
        "slack_search_public_and_private",
        "slack_search_channels",
        "slack_search_users",
        "brave_web_search",
        "brave_local_search",
        "web_search",
        "google_search",
        "tavily_search",
        "exa_search",
        "find",
        "grep",
        "query_docs",
    }
)
READ_TOOLS = frozenset(
    {
        "read_file",
        "read_text_file",
        "read_media_file",
        "read_multiple_files",
        "list_directory",
        "list_directory_with_sizes",
        "directory_tree",
        "get_file_info",
        "list_allowed_directories",
        "get_file_contents",
        "get_issue",
        "list_issues",
        "get_pull_request",
        "list_pull_requests",
        "get_pull_request_files",
        "list_commits",
        "get_commit",
        "list_branches",
        "get_me",
        "slack_read_channel",
        "slack_read_thread",
        "slack_list_channels",
        "slack_get_channel_history",
        "slack_get_thread_replies",
        "slack_get_users",
        "slack_get_user_profile",
        "read_graph",
        "open_nodes",
        "fetch",
        "git_status",
        "git_diff",
        "git_diff_staged",
        "git_diff_unstaged",
        "git_log",
        "git_show",
        "list_tables",
        "describe_table",
        "read_query",
        "list_resources",
        "read_resource",
        "get_current_time",
        "echo",
    }
)
_CAMEL = re.compile(r"([a-z])([A-Z])")


def snake_case(name: str) -> str:
    return _CAMEL.sub(r"\1_\2", name).replace("-", "_").lower()


def classify(tool_name: str, annotations: Mapping[str, Any] | None = None) -> Literal["search", "read", "write"]:
    """search, read or write, for display: known names first, then readOnlyHint counts as read."""
    name = snake_case(tool_name)
    if name in SEARCH_TOOLS:
        return "search"
    if name in READ_TOOLS or (annotations or {}).get("readOnlyHint") is True:
        return "read"
    return "write"
