"""The project's modules import one another without a cycle, and a web process never loads the code
that connects to MCP servers (it loads the SDK only to serve the portal's own endpoint).

The import graph is read from the source (every import, those inside functions included), so a cycle
hidden behind a function-local import is still one. A function-local import of the project's own code
is allowed where it must be lazy, with a comment saying why.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import defaultdict

from tests.conftest import ROOT

PACKAGES = ("portal", "servers", "sessions")


def _modules() -> dict[str, tuple[ast.Module, bool, list[str]]]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            source = path.read_text()
            found[name] = (ast.parse(source), path.name == "__init__.py", source.splitlines())
    return found


def _imported(name: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = name.split(".") if is_package else name.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, *([base] if base else [])])
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    out = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = defaultdict(set)
    for name, (tree, is_package, _) in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name] |= _imported(name, is_package, node, known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_relative_and_function_local_imports():
    graph = import_graph()
    assert "sessions.events" in graph["sessions.actions"]  # `from . import events`
    assert "sessions.worker" in graph["portal.embedded"]  # inside start_worker()


def test_no_module_imports_itself_back():
    assert cycles(import_graph()) == []


def test_every_function_local_import_of_the_project_says_why():
    unexplained = []
    for name, (tree, _, lines) in _modules().items():
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                ours = isinstance(node, ast.ImportFrom) and node.level or (module or "").split(".")[0] in PACKAGES
                above = node.lineno - 2  # the line above, over the rest of a group of imports
                while above > 0 and lines[above].strip().startswith(("from ", "import ")):
                    above -= 1
                said = "#" in lines[node.lineno - 1] or lines[above].strip().startswith("#")
                if ours and not said:
                    unexplained.append(f"{name}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert unexplained == []


WEB_PROCESS = """
import sys
import django
django.setup()
from django.urls import get_resolver
import portal.asgi  # the ASGI app: HTTP and the playground socket's consumer
for pattern in get_resolver().url_patterns:  # every view module, as the first request loads them
    pass
import importlib
for module in ("sessions.consumers", "servers.views", "sessions.views", "servers.credentials.views",
               "servers.team_views", "portal.views"):
    importlib.import_module(module)
# The SDK serves the portal's own MCP endpoint (sessions/mcp/endpoint.py) in web processes; the
# portal's side of connections to MCP servers stays in the workers.
CONNECTING = ("sessions.mcp.pool", "sessions.mcp.transports", "sessions.mcp.auth", "sessions.mcp.wire",
              "sessions.worker", "sessions.tasks", "sessions.credentials", "sessions.oauth_flow")
loaded = sorted(m for m in sys.modules if m in CONNECTING or m.startswith("sessions.worker."))
print(len(loaded), loaded[:3], "sessions.mcp.endpoint" in sys.modules)
"""


def test_a_web_process_never_opens_an_mcp_connection():
    """Daphne in the distributed mode serves pages, sockets and the MCP endpoint; the workers own every
    connection to an MCP server, so a web process never loads the code that opens one."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        # The distributed mode's settings (nothing connects at import), whichever mode the suite runs in.
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/not-used",
        "REDIS_URL": "redis://127.0.0.1:6379/15",
        "DJANGO_SECRET_KEY": "import-graph-test-secret-key-not-for-production-0123456789",
        "PORTAL_ENCRYPTION_KEYS": "t:" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=",
    }
    done = subprocess.run(
        [sys.executable, "-c", WEB_PROCESS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 [] True", f"a web process loaded connection code: {done.stdout}"
