"""A connection's owner: made and read in one place (sessions/mcp/owner.py)."""

from sessions.mcp.owner import EVERYONE, Owner


def test_a_persons_and_a_teams_owner_read_back():
    assert Owner.user(5) == "user:5" and Owner.user(5).user_id == 5 and Owner.user(5).team_id is None
    assert Owner.team(3) == "team:3" and Owner.team(3).team_id == 3 and Owner.team(3).user_id is None


def test_text_from_elsewhere_is_read_the_same_and_nonsense_names_nobody():
    assert Owner("team:12").team_id == 12
    assert {Owner.user(1): "a"}["user:1"] == "a"  # the same key as the text it travels as
    for text in ("user:", "user:x", "admin:1", ""):
        assert (Owner(text).user_id, Owner(text).team_id) == (None, None)
    assert (EVERYONE.user_id, EVERYONE.team_id) == (None, None)
