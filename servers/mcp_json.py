"""`mcpServers` JSON, the configuration other MCP clients write: read it in, write it out.

Shapes read (docs/import-export.md):
  {"mcpServers": {name: entry}}       Claude Desktop, Claude Code (.mcp.json), Cursor, Windsurf
  {"servers": {name: entry}}          VS Code (.vscode/mcp.json; comments and trailing commas allowed)
  {"mcp": {"servers": {name: entry}}} VS Code settings.json
An entry is stdio (command, args, env, cwd) or remote (type, url, headers). `${VAR}`
placeholders are kept as they are, never expanded here; when a server connects, only the
variables the operator exposes are filled in (sessions/mcp/variables.py), and the import
page says which placeholders will not be (`placeholder_report`).

No Django here: `parse` and `export` are pure functions, so the web pages, the
management commands and the tests share them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from sessions.mcp.naming import is_valid_name, normalize_name
from sessions.mcp.variables import REFERENCE, SETTING

MAX_BYTES = 1_000_000
MAX_ENTRIES = 200
PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Which transport values (TransportKind) each config "type" may become, in order of preference.
TYPES: dict[str, tuple[str, ...]] = {
    "stdio": ("stdio",),
    "http": ("http",),
    "streamable-http": ("http",),
    "streamable_http": ("http",),
    "streamablehttp": ("http",),
    "sse": ("sse",),
    "ws": ("websocket", "ws"),
    "websocket": ("websocket", "ws"),
}
URL_SCHEMES = {"http": ("http", "https"), "sse": ("http", "https"), "websocket": ("ws", "wss"), "ws": ("ws", "wss")}
KNOWN_KEYS = {"type", "command", "args", "env", "cwd", "url", "serverUrl", "headers", "disabled", "enabled"}
# Names of flags, query parameters and headers whose values are secrets when exported.
SECRETISH = re.compile(r"(key|token|secret|passw|pwd|auth|cookie|credential|signature|sig$)", re.IGNORECASE)
# Values that are credentials whatever they are named: a scheme and a token, the well-known key
# prefixes, a JWT, or one long unbroken run of letters and digits (both) as keys are made.
CREDENTIAL_SHAPE = re.compile(
    r"^(?:(?:bearer|basic|token)\s+\S{8,}"
    r"|(?:sk|pk|rk)[-_][A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{16,}"
    r"|xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16}|AIza[\w-]{30,}|eyJ[\w-]+\.[\w-]+\.[\w-]+"
    r"|(?=[A-Za-z0-9+/_=-]*[0-9])(?=[A-Za-z0-9+/_=-]*[A-Za-z])[A-Za-z0-9+/_=-]{32,})$",
    re.IGNORECASE,
)
SECRET_REFERENCE = re.compile(r"\$\{secret:([^}]+)\}")


def looks_like_credential(name: str, value: str) -> bool:
    """A value held back on export and warned about on import: named like one, or shaped like one."""
    return bool(value) and (bool(SECRETISH.search(name)) or bool(CREDENTIAL_SHAPE.match(value.strip())))


@dataclass(frozen=True)
class LiteralCredential:
    """A credential written in the clear in an imported entry (an env or header value)."""

    where: str  # "env" or "headers"
    key: str
    secret: str  # the secret's name if it is stored as one instead

    @property
    def reference(self) -> str:
        return "${secret:" + self.secret + "}"


AUTH_SCHEME = re.compile(r"^(bearer|basic|token)\s+", re.IGNORECASE)


@dataclass
class Entry:
    """One server of the file, as the portal would register it."""

    name: str
    transport: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    status: str = "new"  # new | duplicate | unsupported | error
    message: str = ""
    notes: list[str] = field(default_factory=list)
    # What each placeholder will be filled with when the server connects (set by the import plan).
    report: list[Placeholder] = field(default_factory=list)
    # Credentials written in the clear: stored as they are unless the import stores them as secrets.
    credentials: list[LiteralCredential] = field(default_factory=list)

    @property
    def unfilled(self) -> list[Placeholder]:
        return [placeholder for placeholder in self.report if not placeholder.filled]

    @property
    def target(self) -> str:
        if "command" in self.fields:
            return " ".join([self.fields["command"], *self.fields.get("args", [])])
        return self.fields.get("url", "")

    @property
    def placeholders(self) -> list[str]:
        """As written: `${NAME}`."""
        return ["${" + name + "}" for name in placeholders_in(self.fields)]

    def fail(self, message: str) -> Entry:
        self.status, self.message = "error", message
        return self


@dataclass
class ParsedConfig:
    entries: list[Entry] = field(default_factory=list)
    shape: str = ""
    error: str = ""  # the whole document is unusable: nothing in it can be created

    @property
    def ok(self) -> bool:
        """Nothing blocks creating: no document error and no entry in error."""
        return not self.error and all(entry.status != "error" for entry in self.entries)

    @property
    def to_create(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.status == "new"] if self.ok else []

    @property
    def credentials(self) -> bool:
        """Whether an entry to create holds a credential in the clear."""
        return any(entry.credentials for entry in self.to_create)


@dataclass(frozen=True)
class Placeholder:
    """One `${…}` as written, whether connecting fills it in, and with what (or why not)."""

    text: str
    filled: bool
    why: str


def placeholder_report(value: Any, variables: Mapping[str, str | None]) -> list[Placeholder]:
    """Each distinct placeholder in a value, judged as a connection would fill it.

    `variables` are the variables the operator exposes to servers (None: exposed but not set);
    every other name is not available to servers, whatever the portal's environment holds.
    """
    report: list[Placeholder] = []
    for inner in placeholders_in(value):
        text = "${" + inner + "}"
        match = REFERENCE.fullmatch(text)
        if match is None:
            report.append(Placeholder(text, False, "not a placeholder the portal knows: sent as written"))
        elif match["secret"]:
            report.append(Placeholder(text, True, f"each person's own {match['secret']}, set on My credentials"))
        elif variables.get(match["name"]):
            report.append(Placeholder(text, True, f"from the portal's environment ({SETTING})"))
        elif match["default"] is not None:
            report.append(Placeholder(text, True, f"its default: {match['name']} is not set for servers"))
        elif match["name"] in variables:
            report.append(Placeholder(text, False, "exposed to servers but not set in the portal's environment"))
        else:
            report.append(
                Placeholder(text, False, f"not available to servers: the operator does not list it in {SETTING}")
            )
    return report


def placeholders_in(value: Any, without_default: bool = False) -> list[str]:
    """Every distinct `${NAME}` in a value (strings, lists and dicts, recursively), in order.

    `without_default` leaves out `${NAME:-default}`, which needs nothing from anyone.
    """
    found: list[str] = []

    def walk(item: Any) -> None:
        if isinstance(item, str):
            for name in PLACEHOLDER.findall(item):
                if name not in found and not (without_default and ":-" in name):
                    found.append(name)
        elif isinstance(item, dict):
            for inner in item.values():
                walk(inner)
        elif isinstance(item, list | tuple):
            for inner in item:
                walk(inner)

    walk(value)
    return found


# -- reading -------------------------------------------------------------------------------


def strip_jsonc(text: str) -> str:
    """JSON with comments and trailing commas (VS Code's files) as plain JSON; strings untouched."""
    out: list[str] = []  # a string literal is one item, anything else one character
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            start = i
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append(text[start : i + 1])
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end == -1 else end + 2
        else:
            if char in "}]":
                last = len(out) - 1
                while last >= 0 and out[last].isspace():
                    last -= 1
                if last >= 0 and out[last] == ",":
                    del out[last]
            out.append(char)
            i += 1
    return "".join(out)


def _servers_of(document: Any) -> tuple[str, Any]:
    if isinstance(document, dict):
        if "mcpServers" in document:
            return "mcpServers", document["mcpServers"]
        if "servers" in document:
            return "servers", document["servers"]
        if isinstance(document.get("mcp"), dict) and "servers" in document["mcp"]:
            return "mcp.servers", document["mcp"]["servers"]
    return "", None


def parse(text: str, supported: Iterable[str]) -> ParsedConfig:
    """Read a config; `supported` is the transports the portal can register (TransportKind.values).

    A document that is not JSON, or not one of the known shapes, is an `error` with no
    entries. Otherwise each entry says what it would become, or why it cannot.
    """
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        return ParsedConfig(error=f"The file is larger than {MAX_BYTES // 1000} KB.")
    try:
        document = json.loads(strip_jsonc(text))
    except ValueError as exc:
        return ParsedConfig(error=f"This is not valid JSON: {exc}.")
    shape, servers = _servers_of(document)
    if not shape:
        return ParsedConfig(
            error='Unknown shape: expected {"mcpServers": {...}} (Claude Desktop, Claude Code, Cursor), '
            '{"servers": {...}} (VS Code mcp.json) or {"mcp": {"servers": {...}}} (VS Code settings).'
        )
    if not isinstance(servers, dict):
        return ParsedConfig(shape=shape, error=f'"{shape}" must be an object of servers by name.')
    if not servers:
        return ParsedConfig(shape=shape, error=f'"{shape}" lists no servers.')
    if len(servers) > MAX_ENTRIES:
        return ParsedConfig(shape=shape, error=f"At most {MAX_ENTRIES} servers can be imported at once.")
    supported = set(supported)
    parsed = ParsedConfig(shape=shape)
    seen: dict[str, str] = {}
    for name, raw in servers.items():
        entry = _entry(name, raw, supported)
        wanted = normalize_name(name).lower()
        if entry.status != "error" and wanted in seen:
            entry.fail(f"Same name as {seen[wanted]!r} once made valid ({normalize_name(name)}).")
        seen.setdefault(wanted, name)
        parsed.entries.append(entry)
    return parsed


def mark_duplicates(parsed: ParsedConfig, existing_names: Iterable[str]) -> ParsedConfig:
    """Entries named like a server the team already has are skipped: importing twice creates nothing twice."""
    existing = {normalize_name(name).lower() for name in existing_names}
    for entry in parsed.entries:
        if entry.status in ("new", "unsupported") and normalize_name(entry.name).lower() in existing:
            entry.status, entry.message = "duplicate", "The team already has a server with this name."
    return parsed


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _pairs(value: Any, name_pattern: re.Pattern[str]) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and name_pattern.match(k) and isinstance(v, str) for k, v in value.items()
    )


