from django.contrib import admin

from .models import Invitation, Membership, Server, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    inlines = [MembershipInline]
    list_display = ["name", "created_at"]


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "transport", "enabled", "updated_at"]
    list_filter = ["transport", "enabled", "team"]
    search_fields = ["name", "command", "url"]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    # Read-only: invitations are made on the Teams page, which alone shows the link (its token is not stored).
    list_display = ["email", "team", "role", "state", "invited_by", "created_at", "expires_at"]
    list_filter = ["team", "role"]
    search_fields = ["email"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
