"""static/uri-template.js against the examples of RFC 6570 itself, run by Node."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import NODE, ROOT

VALUES = {"var": "value", "hello": "Hello World!", "path": "/foo/bar", "x": "1024", "y": "768", "empty": ""}
# (template, expansion) pairs from RFC 6570 §1.2 and §3.2.
EXAMPLES = [
    ("{var}", "value"),
    ("{hello}", "Hello%20World%21"),
    ("{+hello}", "Hello%20World!"),
    ("{+path}/here", "/foo/bar/here"),
    ("here?ref={+path}", "here?ref=/foo/bar"),
    ("{#path,x}/here", "#/foo/bar,1024/here"),
    ("map?{x,y}", "map?1024,768"),
    ("X{.var}", "X.value"),
    ("X{.x,y}", "X.1024.768"),
    ("{/var,x}/here", "/value/1024/here"),
    ("{;x,y,empty}", ";x=1024;y=768;empty"),
    ("{?x,y,empty}", "?x=1024&y=768&empty="),
    ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
    ("{var:3}", "val"),
    ("{undef}", ""),
    ("O{empty}X", "OX"),
    ("demo://greeting/{name}", "demo://greeting/Ada%20Lovelace%2Fx"),
]

SCRIPT = """
import { expand, variables } from "%s";
const examples = JSON.parse(process.argv[1]);
const values = JSON.parse(process.argv[2]);
console.log(JSON.stringify({
  expanded: examples.map(([template]) => expand(template, values)),
  variables: variables("demo://{a}/{+b}{?c,a}{#d:3}"),
}));
"""


def test_it_expands_the_rfc_examples():
    module = (ROOT / "static/uri-template.js").as_uri()
    values = {**VALUES, "name": "Ada Lovelace/x"}
    out = subprocess.run(
        [NODE, "--input-type=module", "-e", SCRIPT % module, json.dumps(EXAMPLES), json.dumps(values)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    result = json.loads(out.stdout)
    assert list(zip([t for t, _ in EXAMPLES], result["expanded"], strict=True)) == EXAMPLES
    assert result["variables"] == ["a", "b", "c", "d"]