def _transport_of(raw: dict[str, Any]) -> tuple[str, str]:
    """(the config's own word for the transport, or "" if unknown; a note on how it was chosen)."""
    kind = raw.get("type")
    if isinstance(kind, str):
        return kind.strip().lower(), ""
    url = raw.get("url", raw.get("serverUrl"))
    if "command" in raw:
        return "stdio", ""
    if isinstance(url, str):
        # Cursor and Windsurf leave the type out and guess from the URL; so do we.
        if urlsplit(url).path.rstrip("/").endswith("/sse"):
            return "sse", "No type given; the URL ends in /sse, so this is taken as SSE."
        return "http", "No type given; taken as Streamable HTTP."
    return "", ""


def _entry(name: Any, raw: Any, supported: set[str]) -> Entry:
    entry = Entry(name=str(name))
    if not isinstance(name, str) or len(name) > 64 or not is_valid_name(name):
        return entry.fail("Names need 1 to 64 letters, digits, _ or -.")
    if not isinstance(raw, dict):
        return entry.fail("Each server must be a JSON object.")
    if "command" in raw and ("url" in raw or "serverUrl" in raw):
        return entry.fail('It has both a "command" and a "url": say which with "type".')
    kind, note = _transport_of(raw)
    if not kind:
        return entry.fail('It needs a "command" (a local stdio server) or a "url" (a remote server).')
    if kind not in TYPES:
        return entry.fail(f'Unknown "type" {kind!r}: expected stdio, http, sse or ws.')
    if note:
        entry.notes.append(note)
    ignored = sorted(set(raw) - KNOWN_KEYS)
    if ignored:
        entry.notes.append("Ignored: " + ", ".join(ignored) + ".")
    disabled, enabled = raw.get("disabled", False), raw.get("enabled", True)
    if not isinstance(disabled, bool) or not isinstance(enabled, bool):
        return entry.fail('"disabled" and "enabled" must be true or false.')
    entry.fields["enabled"] = enabled and not disabled

    if kind == "stdio":
        entry.transport = "stdio"
        command, args, env, cwd = raw.get("command"), raw.get("args", []), raw.get("env", {}), raw.get("cwd", "")
        if not isinstance(command, str) or not command.strip() or len(command) > 500:
            return entry.fail('"command" must be a non-empty string (at most 500 characters).')
        if not _strings(args):
            return entry.fail('"args" must be a list of strings.')
        if not _pairs(env, ENV_NAME):
            return entry.fail('"env" must be an object of NAME: "value" strings.')
        if not isinstance(cwd, str) or len(cwd) > 500:
            return entry.fail('"cwd" must be a string.')
        entry.fields.update(command=command.strip(), args=list(args), env=dict(env), cwd=cwd)
    else:
        url, headers = raw.get("url", raw.get("serverUrl")), raw.get("headers", {})
        candidates = TYPES[kind]
        entry.transport = next((value for value in candidates if value in supported), candidates[0])
        if not isinstance(url, str) or len(url) > 500:
            return entry.fail('"url" must be a string of at most 500 characters.')
        # Placeholders may stand anywhere in a URL; check the rest of it.
        parts = urlsplit(PLACEHOLDER.sub("placeholder", url))
        schemes = URL_SCHEMES.get(entry.transport, ("http", "https"))
        if parts.scheme not in schemes or not parts.netloc:
            return entry.fail(f'"url" must be a {" or ".join(s + "://" for s in schemes)} URL.')
        if not _pairs(headers, HEADER_NAME):
            return entry.fail('"headers" must be an object of Header-Name: "value" strings.')
        entry.fields.update(url=url, headers=dict(headers))
    if entry.transport not in supported:
        entry.status, entry.message = "unsupported", f"The {kind} transport is not supported yet; skipped."
    return entry


