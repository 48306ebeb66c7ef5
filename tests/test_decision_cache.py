"""The per-process cache of what decisions read (servers/decisions.py): every change reaches the next
lookup, however it is made, because the database itself bumps the generation number."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from servers import decisions
from servers.models import Membership, PermissionRule, Server, Team, TeamPolicy
from servers.permissions import rules_for, usable_servers
from servers.policy import DENY, decide

pytestmark = pytest.mark.django_db(transaction=True)


def effect_for(server: Server, user) -> str:
    rules = rules_for(server.team_id, user.pk)
    return decide(f"mcp__{server.name}__echo", {"name": "echo"}, rules, server.team.policy.as_defaults()).effect


@pytest.fixture
def policy(acme):
    return TeamPolicy.objects.get_or_create(team=acme)[0]


def test_a_lookup_is_served_from_the_cache_until_something_changes(alice, demo_server, django_assert_num_queries):
    usable_servers(alice)
    rules_for(demo_server.team_id, alice.pk)
    with django_assert_num_queries(2):  # the generation number, once per lookup; no rows read
        assert [s.pk for s in usable_servers(alice)] == [demo_server.pk]
        assert rules_for(demo_server.team_id, alice.pk) == []


def test_every_way_of_changing_a_rule_reaches_the_next_decision(alice, demo_server, policy):
    assert effect_for(demo_server, alice) != DENY
    rule = PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo__echo", effect=DENY)
    assert effect_for(demo_server, alice) == DENY
    PermissionRule.objects.filter(pk=rule.pk).update(effect="allow")  # no signal sent: the trigger still fires
    assert effect_for(demo_server, alice) == "allow"
    with connection.cursor() as cursor:  # SQL typed by hand, as an operator might
        cursor.execute("UPDATE servers_permissionrule SET effect = 'deny' WHERE id = %s", [rule.pk])
    assert effect_for(demo_server, alice) == DENY
    PermissionRule.objects.all().delete()
    assert effect_for(demo_server, alice) != DENY


def test_a_membership_or_a_server_changed_reaches_the_next_lookup(alice, bob, demo_server):
    assert [s.pk for s in usable_servers(bob)] == [demo_server.pk]
    Membership.objects.filter(user=bob).update(role="auditor")  # an auditor uses no server
    assert usable_servers(bob) == []
    Membership.objects.filter(user=bob).update(role="member")
    assert [s.pk for s in usable_servers(bob)] == [demo_server.pk]
    Server.objects.filter(pk=demo_server.pk).update(enabled=False)
    assert usable_servers(bob) == []
    Server.objects.filter(pk=demo_server.pk).update(enabled=True)
    Team.objects.create(name="Elsewhere")
    Membership.objects.filter(user=bob).delete()
    assert usable_servers(bob) == []


def test_a_change_rolled_back_leaves_nothing_behind(alice, demo_server, policy):
    """Inside a transaction nothing is cached: the number it sees counts its own changes, and after
    a rollback the same number comes again for other rows."""
    assert effect_for(demo_server, alice) != DENY
    with pytest.raises(RuntimeError), transaction.atomic():
        PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo__echo", effect=DENY)
        assert effect_for(demo_server, alice) == DENY  # read afresh inside, not cached
        raise RuntimeError("rolled back")
    assert effect_for(demo_server, alice) != DENY
    # A committed change that brings the number to where the rolled-back one had it.
    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo__other", effect=DENY)
    assert effect_for(demo_server, alice) != DENY


def test_without_its_number_the_cache_is_not_used(alice, demo_server, django_assert_num_queries):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT number FROM {decisions.GENERATION_TABLE}")
        [(number,)] = cursor.fetchall()
        cursor.execute(f"DELETE FROM {decisions.GENERATION_TABLE}")
    try:
        usable_servers(alice)
        with django_assert_num_queries(2):  # the number (missing) and the rows, every time
            usable_servers(alice)
    finally:  # a flush between tests leaves this table alone: the later tests need their number
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {decisions.GENERATION_TABLE} (id, number) VALUES (1, %s)", [number + 1])
