"""The playground's Resources and Prompts tabs: pages that list only the user's enabled servers."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from servers.models import Server

pytestmark = pytest.mark.django_db


def catalog_of(response) -> list[dict]:
    match = re.search(r'<script id="catalog" type="application/json">(.*?)</script>', response.content.decode())
    return json.loads(match.group(1))


@pytest.mark.parametrize(
    ("path", "tab"), [("/playground/resources/", "Resources"), ("/playground/prompts/", "Prompts")]
)
def test_each_tab_offers_only_the_users_enabled_servers(path, tab, alice, bob, carol, demo_server):
    Server.objects.create(team=demo_server.team, name="off", command="true", enabled=False)
    Server.objects.create(team=carol.memberships.get().team, name="globex", command="true")
    for user, expected in ((bob, ["demo"]), (carol, ["globex"])):
        client = Client()
        client.force_login(user)
        response = client.get(f"{path}?server={demo_server.pk}")
        assert response.status_code == 200
        assert [s["name"] for s in catalog_of(response)] == expected
        assert f'aria-current="page">{tab}</a>' in response.content.decode()
    assert Client().get(path).status_code == 302  # anonymous: to the login page


def test_the_tabs_keep_the_chosen_server(alice, demo_server):
    client = Client()
    client.force_login(alice)
    page = client.get(f"/playground/prompts/?server={demo_server.pk}").content.decode()
    assert f'href="/playground/resources/?server={demo_server.pk}"' in page
    assert f'href="/playground/?server={demo_server.pk}"' in page
