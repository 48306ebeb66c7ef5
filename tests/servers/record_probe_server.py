"""An MCP server over Streamable HTTP whose one tool looks up its own call in the portal's database.

    python -m tests.servers.record_probe_server --port PORT (--sqlite PATH | --postgres URL)

`probe(nonce)` reads, from the database the portal writes, the tool call rows whose arguments carry
this nonce, and answers with what it found as JSON text: {"records": how many, "status": …,
"effect": the decision's effect, "started": whether started_at is set}. Another process reading the
row while the tool runs is the proof that the portal committed the call's record, with its decision,
before it called the server. Over HTTP, not stdio: a stdio server runs in the sandbox, which never
shows it the portal's database.
"""

from __future__ import annotations

import argparse
import json

from mcp.server.mcpserver import MCPServer

server = MCPServer(name="record-probe", version="0.1")
WHERE: dict[str, str] = {}


def lookup(nonce: str) -> dict:
    sql = "SELECT status, decision, started_at FROM mcp_sessions_toolcall WHERE tool = 'probe' AND "
    if "sqlite" in WHERE:
        import sqlite3

        db = sqlite3.connect(f"file:{WHERE['sqlite']}?mode=ro", uri=True, timeout=30)
        try:
            rows = db.execute(sql + "json_extract(arguments, '$.nonce') = ?", (nonce,)).fetchall()
        finally:
            db.close()
        rows = [(status, json.loads(decision or "{}"), started) for status, decision, started in rows]
    else:
        import psycopg

        with psycopg.connect(WHERE["postgres"]) as db:
            rows = db.execute(sql + "arguments->>'nonce' = %s", (nonce,)).fetchall()
    found: dict = {"records": len(rows)}
    if rows:
        status, decision, started = rows[0]
        found.update(status=status, effect=(decision or {}).get("effect"), started=started is not None)
    return found


@server.tool(description="Look up this call's own record in the portal's database.")
def probe(nonce: str) -> str:
    return json.dumps(lookup(nonce))


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--sqlite")
    where.add_argument("--postgres")
    args = parser.parse_args()
    WHERE.update({"sqlite": args.sqlite} if args.sqlite else {"postgres": args.postgres})
    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
