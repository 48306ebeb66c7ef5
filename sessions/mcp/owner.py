"""Whose connection it is: a person's own, or a team's shared one.

A connection's owner is part of its pool key, of its routing entry and of the news that a
credential changed, and it crosses process boundaries as text ("user:<id>", "team:<id>"). `Owner` is
that text (a str, so it hashes, compares and serialises as before) with one place that makes and
reads it.
"""

from __future__ import annotations


class Owner(str):
    @classmethod
    def user(cls, user_id: int) -> Owner:
        return cls(f"user:{int(user_id)}")

    @classmethod
    def team(cls, team_id: int) -> Owner:
        return cls(f"team:{int(team_id)}")

    def _id(self, kind: str) -> int | None:
        prefix, _, ident = self.partition(":")
        return int(ident) if prefix == kind and ident.isdigit() else None

    @property
    def user_id(self) -> int | None:
        """The person whose own connection this is (None for a team's)."""
        return self._id("user")

    @property
    def team_id(self) -> int | None:
        """The team whose shared connection this is (None for a person's)."""
        return self._id("team")


# Not an owner: the news that a server's credentials changed for every owner of its connections.
EVERYONE = Owner("*")
