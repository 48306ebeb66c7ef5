"""Turning whatever a connection or call raised into a diagnosis a person can act on.

The dependency runs one way: this module knows the other modules' exceptions (OAuth's, the
sandbox's, the address policy's) and none of them knows this one's diagnoses."""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator

import anyio
import httpx2
from jsonschema.exceptions import ValidationError as SchemaValidationError
from mcp.shared.exceptions import MCPError

from .auth import AuthorizationRequired, OAuthFlowError
from .commands import CommandRefused, EnvRefused
from .config import ServerConfig
from .failure import ConnectionFailed, Failure
from .sandbox import NotInSandbox, SandboxUnavailable
from .ssrf import AddressRefused
from .variables import MissingSecrets, MissingVariable

UNSUPPORTED_PROTOCOL_VERSION = -32022

REQUEST_TIMEOUT = -32001
SESSION_EXPIRED_MESSAGES = ("session not found", "session terminated")
# Terminal connection errors, counted as Claude Code counts them: after three in a row the connection is closed and the
# next use reconnects; anything else (a server's own error, a slow answer) resets the count.
TERMINAL_ERRNOS = frozenset(
    {errno.ECONNRESET, errno.ETIMEDOUT, errno.EPIPE, errno.EHOSTUNREACH, errno.ECONNREFUSED, errno.ENETUNREACH}
)
TERMINAL_MARKERS = ("stream ended", "sse stream disconnected", "failed to reconnect sse stream", "terminated")


def protocol_message(code: int, message: str) -> str:
    """`MCP error <code>: <message>`, once: servers built on the TypeScript SDK already prefix
    their messages so, and a second prefix only repeats the code."""
    prefix = f"MCP error {code}:"
    return message if message.startswith(prefix) else f"{prefix} {message}"


