from django.urls import path

from . import agent_views, approval_views, views

urlpatterns = [
    path("playground/", views.playground, name="playground"),
    path("playground/resources/", views.playground_resources, name="playground_resources"),
    path("playground/prompts/", views.playground_prompts, name="playground_prompts"),
    path("calls/", views.call_list, name="call_list"),
    path("calls/export.json", views.call_list_export, name="call_list_export"),
    path("calls/<uuid:call_id>/", views.call_detail, name="call_detail"),
    path("calls/<uuid:call_id>/full-output", views.call_full_output, name="call_full_output"),
    path("calls/<uuid:call_id>/export.json", views.call_export, name="call_export"),
    path("tasks/", views.task_list, name="tasks"),
    path("approvals/", approval_views.approvals, name="approvals"),
    path("approvals/answer", approval_views.answer_approvals, name="answer_approvals"),
    path("audit/", views.audit_log, name="audit_log"),
    path("agents/", agent_views.connect_agent, name="connect_agent"),
    path("agents/tokens/<int:token_id>/revoke/", agent_views.revoke_token, name="revoke_access_token"),
]
