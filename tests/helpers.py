"""Small helpers many tests share: a logged-in test client."""

from __future__ import annotations

from django.test import Client


def logged_in(user, **client_options) -> Client:
    """A Django test client with `user` logged in (client_options as for Client, e.g. enforce_csrf_checks)."""
    client = Client(**client_options)
    client.force_login(user)
    return client
