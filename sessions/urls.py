from django.urls import path

from . import views

urlpatterns = [
    path("playground/", views.playground, name="playground"),
    path("calls/", views.call_list, name="call_list"),
    path("calls/<uuid:call_id>/", views.call_detail, name="call_detail"),
    path("calls/<uuid:call_id>/full-output", views.call_full_output, name="call_full_output"),
]
