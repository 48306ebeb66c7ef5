"""Every test the docs name exists: a claim backed by a test that was renamed or removed is a claim
backed by nothing. Reads docs/*.md and README.md for `tests/….py`, `tests/….py::test_name` and the
short `test_x.py` / `test_x.py::test_name` (a file found anywhere under tests/)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# A path under tests/, or a bare test file name; then any ::names (a class, a function, [parameters]).
REFERENCE = re.compile(r"(?<![\w/.-])((?:tests/[\w/.-]+|test_\w+)\.py)((?:::[\w-]+(?:\[[^\]\s]*\])?)*)")


def references() -> list[tuple[str, int, str, list[str]]]:
    """(doc, line, file, names) for every test reference in the docs."""
    found = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for match in REFERENCE.finditer(line):
                names = [re.sub(r"\[.*\]$", "", name) for name in match.group(2).split("::")[1:]]
                found.append((doc.name, number, match.group(1), names))
    return found


def resolve(reference: str) -> list[Path]:
    if "/" in reference:
        path = ROOT / reference
        return [path] if path.is_file() else []
    return [path for path in (ROOT / "tests").rglob(reference) if "node_modules" not in path.parts]


@cache
def defined(path: Path) -> dict[str, set[str]]:
    """Top-level functions and classes of a file, each class with its methods."""
    tree = ast.parse(path.read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return names


def missing(reference: str, names: list[str]) -> str | None:
    """Why the reference points at nothing, or None."""
    paths = resolve(reference)
    if not paths:
        return "no such file"
    if not names:
        return None
    for path in paths:
        scope = defined(path)
        if names[0] in scope and (len(names) == 1 or names[1] in scope[names[0]]):
            return None
    return f"no {'::'.join(names)} in {', '.join(str(p.relative_to(ROOT)) for p in paths)}"


def test_the_docs_name_tests():
    # The reader below must find something, or the check that follows checks nothing.
    found = references()
    assert len({(file, tuple(names)) for _, _, file, names in found}) > 20
    assert any(names for _, _, _, names in found)


def test_every_test_the_docs_name_exists():
    broken = [
        f"{doc}:{line}: {file}{''.join('::' + n for n in names)}: {why}"
        for doc, line, file, names in references()
        if (why := missing(file, names)) is not None
    ]
    assert broken == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see tests/test_a.py.", [("tests/test_a.py", [])]),
        ("(tests/browser/test_b.py::test_it_works)", [("tests/browser/test_b.py", ["test_it_works"])]),
        ("| test_c.py, test_d.py::test_x[stdio] |", [("test_c.py", []), ("test_d.py", ["test_x"])]),
        ("tests/e.py::Suite::test_y and bench/soak.py", [("tests/e.py", ["Suite", "test_y"])]),
    ],
)
def test_it_reads_each_form_the_docs_use(text, expected):
    got = []
    for match in REFERENCE.finditer(text):
        got.append((match.group(1), [re.sub(r"\[.*\]$", "", n) for n in match.group(2).split("::")[1:]]))
    assert got == expected


def test_it_catches_a_renamed_test_and_a_missing_file():
    assert missing("tests/test_docs_claims.py", ["test_every_test_the_docs_name_exists"]) is None
    assert missing("test_docs_claims.py", ["test_no_such_thing"]) is not None
    assert missing("tests/test_no_such_file.py", []) == "no such file"
