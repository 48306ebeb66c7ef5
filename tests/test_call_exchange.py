"""The raw JSON-RPC view's bounds (sessions/mcp/wire.py): how many messages, how large each, and the
call's answer kept once (it is the recorded result)."""

from __future__ import annotations

from mcp.types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from sessions.mcp.wire import MAX_MESSAGES, RESULT_REF, Exchange


def test_it_keeps_a_bounded_number_of_messages_each_of_bounded_size():
    exchange = Exchange()
    exchange.call_id = 7
    exchange.add("sent", JSONRPCRequest(jsonrpc="2.0", id=7, method="tools/call", params={"name": "flood"}))
    big = {"level": "info", "data": "x" * 100_000}
    exchange.add("received", JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params=big))
    for index in range(300):
        params = {"progressToken": 7, "progress": index}
        exchange.add("received", JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params=params))
    exchange.add(
        "received", JSONRPCResponse(jsonrpc="2.0", id=7, result={"content": [{"type": "text", "text": "y" * 10**6}]})
    )

    shown = exchange.as_list()
    # The first 200 messages, the call's answer (always kept), and how many were left out.
    assert len(shown) == MAX_MESSAGES + 2 and shown[-1]["message"] == {"omitted": 102}
    assert shown[0]["message"]["method"] == "tools/call" and shown[0]["at_ms"] >= 0
    assert shown[1]["message"] == {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "omitted": "100094 characters, more than the portal keeps of one message",
    }
    assert shown[-2]["message"] == {"jsonrpc": "2.0", "id": 7, "result": RESULT_REF}


def test_the_calls_answer_stands_for_the_recorded_result():
    exchange = Exchange()
    exchange.add("sent", JSONRPCRequest(jsonrpc="2.0", id=3, method="tools/call", params={"name": "echo"}))
    exchange.call_id = 3
    exchange.add("received", JSONRPCResponse(jsonrpc="2.0", id=3, result={"content": []}))
    assert exchange.as_list()[-1]["message"] == {"jsonrpc": "2.0", "id": 3, "result": RESULT_REF}
