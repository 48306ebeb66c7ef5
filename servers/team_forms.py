"""Forms of the team pages: a team's name, an invitation, a role."""

from __future__ import annotations

from django import forms

from .models import Role


class TeamNameForm(forms.Form):
    name = forms.CharField(max_length=100, label="Team name")


class InviteForm(forms.Form):
    email = forms.EmailField(
        label="Email address", help_text="The link is mailed here, and only this address can use it."
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
