"""The server registration form: what a team admin types, checked with messages they can act on."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from sessions.mcp.naming import VALID_NAME, normalize_name
from sessions.mcp.variables import REFERENCE, not_available, references, unavailable

from .mcp_json import MAX_BYTES as MAX_IMPORT_BYTES
from .models import (
    LOG_LEVEL_CHOICES,
    REMOTE_TRANSPORTS,
    Effect,
    HookAction,
    ProtocolSetting,
    Server,
    Team,
    TeamPolicy,
    TransportKind,
)
from .outbound import address_error, command_error, env_error
from .policy import is_valid_pattern

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
URL_SCHEMES = {
    TransportKind.HTTP: ("http", "https"),
    TransportKind.SSE: ("http", "https"),
    TransportKind.WEBSOCKET: ("ws", "wss"),
}
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def instance_line(server: Server) -> tuple[str, list[str], str]:
    return server.command.strip(), list(server.args), server.cwd or ""


def parse_pairs(text: str, separator: str, name_pattern: re.Pattern[str], what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if separator not in line:
            raise ValidationError(f"Line {number}: write each {what} as NAME{separator}value.")
        name, value = line.split(separator, 1)
        name = name.strip()
        if not name_pattern.match(name):
            raise ValidationError(f"Line {number}: {name!r} is not a valid {what} name.")
        pairs[name] = value.strip() if separator == ":" else value
    return pairs


def format_pairs(pairs: dict[str, str], separator: str) -> str:
    joiner = f"{separator} " if separator == ":" else separator
    return "\n".join(f"{name}{joiner}{value}" for name, value in pairs.items())


class ServerForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(
        max_length=64,
        help_text='Letters, digits, _ and -; any other character becomes _ ("my server" is my_server), and '
        "the name must stay unique that way, in any case. Tools appear as mcp__<name>__<tool>.",
    )
    description = forms.CharField(max_length=300, required=False)
    transport = forms.ChoiceField(choices=TransportKind.choices, widget=forms.RadioSelect)
    command = forms.CharField(
        max_length=500,
        required=False,
        help_text="For stdio: the executable, e.g. npx or /usr/bin/python3. Team admins choose among the "
        "commands the operator allows.",
    )
    args = forms.CharField(
        label="Arguments", required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text="One argument per line."
    )
    env = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One NAME=value per line.",
    )
    cwd = forms.CharField(label="Working directory", max_length=500, required=False)
    network = forms.BooleanField(
        label="Network access",
        required=False,
        initial=True,
        help_text="The server runs in a sandbox; off, it reaches no network at all (not even the host's).",
    )
    url = forms.CharField(
        label="URL",
        max_length=500,
        required=False,
        help_text="The MCP endpoint: https://example.com/mcp (Streamable HTTP), https://example.com/sse (SSE), "
        "wss://example.com/mcp (WebSocket). ${secret:NAME} is each person's own value; ${VAR} and "
        "${VAR:-default} read only the variables the operator exposes to servers.",
    )
    headers = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text="One Header-Name: value per line."
    )
    request_timeout = forms.FloatField(
        label="Request timeout (seconds)",
        min_value=1,
        max_value=3600,
        initial=60,
        help_text="How long one request may take before the call ends as timed out.",
    )
    reset_timeout_on_progress = forms.BooleanField(
        label="Progress restarts the timeout",
        required=False,
        help_text="A tool that keeps reporting progress is not cut off while it does.",
    )
    log_level = forms.ChoiceField(
        label="Server log level",
        choices=LOG_LEVEL_CHOICES,
        initial="info",
        required=False,
        help_text="The server's log messages at this level or above are shown with each call.",
    )
    elicitation_timeout = forms.FloatField(
        label="Time to answer a form (seconds)",
        min_value=1,
        max_value=86_400,
        required=False,
        help_text="How long a person has to answer the server's questions (elicitation) before it hears "
        "'cancel'. Empty: the portal's default.",
    )
    roots = forms.CharField(
        label="Roots",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="The folders the server may work in, one file:// URI per line; the server asks for them "
        "with roots/list.",
    )
    protocol = forms.ChoiceField(
        label="Protocol era",
        choices=ProtocolSetting.choices,
        initial=ProtocolSetting.AUTO,
        required=False,
        help_text="Auto remembers what the server answered, so only the first connect pays for the probe.",
    )
    shared = forms.BooleanField(
        label="Shared session",
        required=False,
        help_text="One session for the whole team. Leave off when the server keeps per-user state or credentials.",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, teams: Any, instance: Server | None = None, operator: bool = False, **kwargs: Any):
        self.instance = instance
        # An operator (a superuser) may start any command; a team admin only what the operator allows.
        self.operator = operator
        if instance is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "team": instance.team_id,
                "name": instance.name,
                "description": instance.description,
                "transport": instance.transport,
                "command": instance.command,
                "args": "\n".join(instance.args),
                "env": format_pairs(instance.env, "="),
                "cwd": instance.cwd,
                "network": instance.network,
                "url": instance.url,
                "headers": format_pairs(instance.headers, ":"),
                "request_timeout": instance.request_timeout,
                "reset_timeout_on_progress": instance.reset_timeout_on_progress,
                "log_level": instance.log_level,
                "elicitation_timeout": instance.elicitation_timeout,
                "roots": "\n".join(instance.roots),
                "protocol": instance.protocol,
                "shared": instance.shared,
                "enabled": instance.enabled,
            }
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        if instance is None and teams.count() == 1:
            self.fields["team"].initial = teams.first()
        if instance is not None:
            # Moving a server between teams would hand its history to another team.
            self.fields["team"].disabled = True

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not VALID_NAME.match(normalize_name(name)):
            raise ValidationError("Use 1 to 64 letters, digits, _ or - (other characters become _).")
        return name

    def clean_protocol(self) -> str:
        return self.cleaned_data.get("protocol") or ProtocolSetting.AUTO

    def clean_args(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["args"].splitlines() if line.strip()]

    def clean_roots(self) -> list[str]:
        roots = [line.strip() for line in self.cleaned_data["roots"].splitlines() if line.strip()]
        for root in roots:
            parts = urlsplit(root)
            if parts.scheme != "file" or not parts.path.startswith("/"):
                raise ValidationError(f"{root!r} is not a file:// URI (file:///home/me/project).")
        if len(roots) > 50:
            raise ValidationError("At most 50 roots.")
        return roots

    def clean_env(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["env"], "=", ENV_NAME, "environment variable")

    def clean_headers(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["headers"], ":", HEADER_NAME, "header")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        transport = data.get("transport")
        if transport == TransportKind.STDIO:
            if not data.get("command", "").strip():
                self.add_error("command", "Enter the command that starts the server.")
            else:
                self._check_command(data)
            error = env_error(data.get("env"))
            if error:
                self.add_error("env", error)
            data["url"] = ""
            data["headers"] = {}
        elif transport in REMOTE_TRANSPORTS:
            url = data.get("url", "").strip()
            schemes = URL_SCHEMES[TransportKind(transport)]
            if not url:
                self.add_error("url", "Enter the server's URL.")
            else:
                # ${VAR} is expanded only when connecting: check the URL with a stand-in for each.
                try:
                    URLValidator(schemes=list(schemes))(REFERENCE.sub("placeholder.example", url))
                except ValidationError:
                    self.add_error("url", f"Enter a valid {' or '.join(f'{s}://' for s in schemes)} URL.")
                else:
                    self._check_address(url)
            data["url"] = url
            data["command"], data["args"], data["env"], data["cwd"] = "", [], {}, ""
            data["command_set_by_operator"] = False
        for field_name in ("command", "url", "cwd"):
            text = data.get(field_name) or ""
            if "${" in text and len(references(text)) != text.count("${"):
                self.add_error(field_name, "Write variables as ${NAME}, ${NAME:-default} or ${secret:NAME}.")
        self._check_variables(data)
        team, name = data.get("team"), data.get("name")
        if team is not None and name:
            wanted = normalize_name(name).lower()
            others = Server.objects.filter(team=team).exclude(pk=getattr(self.instance, "pk", None))
            clash = next((o for o in others.only("name") if normalize_name(o.name).lower() == wanted), None)
            if clash is not None and clash.name == name:
                self.add_error("name", f"The team already has a server named {name!r}.")
            elif clash is not None:
                self.add_error(
                    "name",
                    f"{name!r} clashes with the team's server {clash.name!r}: in tool names both become "
                    f"mcp__{normalize_name(clash.name)}__… (other characters become _, case aside). Choose another name.",
                )
        return data

    def _check_variables(self, data: dict[str, Any]) -> None:
        # Refused again when connecting, where the portal's environment is never read for them.
        for field_name in ("command", "args", "env", "cwd", "url", "headers"):
            value = data.get(field_name) or ""
            texts = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
            names: list[str] = []
            for text in texts:
                names += [name for name in unavailable(text, settings.PORTAL_SERVER_VARIABLES) if name not in names]
            for name in names:
                self.add_error(field_name, not_available(name) + ".")

    def _check_command(self, data: dict[str, Any]) -> None:
        # Checked again at every start, where a ${VAR} command is checked too.
        instance = self.instance
        line = (data["command"].strip(), data.get("args") or [], data.get("cwd") or "")
        if instance is not None and instance.command_set_by_operator and line == instance_line(instance):
            # An operator's command line, left as it was: the team admin edits the rest.
            data["command_set_by_operator"] = True
            return
        data["command_set_by_operator"] = self.operator
        error = command_error(data["command"], data.get("args") or [], data.get("cwd") or None, self.operator)
        if error:
            self.add_error("command", error)

    def _check_address(self, url: str) -> None:
        error = address_error(url)
        if error:
            self.add_error("url", error)


class ImportForm(forms.Form):
    """An mcpServers config, pasted or uploaded, for one of the teams the user administers."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    config = forms.CharField(
        label="mcpServers JSON",
        required=False,
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "class": "json"}),
        help_text="Paste claude_desktop_config.json, .mcp.json, Cursor's mcp.json or VS Code's {\"servers\": …}.",
    )
    upload = forms.FileField(label="Or upload the file", required=False)

    def __init__(self, *args: Any, teams: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        if teams.count() == 1:
            self.fields["team"].initial = teams.first()

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        upload = data.get("upload")
        if upload:
            if upload.size > MAX_IMPORT_BYTES:
                raise ValidationError(f"The file is larger than {MAX_IMPORT_BYTES // 1000} KB.")
            try:
                data["config"] = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError:
                raise ValidationError("The file is not UTF-8 text.") from None
        if not data.get("config", "").strip():
            raise ValidationError("Paste a configuration or choose a file.")
        return data


class RuleForm(forms.Form):
    """A permission rule as a person writes it: which tools, and allow / ask / deny."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    pattern = forms.CharField(
        max_length=210,
        help_text="mcp__<server> for every tool of a server, mcp__<server>__<tool> for one; * matches anything.",
    )
    effect = forms.ChoiceField(choices=Effect.choices)

    def __init__(self, *args: Any, teams: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        if teams.count() == 1:
            self.fields["team"].initial = teams.first()
            self.fields["team"].widget = forms.HiddenInput()

    def clean_pattern(self) -> str:
        pattern = self.cleaned_data["pattern"].strip()
        if not is_valid_pattern(pattern):
            raise ValidationError(
                "Write mcp__<server> or mcp__<server>__<tool> (letters, digits, _ and -), with * as a wildcard."
            )
        return pattern


class TeamDefaultsForm(forms.ModelForm):
    class Meta:
        model = TeamPolicy
        fields = ["read_only", "destructive", "other"]
        help_texts = {
            "read_only": "Tools whose annotations say readOnlyHint: true.",
            "destructive": "Tools that are not read-only and say destructiveHint: true, or give no hint (MCP's default).",
            "other": "Tools that are not read-only and say destructiveHint: false.",
        }


class ElicitationHookForm(forms.Form):
    """When a server asks this (message, fields), answer so, without asking anyone."""

    message_contains = forms.CharField(
        label="When the message contains",
        max_length=200,
        required=False,
        help_text="Any case. Empty: every message.",
    )
    fields = forms.CharField(
        label="And the form asks for",
        max_length=500,
        required=False,
        help_text="Field names, separated by commas; the form must ask for all of them. Empty: any form.",
    )
    action = forms.ChoiceField(choices=HookAction.choices, initial=HookAction.ACCEPT)
    content = forms.CharField(
        label="Answer (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "json"}),
        help_text='For Accept: the field values, e.g. {"email": "ops@example.org"}. It is checked against each '
        "form it matches; a form it does not fit is asked of the person instead.",
    )

    def clean_fields(self) -> list[str]:
        names = [name.strip() for name in self.cleaned_data["fields"].split(",") if name.strip()]
        if len(names) > 50:
            raise ValidationError("At most 50 field names.")
        return names

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("action") == HookAction.ACCEPT:
            text = (data.get("content") or "").strip() or "{}"
            try:
                content = json.loads(text)
            except ValueError:
                self.add_error("content", "This is not valid JSON.")
                return data
            if not isinstance(content, dict):
                self.add_error("content", "The answer must be a JSON object of field values.")
                return data
            data["content"] = content
        else:
            data["content"] = {}
        return data
