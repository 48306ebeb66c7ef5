"""The sweep each worker runs with its heartbeat: calls of a dead worker end, lost tasks are sent again,
and an emptied cache (a Redis restart) is not mistaken for every worker dying."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions import affinity, queue
from sessions.models import CallStatus, ToolCall
from sessions.worker import Sweeper
from tests.faults.conftest import assert_recorded, echo_call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def orphan(alice, demo_server):
    return echo_call(alice, demo_server, status=CallStatus.RUNNING, worker="ghost:1")


def test_the_calls_of_a_dead_worker_end_once_its_heartbeat_has_been_missing_a_while(orphan):
    sweeper = Sweeper("sweeper-test:1")
    affinity.beat(sweeper.name)
    ttl = affinity.heartbeat_ttl()
    assert sweeper.sweep(now=1000.0)["ended"] == 0  # missing once is not dead yet
    assert sweeper.sweep(now=1000.0 + ttl / 2)["ended"] == 0
    assert sweeper.sweep(now=1000.0 + ttl)["ended"] == 1
    call = assert_recorded(str(orphan.pk), CallStatus.FAILED)
    assert call.error_kind == "worker_lost" and "ghost:1" in call.error
    assert sweeper.sweep(now=1000.0 + 2 * ttl)["ended"] == 0  # once


def pending_echo(user, server, message: str, worker: str = "") -> ToolCall:
    """A call queued as do_start_tool_call queues one (allowed), waiting for a worker to claim it."""
    return ToolCall.objects.create(
        user=user,
        server=server,
        server_name=server.name,
        tool="echo",
        arguments={"message": message},
        status=CallStatus.PENDING,
        worker=worker,
        decision={"effect": "allow", "reason": "test"},
    )


def ran_to_success(call: ToolCall) -> ToolCall:
    """Wait (up to a minute) for the suite's worker to run the call; its record, checked."""
    deadline = timezone.now() + timedelta(seconds=60)
    while ToolCall.objects.get(pk=call.pk).status != CallStatus.SUCCEEDED:
        assert timezone.now() < deadline, ToolCall.objects.get(pk=call.pk).status
        time.sleep(0.05)
    return assert_recorded(str(call.pk), CallStatus.SUCCEEDED)


def test_calls_routed_to_a_dead_worker_that_never_claimed_them_are_sent_again(alice, demo_server, worker):
    # Routed to "ghost:2", whose task died in that worker's own queue.
    routed = pending_echo(alice, demo_server, "routed to the dead", worker="ghost:2")
    sweeper = Sweeper("sweeper-unroute:1")
    affinity.beat(sweeper.name)
    ttl = affinity.heartbeat_ttl()
    assert sweeper.sweep(now=1000.0)["resent"] == 0  # missing once is not dead yet
    assert ToolCall.objects.get(pk=routed.pk).worker == "ghost:2"
    assert sweeper.sweep(now=1000.0 + ttl)["resent"] == 1
    assert sweeper.sweep(now=1000.0 + 2 * ttl)["resent"] == 0  # once: it is routed nowhere now
    assert ran_to_success(routed).worker not in ("", "ghost:2")


def test_a_call_handed_to_a_dead_workers_lane_is_sent_again(alice, demo_server, worker):
    """The warm calls' short way (sessions/worker/lane.py) loses nothing either: handed to a worker
    that died holding the session (its Redis list, or its queue, with nobody to pop it), the call
    waits, recorded and routed, until the sweep sends it to the shared queue."""
    routed = pending_echo(alice, demo_server, "handed to the dead", worker="ghost:3")
    queue.start_call(str(routed.pk), "ghost:3")
    sweeper = Sweeper("sweeper-lane:1")
    affinity.beat(sweeper.name)
    ttl = affinity.heartbeat_ttl()
    assert sweeper.sweep(now=1000.0)["resent"] == 0
    assert ToolCall.objects.get(pk=routed.pk).status == CallStatus.PENDING  # nobody took it
    assert sweeper.sweep(now=1000.0 + ttl)["resent"] == 1
    assert ran_to_success(routed).worker not in ("", "ghost:3")


def test_nothing_is_judged_while_the_sweeper_cannot_see_its_own_heartbeat(orphan):
    sweeper = Sweeper("sweeper-blind:1")
    affinity.stop(sweeper.name)  # as after a Redis restart, before the heartbeats come back
    assert sweeper.sweep(now=0.0)["ended"] == 0
    assert sweeper.sweep(now=1e6)["ended"] == 0
    assert ToolCall.objects.get(pk=orphan.pk).status == CallStatus.RUNNING
    orphan.status = CallStatus.FAILED  # leave nothing running for the suite's own sweeper
    orphan.save()


def test_a_call_whose_task_was_lost_is_sent_again(alice, demo_server, worker, settings):
    settings.PORTAL_PENDING_RESEND_SECONDS = 30
    lost = pending_echo(alice, demo_server, "found again")
    ToolCall.objects.filter(pk=lost.pk).update(created_at=timezone.now() - timedelta(seconds=60))
    sweeper = Sweeper("sweeper-resend:1")
    affinity.beat(sweeper.name)
    assert sweeper.sweep(now=0.0)["resent"] == 1
    assert sweeper.sweep(now=1.0)["resent"] == 0  # not again at once
    ran_to_success(lost)


def test_an_approval_whose_expiry_task_was_lost_ends_when_overdue(alice, demo_server):
    from sessions.models import Approval, ApprovalState

    call = ToolCall.objects.create(
        user=alice,
        server=demo_server,
        server_name=demo_server.name,
        tool="write_note",
        status=CallStatus.AWAITING_APPROVAL,
        decision={"effect": "ask", "reason": "test"},
    )
    approval = Approval.objects.create(
        call=call, user=alice, fingerprint="f", decision={"effect": "ask"}, expires_at=timezone.now() - timedelta(1)
    )
    sweeper = Sweeper("sweeper-expire:1")
    affinity.beat(sweeper.name)
    assert sweeper.sweep(now=0.0)["expired"] == 1
    assert Approval.objects.get(pk=approval.pk).state == ApprovalState.EXPIRED
    ended = assert_recorded(str(call.pk), CallStatus.TIMED_OUT)
    assert ended.error_kind == "approval_timeout"
