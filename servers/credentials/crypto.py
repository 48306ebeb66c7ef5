"""Authenticated encryption of credentials at rest (no Django here: settings load it too).

Every ciphertext is an envelope `v1:<key id>:<base64url(nonce | AES-256-GCM ciphertext and tag)>`.
The key id says which key sealed it, so keys can rotate online: new values are sealed
with the current key (the first one configured) while older keys still open old ones.
Each value is also bound to where it lives (its "context", passed as associated data):
a ciphertext copied into another user's row fails to open instead of being used.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION = "v1"
KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
NONCE_BYTES = 12


class KeyConfigError(ValueError):
    """The configured keys cannot be used; the message says what to fix (never the key)."""


class CredentialUnreadable(Exception):
    """A stored value failed to decrypt: tampered, sealed for another row, or under a missing key."""

    def __init__(self, reason: str):
        super().__init__(f"credential unreadable, connect again ({reason})")
        self.reason = reason


@dataclass(frozen=True)
class Keyring:
    """Keys by id; `current` seals, every key opens."""

    keys: dict[str, bytes]
    current: str

    def encrypt(self, plaintext: str, context: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.keys[self.current]).encrypt(nonce, plaintext.encode(), _aad(self.current, context))
        return f"{VERSION}:{self.current}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def decrypt(self, envelope: str, context: str) -> str:
        version, kid, body = _split(envelope)
        if version != VERSION:
            raise CredentialUnreadable(f"unknown envelope version {version!r}")
        key = self.keys.get(kid)
        if key is None:
            raise CredentialUnreadable(f"sealed with key {kid!r}, which is not configured")
        try:
            raw = base64.urlsafe_b64decode(body.encode())
        except (binascii.Error, ValueError):
            raise CredentialUnreadable("damaged ciphertext") from None
        if len(raw) <= NONCE_BYTES:
            raise CredentialUnreadable("damaged ciphertext")
        try:
            return AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(kid, context)).decode()
        except InvalidTag:
            raise CredentialUnreadable("it does not authenticate: tampered with, or copied from elsewhere") from None

    def reseal(self, envelope: str, context: str) -> str:
        """The same value under the current key (what rotation does to each row)."""
        return self.encrypt(self.decrypt(envelope, context), context)


def key_id_of(envelope: str) -> str:
    return _split(envelope)[1]


def _split(envelope: str) -> tuple[str, str, str]:
    parts = envelope.split(":", 2) if isinstance(envelope, str) else []
    if len(parts) != 3:
        raise CredentialUnreadable("not an encrypted value")
    return parts[0], parts[1], parts[2]


def _aad(kid: str, context: str) -> bytes:
    # The version and key id are authenticated too, so an envelope cannot be relabelled.
    return f"{VERSION}:{kid}|{context}".encode()


def generate_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def new_key_line() -> str:
    """A fresh `kid:key` entry; the id carries the date so operators can tell keys apart."""
    return f"k{time.strftime('%Y%m%d')}{secrets.token_hex(2)}:{generate_key()}"


def parse_keys(text: str) -> Keyring:
    """Parse "kid:base64key" entries, comma- or newline-separated; the first is current."""
    keys: dict[str, bytes] = {}
    order: list[str] = []
    for number, entry in enumerate(re.split(r"[,\n]", text), start=1):
        entry = entry.strip()
        if not entry or entry.startswith("#"):
            continue
        kid, sep, encoded = entry.partition(":")
        kid = kid.strip()
        if not sep or not KEY_ID.match(kid):
            raise KeyConfigError(f"entry {number}: write each key as <id>:<base64 key>, the id 1-32 of A-Z a-z 0-9 _ -")
        try:
            normalized = _pad(encoded.strip().replace("+", "-").replace("/", "_"))
            key = base64.b64decode(normalized, altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            raise KeyConfigError(f"key {kid!r} is not valid base64") from None
        if len(key) != 32:
            raise KeyConfigError(f"key {kid!r} must decode to 32 bytes (it has {len(key)})")
        if kid in keys:
            raise KeyConfigError(f"key id {kid!r} appears twice")
        keys[kid] = key
        order.append(kid)
    if not order:
        raise KeyConfigError("no keys given")
    return Keyring(keys=keys, current=order[0])


def _pad(text: str) -> str:
    return text + "=" * (-len(text) % 4)


def load_keyring(embedded: bool, var_dir: Path) -> Keyring:
    """Keys from PORTAL_ENCRYPTION_KEYS or PORTAL_ENCRYPTION_KEYS_FILE.

    The distributed mode refuses to start without them: every process must share the
    same keys, so none may invent its own. The embedded mode generates one into
    var/encryption_keys (mode 0600) the first time, and says so.
    """
    text = os.environ.get("PORTAL_ENCRYPTION_KEYS", "")
    path = os.environ.get("PORTAL_ENCRYPTION_KEYS_FILE", "")
    if not text and path:
        text = Path(path).read_text()
    if text:
        return parse_keys(text)
    if not embedded:
        raise KeyConfigError(
            "The distributed mode needs PORTAL_ENCRYPTION_KEYS (or PORTAL_ENCRYPTION_KEYS_FILE): "
            "comma-separated <id>:<base64 32-byte key>, the current key first. "
            "Make one with: python -c 'from servers.credentials.crypto import new_key_line; print(new_key_line())'"
        )
    generated = var_dir / "encryption_keys"
    if not generated.exists():
        try:
            fd = os.open(generated, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process of this portal wrote it first
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(new_key_line() + "\n")
            sys.stderr.write(
                f"MCP Portal: generated an encryption key for stored credentials in {generated} (mode 0600). "
                "Back it up with the database: without it, stored credentials cannot be read.\n"
            )
    return parse_keys(generated.read_text())
