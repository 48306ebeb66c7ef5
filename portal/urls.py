from django.contrib import admin
from django.urls import include, path

from portal import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/", include("allauth.urls")),
    path("admin/", admin.site.urls),
    path("servers/", include("servers.urls")),
    path("", include("servers.credential_urls")),
    path("", include("sessions.urls")),
]
