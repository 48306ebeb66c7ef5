from django.urls import path

from . import views

urlpatterns = [
    path("", views.server_list, name="server_list"),
    path("add/", views.server_add, name="server_add"),
    path("import/", views.server_import, name="server_import"),
    path("export/", views.server_export, name="server_export"),
    path("<int:server_id>/", views.server_detail, name="server_detail"),
    path("<int:server_id>/edit/", views.server_edit, name="server_edit"),
    path("<int:server_id>/toggle/", views.server_toggle, name="server_toggle"),
    path("<int:server_id>/delete/", views.server_delete, name="server_delete"),
    path("<int:server_id>/pin/", views.tool_pin, name="tool_pin"),
    path("<int:server_id>/hooks/", views.elicitation_hooks, name="elicitation_hooks"),
    path("hooks/<int:hook_id>/delete/", views.elicitation_hook_delete, name="elicitation_hook_delete"),
    path("rules/", views.my_rules, name="my_rules"),
    path("rules/<int:rule_id>/delete/", views.rule_delete, name="rule_delete"),
    path("teams/<int:team_id>/policy/", views.team_policy, name="team_policy"),
]
