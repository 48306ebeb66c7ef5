"""bench/soak.py runs end to end: a short soak with every kind of fault, and no record lost.

The real soak is `make soak` (10 minutes, docs/security.md); this proves the harness and the
count of lost records on a short run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from bench import services
from tests.conftest import ROOT

pytestmark = [
    pytest.mark.skipif(settings.EMBEDDED, reason="run once, in the distributed pass (it starts its own stores)"),
    pytest.mark.skipif(bool(services.available()), reason=services.available() or "-"),
]


def test_a_short_soak_with_every_fault_loses_nothing(tmp_path):
    out = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    run = subprocess.run(
        # Half a minute, or longer until every fault has had its turn: on a loaded machine the
        # restarts take longer, and the run waits for them rather than leaving one out.
        [sys.executable, "-m", "bench.soak", "--minutes", "0.5", "--users", "3", "--fault-every", "3.5"]
        + ["--every-fault-once", "--out", str(out), "--logs", str(tmp_path / "logs")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:] + lost_calls_in_logs(out, tmp_path / "logs")
    result = json.loads(out.read_text())
    assert result["records_lost"] == 0, result
    assert result["calls_accepted"] > 0 and result["records"] >= result["calls_accepted"]
    injected = set(result["faults_injected"])
    assert {"kill_worker", "restart_redis", "restart_postgres", "kill_http_server", "kill_stdio_servers"} <= injected


def lost_calls_in_logs(out, logs) -> str:
    """The portal's log lines about each call that never ended: where it stopped."""
    if not out.exists():
        return ""
    ids = [row[0] for row in json.loads(out.read_text())["unended_rows"]]
    lines = [
        f"{path.name}: {line}"
        for path in sorted(logs.glob("*"))
        if path.is_file()
        for line in path.read_text(errors="replace").splitlines()
        if any(call_id in line for call_id in ids)
    ]
    return "\n" + "\n".join(lines[-40:])
