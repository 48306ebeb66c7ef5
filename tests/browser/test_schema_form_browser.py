"""The playground's tool forms in real Chromium, one JSON Schema case per tool of tests/servers/schema_server.py.

Each test fills the form as a person would, calls the tool, and compares what the tool says it
received with what the person meant to send: the round trip through the form, the portal's schema
check and the MCP server.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
def schema_server(alice):
    from servers.models import Server

    return Server.objects.create(
        team=alice.memberships.get().team,
        name="schemas",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.servers.schema_server"],
        cwd=str(ROOT),
        request_timeout=10,
        created_by=alice,
    )


def open_tool(page: Page, server, tool: str) -> None:
    log_in(page, "alice", "pw-alice")
    page.goto(f"/playground/?server={server.pk}&tool={tool}")
    expect(page.locator("#connection-status")).to_have_text("Connected to the portal.")
    expect(page.locator("#tools-status")).to_have_text(re.compile(r"^\d+ tools$"))
    page.locator(f'button.tool[data-tool="{tool}"]').click()
    expect(page.locator("#tool-full-name")).to_have_text(re.compile(f"{tool}$"))


def call(page: Page) -> Any:
    """Call the tool; what it says it received."""
    page.get_by_role("button", name="Call tool").click()
    expect(page.locator("#call-status")).to_contain_text("Succeeded")
    return json.loads(page.locator("#result .text-block").first.inner_text())


def field(scope, label: str):
    """The control labelled `label`, the star of a required field aside."""
    return scope.get_by_label(re.compile(rf"^{re.escape(label)}( \*)?$"))


def error_beside(scope, label: str):
    page = scope if isinstance(scope, Page) else scope.page
    return scope.locator(".field", has=field(page, label)).locator(".error")


def calls_made() -> int:
    from sessions.models import ToolCall

    return ToolCall.objects.count()


def test_refs_through_defs_and_definitions(page: Page, alice, schema_server):
    open_tool(page, schema_server, "refs")
    home = page.get_by_role("group", name="Home")
    home.get_by_label("Street").fill("1 Main St")
    home.get_by_label("City").fill("Springfield")
    page.get_by_role("group", name="Work").get_by_label("Street").fill("2 Side St")
    # A reference is a form of its own, not a JSON box.
    expect(page.locator("#form-fields textarea")).to_have_count(0)
    assert call(page) == {"home": {"street": "1 Main St", "city": "Springfield"}, "work": {"street": "2 Side St"}}
    assert page.problems == []


def test_a_cycle_stops_at_a_json_box(page: Page, alice, schema_server):
    open_tool(page, schema_server, "cycle")
    tree = page.get_by_role("group", name="Tree")
    tree.get_by_label("Label").fill("root")
    expect(tree.locator(".field", has=page.get_by_label("Next (JSON)"))).to_contain_text("This schema contains itself")
    tree.get_by_label("Next (JSON)").fill('{"label": "leaf", "next": {"label": "end"}}')
    assert call(page) == {"tree": {"label": "root", "next": {"label": "leaf", "next": {"label": "end"}}}}
    assert page.problems == []


def test_a_root_one_of_is_a_variant_picker_with_its_own_errors(page: Page, alice, schema_server):
    open_tool(page, schema_server, "lookup")
    picker = page.get_by_label("Arguments variant")
    expect(picker.locator("option")).to_have_text(["By name", "By id"])
    field(page, "Name").fill("A")
    page.get_by_role("button", name="Call tool").click()
    expect(error_beside(page, "Name")).to_have_text("At least 2 characters (this has 1).")

    picker.select_option(label="By id")
    expect(field(page, "Name")).to_have_count(0)
    field(page, "Id").fill("0")
    page.get_by_role("button", name="Call tool").click()
    expect(error_beside(page, "Id")).to_have_text("Must be at least 1.")
    assert calls_made() == 0  # the browser said no before anything was sent

    field(page, "Id").fill("7")
    assert call(page) == {"id": 7}
    # Back to the first variant: what was typed there is still there, and it is what is sent.
    picker.select_option(label="By name")
    field(page, "Name").fill("Ada")
    assert call(page) == {"name": "Ada"}
    assert page.problems == []


def test_variants_in_properties_by_discriminator_and_const_and_a_nullable_string(page: Page, alice, schema_server):
    open_tool(page, schema_server, "draw")
    shape = page.get_by_label("Shape variant")
    # Labelled by the discriminator's const (`kind`), since the variants have no title.
    expect(shape.locator("option")).to_have_text(["circle", "square"])
    shape.select_option(label="square")
    expect(field(page, "kind")).to_have_value("square")
    expect(field(page, "kind")).not_to_be_editable()
    field(page, "Side").fill("3")
    size = page.get_by_label("Size variant")
    expect(size.locator("option")).to_have_text(
        [
            "—",
            "Automatic",
            "Pixels",
        ]
    )
    size.select_option(label="Pixels")
    field(page, "Pixels").fill("64")
    # anyOf [string, null] is a text field, typed without quotes.
    field(page, "Note").fill("plain text")
    assert call(page) == {"shape": {"kind": "square", "side": 3}, "size": 64, "note": "plain text"}

    shape.select_option(label="circle")
    field(page, "Radius").fill("0")
    page.get_by_role("button", name="Call tool").click()
    expect(error_beside(page, "Radius")).to_have_text("Must be greater than 0.")
    field(page, "Radius").fill("2.5")
    size.select_option(label="Automatic")
    page.get_by_label("Note: send null").check()
    expect(field(page, "Note")).to_be_disabled()
    assert call(page) == {"shape": {"kind": "circle", "radius": 2.5}, "size": "auto", "note": None}
    assert page.problems == []


def test_nullable_types_send_null_only_when_asked(page: Page, alice, schema_server):
    open_tool(page, schema_server, "nullables")
    page.get_by_label("Nickname: send null").check()
    field(page, "Age").fill("5")
    # Motto is left empty and its toggle off: it is left out, not sent as null.
    assert call(page) == {"nickname": None, "age": 5}

    page.get_by_label("Nickname: send null").uncheck()
    field(page, "Nickname").fill("Ada")
    page.get_by_label("Age: send null").check()
    assert call(page) == {"nickname": "Ada", "age": None}
    assert page.problems == []


def test_all_of_is_merged_into_one_form(page: Page, alice, schema_server):
    open_tool(page, schema_server, "merged")
    field(page, "Title").fill("Dune")
    field(page, "Pages").fill("412")
    expect(page.locator("#form-fields textarea")).to_have_count(0)
    assert call(page) == {"title": "Dune", "pages": 412}
    assert page.problems == []


def test_every_constraint_is_shown_and_checked_before_sending(page: Page, alice, schema_server):
    open_tool(page, schema_server, "constraints")
    hints = {
        "Name": "2 to 5 characters",
        "Code": "matches ^[A-Z]{3}$",
        "Count": "a whole number · ≥ 1 · ≤ 10",
        "Ratio": "> 0 · < 1",
        "Step": "a whole number · a multiple of 5",
        "Email": "format: email",
        "Colour": "one of 3 values",
    }
    for label, hint in hints.items():
        expect(page.locator(".field", has=field(page, label)).locator(".constraints")).to_have_text(hint)
    tags = page.get_by_role("group", name="Tags")
    expect(tags.locator(".constraints").first).to_have_text("1 to 2 items")

    # Typing past maxLength is not cut: the field keeps it and says what is wrong.
    field(page, "Name").fill("abcdefgh")
    expect(field(page, "Name")).to_have_value("abcdefgh")
    field(page, "Code").fill("xABCx")  # found inside, but the pattern is anchored
    field(page, "Count").fill("11")
    field(page, "Ratio").fill("1")
    field(page, "Step").fill("7")
    field(page, "Email").fill("nope")
    for n in range(3):
        tags.get_by_role("button", name="Add Tags item").click()
        page.get_by_label(f"Tags {n + 1}", exact=True).fill(f"t{n + 1}")
    page.get_by_role("button", name="Call tool").click()
    expected = {
        "Name": "At most 5 characters (this has 8).",
        "Code": "Does not match the pattern ^[A-Z]{3}$.",
        "Count": "Must be at most 10.",
        "Ratio": "Must be less than 1.",
        "Step": "Must be a multiple of 5.",
        "Email": "This is not an email address.",
    }
    for label, message in expected.items():
        expect(error_beside(page, label)).to_have_text(message)
        expect(field(page, label)).to_have_attribute("aria-invalid", "true")
    expect(tags.locator(":scope > .error")).to_have_text("At most 2 items.")
    assert calls_made() == 0

    field(page, "Name").fill("Ada")
    field(page, "Code").fill("ABC")
    field(page, "Count").fill("10")
    field(page, "Ratio").fill("0.5")
    field(page, "Step").fill("15")
    field(page, "Email").fill("ada@example.org")
    tags.get_by_role("button", name="Remove Tags 3").click()
    field(page, "Colour").select_option(label="green")
    assert call(page) == {
        "name": "Ada", "code": "ABC", "count": 10, "ratio": 0.5, "step": 15,
        "email": "ada@example.org", "tags": ["t1", "t2"], "colour": "green",
    }  # fmt: skip
    expect(page.locator("#form-fields .error:not(:empty)")).to_have_count(0)
    assert page.problems == []


def test_array_items_are_numbered_again_after_a_removal(page: Page, alice, schema_server):
    open_tool(page, schema_server, "lines")
    lines = page.get_by_role("group", name="Lines", exact=True)
    for sku in ("A", "B", "C"):
        lines.get_by_role("button", name="Add Lines item").click()
        lines.get_by_label("SKU").last.fill(sku)
    lines.get_by_role("button", name="Remove Lines 2").click()
    lines.get_by_role("button", name="Add Lines item").click()
    item_legends = lines.locator(".array-items > li > fieldset > legend")
    expect(item_legends).to_have_text(["Lines 1", "Lines 2", "Lines 3"])
    expect(lines.get_by_role("button", name=re.compile(r"^Remove "))).to_have_text(
        ["Remove Lines 1", "Remove Lines 2", "Remove Lines 3"]
    )
    third = page.get_by_role("group", name="Lines 3")
    third.get_by_label("SKU").fill("D")

    # An error in what is now item 2 (once item 3) lands beside it.
    second = page.get_by_role("group", name="Lines 2")
    second.get_by_label("Quantity").fill("0")
    page.get_by_role("button", name="Call tool").click()
    expect(error_beside(second, "Quantity")).to_have_text("Must be at least 1.")
    second.get_by_label("Quantity").fill("2")
    assert call(page) == {"lines": [{"sku": "A"}, {"sku": "C", "quantity": 2}, {"sku": "D"}]}
    assert page.problems == []


def test_what_a_form_cannot_hold_is_edited_as_json(page: Page, alice, schema_server):
    open_tool(page, schema_server, "free_form")
    page.get_by_label("Counts (JSON)").fill('{"apples": 3, "pears": 5}')
    page.get_by_label("Pair (JSON)").fill('["x", 2]')
    assert call(page) == {"counts": {"apples": 3, "pears": 5}, "pair": ["x", 2]}
    assert page.problems == []


def test_a_pydantic_tool_with_nested_models(page: Page, alice, schema_server):
    open_tool(page, schema_server, "place_order")
    customer = page.get_by_role("group", name="Customer", exact=True)
    field(customer, "Name").fill("Ada")
    field(customer, "Email").fill("ada@example.org")
    address = customer.get_by_role("group", name="Address")
    address.get_by_label("Street").fill("1 Main St")
    expect(address.locator(".field", has=page.get_by_label("City")).locator(".constraints")).to_have_text(
        "at most 40 characters"
    )
    items = page.get_by_role("group", name="Items", exact=True)
    items.get_by_role("button", name="Add Items item").click()
    first = page.get_by_role("group", name="Items 1")
    first.get_by_label("Sku").fill("AB-1")
    first.get_by_label("Quantity").fill("2")
    pet = page.get_by_label("Pet variant")
    expect(pet.locator("option")).to_have_text(["Cat", "Dog"])
    pet.select_option(label="Dog")
    field(page, "Gift Note").fill("Happy birthday")
    page.locator("#tool-view").screenshot(path=str(SCREENSHOTS / "schema-form.png"))
    # Through the JSON editor and back: the form comes back with the same variant and values.
    page.get_by_label("Edit as JSON").check()
    assert json.loads(page.get_by_label("Arguments (JSON)").input_value())["pet"] == {"kind": "dog", "good": True}
    page.get_by_label("Edit as JSON").uncheck()
    expect(pet).to_have_value("1")
    expect(field(page.get_by_role("group", name="Items 1"), "Sku")).to_have_value("AB-1")
    assert call(page) == {
        "customer": {"name": "Ada", "email": "ada@example.org", "address": {"street": "1 Main St"}},
        "items": [{"sku": "AB-1", "quantity": 2}],
        "pet": {"kind": "dog", "good": True},
        "gift_note": "Happy birthday",
    }
    assert page.problems == []
