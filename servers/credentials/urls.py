from django.urls import path

from . import views

urlpatterns = [
    path("credentials/", views.my_credentials, name="my_credentials"),
    path("credentials/tokens/", views.token_health, name="token_health"),
    path("credentials/<int:server_id>/secret/", views.set_secret, name="set_secret"),
    path("credentials/revoke/<int:credential_id>/", views.revoke_credential, name="revoke_credential"),
    path("credentials/<int:server_id>/connect/", views.oauth_connect, name="oauth_connect"),
    path("oauth/callback", views.oauth_callback, name="oauth_callback"),
    path("servers/<int:server_id>/oauth/", views.oauth_settings, name="server_oauth_settings"),
    path("oauth/client-metadata.json", views.client_metadata, name="oauth_client_metadata"),
]
