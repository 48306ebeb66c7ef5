"""Re-encrypt every stored credential under the current key, online and idempotently.

Row by row, each in its own short transaction, with a compare-and-set on the old
ciphertext: a token refreshed meanwhile was already sealed with the current key and is
left alone. Rows under the current key are skipped, so running it twice does nothing
the second time. Rows that fail to decrypt are reported and left as they are.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from servers.credentials.crypto import CredentialUnreadable, key_id_of
from servers.credentials.models import ENCRYPTED_FIELDS


class Command(BaseCommand):
    help = "Re-encrypt every stored credential under the current key (the first in PORTAL_ENCRYPTION_KEYS)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count what would change; write nothing.")

    def handle(self, *args: Any, dry_run: bool = False, **options: Any) -> None:
        keyring = settings.PORTAL_KEYRING
        current = keyring.current
        totals = {"resealed": 0, "current": 0, "unreadable": 0, "changed_meanwhile": 0}
        for model, field, key_field in ENCRYPTED_FIELDS:
            stale = model.objects.exclude(**{key_field: current}).exclude(**{field: ""})
            totals["current"] += model.objects.filter(**{key_field: current}).count()
            for pk in stale.values_list("pk", flat=True).iterator():
                outcome = self._reseal(model, pk, field, key_field, dry_run)
                totals[outcome] += 1
        verb = "would re-encrypt" if dry_run else "re-encrypted"
        self.stdout.write(
            f"{verb} {totals['resealed']} value(s) under key {current}; "
            f"{totals['current']} already under it; {totals['changed_meanwhile']} changed meanwhile; "
            f"{totals['unreadable']} unreadable"
        )
        if totals["unreadable"]:
            raise CommandError(
                f"{totals['unreadable']} value(s) could not be decrypted with the configured keys "
                "(a key is missing from PORTAL_ENCRYPTION_KEYS, or the rows were tampered with); "
                "they were left as they are, and their owners must connect again."
            )

    def _reseal(self, model: Any, pk: Any, field: str, key_field: str, dry_run: bool) -> str:
        keyring = settings.PORTAL_KEYRING
        row = model.objects.filter(pk=pk).first()
        if row is None:
            return "changed_meanwhile"
        old = getattr(row, field)
        try:
            new = keyring.reseal(old, row.context)
        except CredentialUnreadable as exc:
            self.stderr.write(f"{model.__name__} {pk}: {exc}")
            return "unreadable"
        if dry_run:
            return "resealed"
        with transaction.atomic():
            updated = model.objects.filter(pk=pk, **{field: old}).update(**{field: new, key_field: key_id_of(new)})
        return "resealed" if updated else "changed_meanwhile"
