"""static/content.js: the file name a resource downloads as, run by Node."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import NODE, ROOT

SCRIPT = """
import { fileName } from "%s";
console.log(JSON.stringify(JSON.parse(process.argv[1]).map(([uri, type]) => fileName(uri, type))));
"""


def test_a_blob_downloads_with_the_extension_its_type_is_opened_with():
    cases = [
        ("demo://notes/1", "text/plain", "1.txt"),
        ("demo://notes/2", "text/plain; charset=utf-8", "2.txt"),
        ("demo://data", "application/json", "data.json"),
        ("demo://readme", "text/markdown", "readme.md"),
        ("demo://logo", "image/svg+xml", "logo.svg"),
        ("demo://report.csv", "text/csv", "report.csv"),  # a name with an extension keeps it
    ]
    script = SCRIPT % (ROOT / "static" / "content.js").as_uri()
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script, json.dumps([c[:2] for c in cases])],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert json.loads(done.stdout) == [c[2] for c in cases]
