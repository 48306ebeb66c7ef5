"""Credentials at rest: authenticated, versioned, bound to their row, rotated online."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from servers.credentials.crypto import CredentialUnreadable, KeyConfigError, generate_key, parse_keys
from servers.credentials.models import Credential, CredentialKind, ServerOAuth
from tests.conftest import ROOT

KEY_A = f"a:{generate_key()}"
KEY_B = f"b:{generate_key()}"


def test_it_round_trips_and_names_the_key():
    ring = parse_keys(KEY_A)
    sealed = ring.encrypt("sk-live-123", "ctx")
    assert sealed.startswith("v1:a:") and "sk-live-123" not in sealed
    assert ring.decrypt(sealed, "ctx") == "sk-live-123"
    # Same value, fresh nonce: equal secrets do not look equal at rest.
    assert ring.encrypt("sk-live-123", "ctx") != sealed


@pytest.mark.parametrize(
    "damage",
    [
        lambda s: s[:-3] + ("A" if s[-3] != "A" else "B") + s[-2:],  # a flipped byte
        lambda s: s.replace("v1:a:", "v1:b:"),  # relabelled key id
        lambda s: s.replace("v1:", "v9:"),  # unknown version
        lambda s: "plaintext-token",  # not an envelope at all: never used as plaintext
    ],
)
def test_a_damaged_value_is_an_error_never_plaintext(damage):
    ring = parse_keys(f"{KEY_A},{KEY_B}")
    sealed = ring.encrypt("sk-live-123", "ctx")
    with pytest.raises(CredentialUnreadable, match="credential unreadable, connect again"):
        ring.decrypt(damage(sealed), "ctx")


def test_a_value_moved_to_another_row_does_not_open():
    ring = parse_keys(KEY_A)
    with pytest.raises(CredentialUnreadable, match="copied from elsewhere"):
        ring.decrypt(ring.encrypt("alice's token", "credential:1:user:1:oauth:"), "credential:1:user:2:oauth:")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no keys"),
        ("nokey", "<id>:<base64 key>"),
        ("a:c2hvcnQ=", "32 bytes"),
        ("a:!!!", "base64"),
        (f"{KEY_A},{KEY_A}", "twice"),
    ],
)
def test_bad_key_configuration_says_what_to_fix(text, message):
    with pytest.raises(KeyConfigError, match=message):
        parse_keys(text)


def _settings_process(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_ENCRYPTION", "DATABASE_URL", "REDIS_URL"))
    }
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_distributed_mode_refuses_to_start_without_keys(tmp_path):
    done = _settings_process(
        {
            "DATABASE_URL": "postgres://x@127.0.0.1/x",
            "REDIS_URL": "redis://127.0.0.1/0",
            "DJANGO_SECRET_KEY": "x",
            "PORTAL_VAR_DIR": str(tmp_path),
        }
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "PORTAL_ENCRYPTION_KEYS" in done.stderr
    assert not (tmp_path / "encryption_keys").exists()


def test_the_embedded_mode_generates_a_private_key_and_says_so(tmp_path):
    first = _settings_process({"PORTAL_VAR_DIR": str(tmp_path)})
    assert first.returncode == 0, first.stderr
    path = tmp_path / "encryption_keys"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "generated an encryption key" in first.stderr and str(path) in first.stderr
    key = path.read_text()
    second = _settings_process({"PORTAL_VAR_DIR": str(tmp_path)})
    assert second.returncode == 0 and "generated" not in second.stderr
    assert path.read_text() == key  # kept, not regenerated


def test_keys_come_from_a_file_too(tmp_path):
    keyfile = tmp_path / "keys"
    keyfile.write_text(KEY_B + "\n" + KEY_A + "\n")
    done = _settings_process(
        {
            "DATABASE_URL": "postgres://x@127.0.0.1/x",
            "REDIS_URL": "redis://127.0.0.1/0",
            "DJANGO_SECRET_KEY": "x",
            "PORTAL_VAR_DIR": str(tmp_path),
            "PORTAL_ENCRYPTION_KEYS_FILE": str(keyfile),
        }
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def secrets_under_a(settings, alice, bob, demo_server):
    settings.PORTAL_KEYRING = parse_keys(KEY_A)
    rows = []
    for user, value in ((alice, "alice-key-1234"), (bob, "bob-key-5678")):
        row = Credential(server=demo_server, user=user, kind=CredentialKind.SECRET, name="API_KEY")
        row.seal(value)
        row.save()
        rows.append(row)
    oauth = ServerOAuth(server=demo_server, client_id="portal")
    oauth.set_client_secret("client-secret-999")
    oauth.save()
    return rows


def test_rotation_moves_every_value_to_the_new_key(settings, secrets_under_a, capsys):
    settings.PORTAL_KEYRING = parse_keys(f"{KEY_B},{KEY_A}")

    call_command("rotate_keys", "--dry-run")
    assert "would re-encrypt 3 value(s) under key b" in capsys.readouterr().out
    assert set(Credential.objects.values_list("key_id", flat=True)) == {"a"}

    call_command("rotate_keys")
    assert "re-encrypted 3 value(s) under key b" in capsys.readouterr().out
    assert set(Credential.objects.values_list("key_id", flat=True)) == {"b"}
    assert ServerOAuth.objects.get().client_secret_key_id == "b"

    call_command("rotate_keys")  # idempotent
    assert "re-encrypted 0 value(s) under key b; 3 already under it" in capsys.readouterr().out

    # The old key can now be dropped: everything opens with the new one alone.
    settings.PORTAL_KEYRING = parse_keys(KEY_B)
    assert sorted(row.open() for row in Credential.objects.all()) == ["alice-key-1234", "bob-key-5678"]
    assert ServerOAuth.objects.get().client_secret() == "client-secret-999"


def test_rotation_reports_unreadable_rows_and_leaves_them(settings, secrets_under_a, capsys):
    tampered = secrets_under_a[0]
    Credential.objects.filter(pk=tampered.pk).update(ciphertext=secrets_under_a[1].ciphertext)
    settings.PORTAL_KEYRING = parse_keys(f"{KEY_B},{KEY_A}")
    with pytest.raises(CommandError, match="1 value"):
        call_command("rotate_keys")
    assert "credential unreadable" in capsys.readouterr().err
    tampered.refresh_from_db()
    assert tampered.key_id == "a"
    with pytest.raises(CredentialUnreadable):
        tampered.open()