# -- writing -------------------------------------------------------------------------------


def _placeholder_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").upper() or "SECRET"


def _is_placeholder_only(value: str) -> bool:
    return bool(PLACEHOLDER.search(value)) and not AUTH_SCHEME.sub("", PLACEHOLDER.sub("", value)).strip()


def literal_credentials(fields: Mapping[str, Any]) -> list[LiteralCredential]:
    """The env and header values of an entry that look like credentials and are not placeholders."""
    found = []
    for where in ("env", "headers"):
        for key, value in (fields.get(where) or {}).items():
            if isinstance(value, str) and not PLACEHOLDER.search(value) and looks_like_credential(key, value):
                found.append(LiteralCredential(where, key, _placeholder_name(key)))
    return found


def as_secrets(fields: dict[str, Any], credentials: Iterable[LiteralCredential]) -> dict[str, str]:
    """Put `${secret:NAME}` where each literal credential was (an auth scheme stays written);
    returns the values to store as secrets, by name."""
    values: dict[str, str] = {}
    for credential in credentials:
        value = fields[credential.where][credential.key]
        scheme = AUTH_SCHEME.match(value)
        prefix = scheme.group(0) if scheme else ""
        values[credential.secret] = value[len(prefix) :]
        fields[credential.where] = {**fields[credential.where], credential.key: prefix + credential.reference}
    return values


