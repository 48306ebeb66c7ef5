"""The form that makes a personal access token: a name, the servers it is limited to, its lifetime."""

from __future__ import annotations

from typing import Any

from django import forms

from servers.models import Server


class AccessTokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="Where it is used, so you can tell your tokens apart: “laptop Claude Code”, “CI”.",
    )
    servers = forms.ModelMultipleChoiceField(
        queryset=Server.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Limit to these servers",
        help_text="None ticked: every server you may use, now and later.",
        error_messages={"invalid_choice": "You cannot use that server, so a token of yours cannot either."},
    )
    expires_days = forms.IntegerField(
        min_value=1,
        max_value=3650,
        required=False,
        label="Expires after (days)",
        help_text="1 to 3650; empty: never (revoke it when you no longer need it).",
    )

    def __init__(self, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only servers the person may call: an id of another team's server is not a valid choice.
        self.fields["servers"].queryset = Server.objects.usable_by(user).select_related("team").order_by("name")
        self.fields["servers"].label_from_instance = lambda server: f"{server.name} ({server.team.name})"
