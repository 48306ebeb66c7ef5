import json

from django import template

from servers.diffs import diff_rows

register = template.Library()


@register.filter
def pretty_json(value: object) -> str:
    """JSON as people read it (not Python's repr); autoescaped by the template like any text."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


@register.filter
def words(value: str) -> str:
    """A stable code such as process_exited, as words: process exited."""
    return str(value).replace("_", " ")


@register.inclusion_tag("servers/diff.html")
def diff_table(diff: str) -> dict:
    """A unified diff as a table, each line marked added or removed (servers/diffs.py)."""
    return {"rows": diff_rows(diff or "")}
