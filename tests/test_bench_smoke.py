"""bench/ runs end to end: a quick embedded run writes every headline key as a number.

Speed itself is bench/'s business (docs/performance.md); this only proves the harness works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

HEADLINE_KEYS = [
    "overhead_p50_ms",
    "overhead_p99_ms",
    "direct_p50_ms",
    "portal_p50_ms",
    "calls_per_s_50_users",
    "errors_50_users",
    "cold_start_ms",
    "rss_per_stdio_connection_mb",
    "rss_per_http_connection_mb",
    "handshakes_during_warm_calls",
    "mcp_overhead_p50_ms",
    "mcp_overhead_p99_ms",
    "mcp_handshake_overhead_p50_ms",
    "mcp_calls_per_s_50_clients",
    "mcp_errors_50_clients",
    "cpu_ms_per_call",
    # The clients series, named for the full run's 1,000 clients (--quick holds 20).
    "clients_1000_errors",
    "clients_1000_p99_ms",
    "clients_1000_calls_per_s",
]


def test_it_runs_the_bench_quickly_and_writes_every_key(tmp_path):
    out = tmp_path / "latest.json"
    # The bench starts its own embedded portal, whatever mode this suite runs in.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--modes", "embedded", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(out.read_text())
    for key in HEADLINE_KEYS:
        assert isinstance(report[key], int | float) and not isinstance(report[key], bool), (key, report[key])
    assert report["handshakes_during_warm_calls"] == 0
    assert report["report"]["embedded"]["latency"]["stdio"]["n"] == 20
    assert "| mode | transport | direct p50 | portal p50 |" in run.stdout
    assert report["report"]["embedded"]["mcp"]["latency"]["2026-07-28"]["n"] == 20
    assert report["mcp_errors_50_clients"] == 0
    held = report["report"]["embedded"]["clients"]
    assert (held["clients"], held["connected"], held["handshakes"]) == (20, 20, 0)
    assert report["clients_1000_errors"] == 0, held["error_examples"]
    assert "| mode | clients | connected | window s | think s |" in run.stdout