def leaf_exceptions(exc: BaseException) -> Iterator[BaseException]:
    """The SDK wraps connect-time errors in (nested) ExceptionGroups; the leaves say what happened."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaf_exceptions(inner)
    else:
        yield exc


def _first(exc: BaseException, kinds: type[BaseException] | tuple[type[BaseException], ...]) -> BaseException | None:
    for leaf in leaf_exceptions(exc):
        seen: BaseException | None = leaf
        while seen is not None:
            if isinstance(seen, kinds):
                return seen
            seen = seen.__cause__ or seen.__context__
    return None


def is_connection_lost(exc: BaseException) -> bool:
    """Errors after which the session cannot be used again, so the pool must reconnect."""
    if _first(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, httpx2.TransportError)):
        return True
    mcp_error = _first(exc, MCPError)
    return isinstance(mcp_error, MCPError) and "connection closed" in str(mcp_error).lower()


def is_session_expired(exc: BaseException, http_404_with_session: bool = False) -> bool:
    """The server no longer knows our session: HTTP 404 on a request that carried `mcp-session-id`,
    JSON-RPC -32001 "Session not found" (the spec's signal), or the SDK's "Session not found" /
    "Session terminated". A plain 404 (a wrong URL) or a request timeout (also -32001) is not."""
    mcp_error = _first(exc, MCPError)
    if not isinstance(mcp_error, MCPError):
        return False
    message = mcp_error.error.message.lower()
    return http_404_with_session or any(text in message for text in SESSION_EXPIRED_MESSAGES)


def is_terminal(exc: BaseException) -> bool:
    """A transport failure of the kinds Claude Code counts (ECONNRESET, ETIMEDOUT, EPIPE, EHOSTUNREACH,
    ECONNREFUSED, a stream that ended), as opposed to an error the server itself answered with."""
    for leaf in leaf_exceptions(exc):
        seen: BaseException | None = leaf
        while seen is not None:
            if isinstance(seen, OSError) and seen.errno in TERMINAL_ERRNOS:
                return True
            if isinstance(seen, (ConnectionError, anyio.EndOfStream, anyio.BrokenResourceError, httpx2.TransportError)):
                return True
            if not isinstance(seen, MCPError) and any(m in str(seen).lower() for m in TERMINAL_MARKERS):
                return True
            seen = seen.__cause__ or seen.__context__
    return False


def auth_failure(exc: BaseException | None) -> Failure | None:
    """The diagnosis of an OAuth problem, or None if `exc` is not one."""
    if isinstance(exc, AuthorizationRequired):
        return Failure("needs_auth", f"Connect your account: {exc}.")
    if isinstance(exc, OAuthFlowError):
        # The server wants authorization and OAuth cannot get it without the person (a server that
        # registers no clients, or wants a static header): they must act either way. Connecting
        # runs the flow in their browser, where this error is shown again if it persists.
        return Failure("needs_auth", f"Connect your account: the server asks for authorization ({exc}).")
    return None


def _http_status_failure(code: int, target: str, stderr_tail: str) -> Failure:
    if code == 401:
        return Failure("needs_auth", f"HTTP 401 from {target}: the server needs authorization", stderr_tail, code)
    hint = {403: " (forbidden)", 404: " (wrong path?)"}.get(code, "")
    return Failure("http_status", f"HTTP {code} from {target}{hint}", stderr_tail, status_code=code)


def _tls_failure(exc: BaseException, target: str, stderr_tail: str) -> Failure | None:
    tls = _first(exc, ssl.SSLError)
    if tls is None:
        for leaf in leaf_exceptions(exc):
            text = str(leaf)
            if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text and "handshake" in text.lower():
                tls = leaf
                break
    if tls is None:
        return None
    reason = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or str(tls)
    return Failure("tls", f"TLS failed with {target}: {reason}", stderr_tail)


def _redirect_failure(code: int | None, location: str, target: str) -> Failure:
    where = f" to {location}" if location else ""
    return Failure(
        "redirect",
        f"{target} redirects{where} (HTTP {code or '3xx'}); the portal follows no redirect: register the URL it points to",
        status_code=code,
    )


def diagnose(
    exc: BaseException,
    config: ServerConfig,
    stderr_tail: str = "",
    http_status: int | None = None,
    redirect: str | None = None,
) -> Failure:
    """Name the failing layer: command, process, network, HTTP status, timeout or protocol.

    `http_status` is the last HTTP error status the transport saw, if any: the SDK
    reports some of them only as JSON-RPC errors.
    """
    if isinstance(exc, ConnectionFailed):
        return exc.failure
    oauth = auth_failure(_first(exc, OAuthFlowError) or getattr(config.auth, "last_error", None))
    if oauth is not None:
        return oauth
    target = f"the server {config.name!r}" if config.transport == "stdio" else config.url

    refused = _first(exc, AddressRefused)
    if isinstance(refused, AddressRefused):
        if refused.kind == "dns":
            return Failure("dns", f"cannot resolve the host of {target}: {refused}", stderr_tail)
        return Failure("address_refused", f"Refused to connect to {target}: {refused}.", stderr_tail)
    command = _first(exc, CommandRefused)
    if isinstance(command, CommandRefused):
        return Failure("command_not_allowed", f"Refused to start {config.name}: {command}.", stderr_tail)
    env = _first(exc, EnvRefused)
    if isinstance(env, EnvRefused):
        return Failure("env_not_allowed", f"Refused to start {config.name}: {env}.", stderr_tail)
    sandbox = _first(exc, SandboxUnavailable)
    if isinstance(sandbox, SandboxUnavailable):
        return Failure(
            "sandbox_unavailable",
            f"Refused to start {config.name}: stdio servers run only in a sandbox, and {sandbox}. "
            "An operator who accepts stdio servers running as the portal's own user can set PORTAL_STDIO_SANDBOX=off.",
            stderr_tail,
        )
    outside = _first(exc, NotInSandbox)
    if isinstance(outside, NotInSandbox):
        return Failure("not_in_sandbox", f"Refused to start {config.name}: {outside}.", stderr_tail)

    os_error = _first(exc, OSError)
    if config.transport == "stdio" and isinstance(os_error, OSError) and not isinstance(os_error, TimeoutError):
        if isinstance(os_error, FileNotFoundError) or os_error.errno == errno.ENOENT:
            missing = "working directory or command" if config.cwd else "command"
            return Failure("command_not_found", f"{missing} not found: {config.command}", stderr_tail)
        if isinstance(os_error, PermissionError):
            return Failure("command_not_executable", f"permission denied running {config.command}", stderr_tail)

    if redirect is not None:
        return _redirect_failure(http_status, redirect, target)

    missing = _first(exc, MissingVariable)
    if isinstance(missing, MissingVariable):
        # missing_variable, or variable_not_available: a name the operator does not expose.
        return Failure(missing.kind, f"Cannot connect to {config.name}: {missing}.", stderr_tail)
    secrets = _first(exc, MissingSecrets)
    if isinstance(secrets, MissingSecrets):
        what = ", ".join(secrets.names)
        return Failure("needs_auth", f"Connect your account: set {what} for {config.name}.", stderr_tail)

    status_error = _first(exc, httpx2.HTTPStatusError)
    if isinstance(status_error, httpx2.HTTPStatusError):
        return _http_status_failure(status_error.response.status_code, target, stderr_tail)
    if http_status is not None and _first(exc, MCPError) is None and not _first(exc, OSError):
        return _http_status_failure(http_status, target, stderr_tail)

    tls = _tls_failure(exc, target, stderr_tail)
    if tls is not None:
        return tls

    if _first(exc, socket.gaierror) is not None:
        return Failure("dns", f"cannot resolve the host of {target}: {_first(exc, socket.gaierror)}", stderr_tail)

    if _first(exc, ConnectionRefusedError) is not None:
        return Failure("connection_refused", f"connection refused by {target}", stderr_tail)
    connect_error = _first(exc, httpx2.ConnectError)
    if connect_error is not None:
        text = str(connect_error)
        lowered = text.lower()
        if "name or service not known" in lowered or "nodename nor servname" in lowered or "getaddrinfo" in lowered:
            return Failure("dns", f"cannot resolve the host of {target}: {text}", stderr_tail)
        if "refused" in lowered:
            return Failure("connection_refused", f"connection refused by {target}", stderr_tail)
        return Failure("connect_error", f"cannot connect to {target}: {text}", stderr_tail)

    timeout = _first(exc, (TimeoutError, httpx2.TimeoutException))
    if timeout is not None:
        return Failure("timeout", f"{target} did not answer in time", stderr_tail)

    version = _first(exc, RuntimeError)
    if version is not None and ("protocol version" in str(version).lower() or "protocol_version" in str(version)):
        return Failure("protocol_version", f"protocol version mismatch with {target}: {version}", stderr_tail)

    mcp_error = _first(exc, MCPError)
    if isinstance(mcp_error, MCPError):
        if mcp_error.error.code == UNSUPPORTED_PROTOCOL_VERSION:
            return Failure(
                "protocol_version",
                f"protocol version mismatch with {target}: {mcp_error.error.message}",
                stderr_tail,
            )
        if http_status is not None:
            return _http_status_failure(http_status, target, stderr_tail)
        if mcp_error.error.code == REQUEST_TIMEOUT:
            return Failure("timeout", f"{target} did not answer in time ({mcp_error.error.message})", stderr_tail)
        if config.transport == "stdio" and "connection closed" in str(mcp_error).lower():
            detail = f": {stderr_tail.strip().splitlines()[-1]}" if stderr_tail.strip() else ""
            return Failure("process_exited", f"the server process exited{detail}", stderr_tail)
        if "connection closed" in str(mcp_error).lower():
            return Failure("connection_lost", f"the connection to {target} was closed", stderr_tail)
        return Failure("protocol", protocol_message(mcp_error.error.code, mcp_error.error.message), stderr_tail)

    if is_connection_lost(exc):
        kind = "process_exited" if config.transport == "stdio" else "connection_lost"
        return Failure(kind, f"the connection to {target} was lost", stderr_tail)

    leaf = next(leaf_exceptions(exc))
    mismatch = _output_schema_mismatch(leaf)
    if mismatch is not None:
        return Failure("output_schema_mismatch", mismatch, stderr_tail)
    return Failure("error", f"{type(leaf).__name__}: {leaf}", stderr_tail)


def _output_schema_mismatch(leaf: BaseException) -> str | None:
    """The SDK checks structured content against the tool's outputSchema and raises a bare
    RuntimeError (the answer is dropped): name the field and the rule that failed."""
    cause = leaf.__cause__
    if isinstance(leaf, RuntimeError) and isinstance(cause, SchemaValidationError):
        where = "/".join(str(part) for part in cause.absolute_path) or "the top level"
        return f"The tool's structured content does not match its output schema at {where}: {cause.message}."
    if isinstance(leaf, RuntimeError) and "has an output schema but did not return structured content" in str(leaf):
        return "The tool has an output schema but its answer carried no structured content."
    return None
