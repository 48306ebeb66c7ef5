"""A call a worker has claimed always ends, whatever breaks before its server is asked: nothing else
ends a claimed call while its worker lives (the sweep ends only the calls of workers that died).

The soak found the window: a PostgreSQL restart (or a Redis one) between the claim and the
connection's credentials left the call `running` for good. The worker's own steps run here, in
this process, with the database cut the way a restart cuts it (the edge the worker does not own).
"""

from __future__ import annotations

import pytest
from django.db import OperationalError

from sessions.credentials import Prepared
from sessions.mcp.pool import CallOutcome
from sessions.models import CallStatus, ToolCall
from sessions.worker import tool_call
from tests.faults.conftest import assert_recorded, echo_call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pending(alice, demo_server):
    return echo_call(alice, demo_server)


@pytest.fixture
def breaks(monkeypatch):
    """Preparing the connection raises each of `faults` in turn, then works as it does."""
    faults: list[Exception] = []
    real = tool_call.credentials.prepare

    def prepare(*args, **kwargs):
        if faults:
            raise faults.pop(0)
        return real(*args, **kwargs)

    monkeypatch.setattr(tool_call.credentials, "prepare", prepare)
    monkeypatch.setattr(tool_call.time, "sleep", lambda seconds: None)  # the pause between attempts
    return faults


def test_a_database_restart_after_the_claim_is_waited_out(pending, breaks):
    breaks += [OperationalError("server closed the connection unexpectedly")] * 2
    call, prepared = tool_call._claim(str(pending.id), "a-channel")
    assert isinstance(prepared, Prepared), prepared
    assert not breaks, "tried again until the database answered"
    assert ToolCall.objects.get(pk=pending.id).status == CallStatus.RUNNING


def test_anything_else_that_breaks_after_the_claim_ends_the_call_failed(pending, breaks):
    breaks.append(ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."))
    call, prepared = tool_call._claim(str(pending.id), "a-channel")
    assert isinstance(prepared, CallOutcome) and prepared.status == CallStatus.FAILED
    tool_call._end(str(pending.id), call, prepared, prepared, [], None)
    ended = assert_recorded(str(pending.id), CallStatus.FAILED)
    assert ended.error_kind == "internal"
    assert (
        ended.error == "The worker failed: ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused."
    )


def test_the_end_is_written_through_a_restart_and_a_refused_outcome_ends_the_call_unstorable(
    pending, breaks, monkeypatch
):
    """The end's write waits out a cut connection with the real outcome; a value the database
    refuses (what a NUL once was for PostgreSQL) ends the call `unstorable`, saying so."""
    from django.db import DataError

    from sessions import actions

    refusals = [OperationalError("the connection is closed"), DataError("unsupported Unicode escape sequence")]
    real = actions.do_finish_tool_call

    def finish(*args, **kwargs):
        if refusals:
            raise refusals.pop(0)
        return real(*args, **kwargs)

    monkeypatch.setattr(tool_call.actions, "do_finish_tool_call", finish)
    call, prepared = tool_call._claim(str(pending.id), "a-channel")
    outcome = CallOutcome(CallStatus.SUCCEEDED, result={"content": [{"type": "text", "text": "m"}]})
    tool_call._end(str(pending.id), call, outcome, outcome, [], None)
    ended = assert_recorded(str(pending.id), CallStatus.FAILED)
    assert not refusals
    assert (ended.error_kind, ended.error) == (
        "unstorable",
        "The call ended (succeeded) but its outcome could not be stored: DataError.",
    )