def _redact_value(value: str, name: str, where: str, notes: list[str]) -> str:
    """What another client gets for a value: as it is, unless it looks like a credential
    (`looks_like_credential`), which a `${NAME}` placeholder stands in for. A `${secret:NAME}`
    names a secret only this portal holds: it becomes `${NAME}` too."""
    if SECRET_REFERENCE.search(value):
        replaced = SECRET_REFERENCE.sub(lambda m: "${" + _placeholder_name(m.group(1)) + "}", value)
        notes.append(f"{where}: the portal's secret became {replaced}, to be set where the file is used")
        return replaced
    if value == "" or _is_placeholder_only(value) or not looks_like_credential(name, value):
        return value
    scheme = AUTH_SCHEME.match(value)
    replacement = (scheme.group(0) if scheme else "") + "${" + _placeholder_name(name) + "}"
    notes.append(f"{where}: the value was replaced by {replacement}")
    return replacement


def _redact_url(url: str, where: str, notes: list[str]) -> str:
    if "://" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            user, password = userinfo.split(":", 1)
            if not _is_placeholder_only(password):
                netloc = f"{user}:${{PASSWORD}}@{host}"
                notes.append(f"{where}: the password in the URL was replaced by ${{PASSWORD}}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(SECRETISH.search(key) for key, _ in query):
        query = [
            (
                key,
                _redact_value(value, key, f"{where} query parameter {key}", notes) if SECRETISH.search(key) else value,
            )
            for key, value in query
        ]
        # Keep ${...} readable rather than percent-encoded.
        encoded = urlencode(query, quote_via=lambda s, *a: quote(s, safe="${}"))
        return urlunsplit((parts.scheme, netloc, parts.path, encoded, parts.fragment))
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _redact_args(args: list[str], where: str, notes: list[str]) -> list[str]:
    out: list[str] = []
    secret_next = False
    for arg in args:
        if secret_next:
            out.append(_redact_value(arg, out[-1].lstrip("-"), f"{where} argument after {out[-1]}", notes))
            secret_next = False
            continue
        if arg.startswith("-") and "=" in arg:
            flag, value = arg.split("=", 1)
            if SECRETISH.search(flag):
                arg = f"{flag}={_redact_value(value, flag.lstrip('-'), f'{where} argument {flag}', notes)}"
        elif arg.startswith("-") and SECRETISH.search(arg):
            secret_next = True
        elif "://" in arg:
            arg = _redact_url(arg, f"{where} argument", notes)
        out.append(arg)
    return out


def export(servers: Iterable[Any], shape: str = "mcpServers") -> tuple[dict[str, Any], list[str]]:
    """Servers (anything with the Server fields) as a config, and notes on every value held back.

    Secrets never leave: env and header values that look like credentials (by name or by shape),
    `${secret:NAME}` references, URL passwords, secret-looking query parameters and flags are
    exported as a placeholder named after them; everything else as it is.
    """
    notes: list[str] = []
    out: dict[str, Any] = {}
    for server in servers:
        where = server.name
        entry: dict[str, Any] = {}
        if server.transport == "stdio":
            if shape == "servers":
                entry["type"] = "stdio"
            entry["command"] = server.command
            if server.args:
                entry["args"] = _redact_args(list(server.args), where, notes)
            if server.env:
                entry["env"] = {k: _redact_value(v, k, f"{where} env {k}", notes) for k, v in server.env.items()}
            if server.cwd:
                entry["cwd"] = server.cwd
        else:
            entry["type"] = {"websocket": "ws"}.get(server.transport, server.transport)
            entry["url"] = _redact_url(server.url, f"{where} url", notes)
            if server.headers:
                entry["headers"] = {
                    k: _redact_value(v, k, f"{where} header {k}", notes) for k, v in server.headers.items()
                }
        if not server.enabled:
            entry["disabled"] = True
        out[server.name] = entry
    return ({"servers": out} if shape == "servers" else {"mcpServers": out}), notes
