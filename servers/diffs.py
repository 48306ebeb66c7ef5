"""A unified diff as rows to show as a table: each line added, removed or unchanged, with its numbers.

Computed here rather than in the browser: the diff is already made on the server (difflib, in
`policy.definition_diff`), so the pages (the server page's table, the approval dialog's, built from
the `diff_rows` of the event) need no diff library and no parser of their own (docs/permissions.md).
"""

from __future__ import annotations

import re
from typing import Any

HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def diff_rows(diff: str) -> list[dict[str, Any]]:
    """Rows {kind: hunk|added|removed|same, old, new, text} of a unified diff; [] for no diff."""
    rows: list[dict[str, Any]] = []
    old = new = 0
    in_hunk = False
    for line in diff.splitlines():
        found = HUNK.match(line)
        if found:
            in_hunk = True
            old, new = int(found[1]), int(found[2])
            rows.append({"kind": "hunk", "old": None, "new": None, "text": f"approved line {old}, now line {new}"})
        elif not in_hunk:
            continue  # the "--- approved" / "+++ now" header
        elif line.startswith("+"):
            rows.append({"kind": "added", "old": None, "new": new, "text": line[1:]})
            new += 1
        elif line.startswith("-"):
            rows.append({"kind": "removed", "old": old, "new": None, "text": line[1:]})
            old += 1
        elif not line.startswith("\\"):  # "\ No newline at end of file" says nothing here
            rows.append({"kind": "same", "old": old, "new": new, "text": line[1:]})
            old, new = old + 1, new + 1
    return rows
