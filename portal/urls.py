from django.contrib import admin
from django.urls import include, path

from portal import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/", include("allauth.urls")),
    # Before the admin's own URLs, so its login form (no rate limit) is never served.
    path("admin/login/", views.admin_login, name="admin_login"),
    path("admin/", admin.site.urls),
    path("servers/", include("servers.urls")),
    path("teams/", include("servers.team_urls")),
    path("", include("servers.credentials.urls")),
    path("", include("sessions.urls")),
    path("", include("portal.oauth_urls")),
]
