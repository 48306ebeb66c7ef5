from typing import Any

from django.contrib import admin

from .models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only, in the admin as everywhere else."""

    list_display = ["at", "kind", "username", "server_name", "tool", "decision", "outcome"]
    list_filter = ["kind", "decision", "outcome"]
    search_fields = ["username", "server_name", "tool"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
