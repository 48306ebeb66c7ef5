"""What an authorization server's error on the OAuth callback means, and what to do about it.

The server redirects back with `error` (RFC 6749 §4.1.2.1) and often an `error_description`; the
codes alone ("invalid_client") tell a person nothing. Pure: the callback view words the answer, the
worker decides from the same table whether the portal's dynamic registration must be dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

AGAIN = "Press Connect your account to try again"
# What to do, by kind of error: (when the portal registered its client itself and can register
# again, when an admin set a client ID); {server} and {redirect_uri} are filled in.
ADVICE: dict[str, tuple[str, str]] = {
    "access_denied": (f"The authorization was declined, so nothing was stored. {AGAIN}.",) * 2,
    "client": (
        "{server} does not know the client the portal registered with it (it may have forgotten it, or it "
        "was registered for another redirect URI). The portal dropped that registration and registers again: "
        "press Connect your account.",
        "{server} refuses the client ID set in the server's OAuth settings. An admin must check the client "
        "ID and secret there, and that {redirect_uri} is a redirect URI of that client.",
    ),
    "invalid_scope": (
        "{server} refuses the scopes the portal asked for. An admin can set the scopes to request in the "
        "server's OAuth settings.",
    )
    * 2,
    "unavailable": ("{server}'s authorization server has a problem of its own: try again in a moment.",) * 2,
    "other": (
        f"{AGAIN}; if it happens again, an admin can check the server's OAuth settings.",
        f"{AGAIN}; if it happens again, an admin can check the server's OAuth settings (client ID, secret and scopes).",
    ),
}
# Codes that say the client itself (its ID, or the redirect URI registered for it) is the problem.
CLIENT_ERRORS = frozenset({"invalid_client", "unauthorized_client", "invalid_redirect_uri", "unknown_client"})
UNAVAILABLE = frozenset({"server_error", "temporarily_unavailable"})


@dataclass(frozen=True)
class AuthorizationError:
    error: str
    description: str = ""

    @property
    def kind(self) -> str:
        text = self.description.lower()
        if self.error in CLIENT_ERRORS or ("redirect" in text and "uri" in text) or "unknown client" in text:
            return "client"
        if self.error in UNAVAILABLE:
            return "unavailable"
        return self.error if self.error in ADVICE else "other"

    def registration_refused(self) -> bool:
        """The server does not accept the registered client: a dynamic registration must be made again."""
        return self.kind == "client"

    def explain(self, server: str, redirect_uri: str, *, configured_client: bool) -> str:
        said = f"{server} answered {self.error}" + (f" ({self.description})" if self.description else "") + "."
        advice = ADVICE[self.kind][1 if configured_client else 0]
        return f"{said} {advice.format(server=server, redirect_uri=redirect_uri)}"
