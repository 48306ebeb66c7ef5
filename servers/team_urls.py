from django.urls import path

from . import team_views as views

urlpatterns = [
    path("", views.team_list, name="team_list"),
    path("<int:team_id>/", views.team_detail, name="team_detail"),
    path("<int:team_id>/invite/", views.team_invite, name="team_invite"),
    path("<int:team_id>/rename/", views.team_rename, name="team_rename"),
    path("<int:team_id>/delete/", views.team_delete, name="team_delete"),
    path("<int:team_id>/leave/", views.team_leave, name="team_leave"),
    path("invitations/<int:invitation_id>/revoke/", views.invitation_revoke, name="invitation_revoke"),
    path("members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path("join/<str:token>/", views.invitation_accept, name="invitation_accept"),
]
