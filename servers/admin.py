from django.contrib import admin

from .models import Membership, Server, Team


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
