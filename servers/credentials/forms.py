"""Forms for credentials: a secret's value is write-only (never rendered back)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from django import forms
from django.core.exceptions import ValidationError

from sessions.mcp.secrets import SECRET_NAME

from .models import ServerOAuth


class SecretForm(forms.Form):
    name = forms.CharField(max_length=100)
    value = forms.CharField(max_length=10_000, strip=False, widget=forms.PasswordInput(render_value=False))
    for_team = forms.BooleanField(required=False, label="For the whole team")

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not SECRET_NAME.match(name):
            raise ValidationError("A secret's name is letters, digits, _ . or -, starting with a letter or _.")
        return name


class OAuthSettingsForm(forms.ModelForm):
    client_secret = forms.CharField(
        label="Pre-registered client secret",
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted. Leave empty to keep the current one.",
    )
    clear_client_secret = forms.BooleanField(required=False, label="Remove the stored client secret")

    class Meta:
        model = ServerOAuth
        fields = ["enabled", "client_id", "token_endpoint_auth_method", "metadata_url", "scope"]

    def clean_metadata_url(self) -> str:
        url = self.cleaned_data["metadata_url"].strip()
        # As in Claude Code: a configured metadata URL bypasses discovery, so it must come over TLS.
        if url and urlparse(url).scheme != "https":
            raise ValidationError("The authorization server metadata URL must be https://.")
        return url

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("client_secret") and not data.get("client_id"):
            self.add_error("client_id", "A client secret needs its client ID.")
        return data
