"""MCP tasks in real Chromium: a tool that runs only as a task (server-everything's
simulate-research-query) followed live from `working` through the server's question to `completed`;
a tool that may run as one (the demo's research, handshake era) run so with "Run as task"; then the
Tasks page lists the person's own tasks, and a call's page shows its task."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from servers.models import Effect, PermissionRule
from sessions.models import CallStatus, ToolCall
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool
from tests.conftest import EVERYTHING, EVERYTHING_MISSING

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


@pytest.mark.skipif(not EVERYTHING.exists(), reason=EVERYTHING_MISSING)
def test_a_task_is_followed_live_asks_its_question_and_is_listed_on_the_tasks_page(
    page: Page, alice, bob, demo_server, everything
):
    team = alice.memberships.get().team
    # The demo's research may run as a task only in the handshake era (sessions/mcp/demo_tasks.py).
    demo_server.protocol = "legacy"
    demo_server.save()
    PermissionRule.objects.create(team=team, pattern="mcp__demo", effect=Effect.ALLOW)
    # Neither belongs on alice's Tasks page: another person's task, and a call of hers that was no task.
    ToolCall.objects.create(
        user=bob,
        server=everything,
        server_name="everything",
        tool="simulate-research-query",
        status=CallStatus.SUCCEEDED,
        task={"id": "bobs-task", "status": "completed"},
    )
    ToolCall.objects.create(
        user=alice, server=demo_server, server_name="demo", tool="echo", status=CallStatus.SUCCEEDED
    )

    log_in(page, "alice", "pw-alice")
    open_playground(page, everything)
    pick_tool(page, "Simulate Research Query")
    expect(page.locator("#tool-badges")).to_contain_text("runs as a task")
    page.get_by_label("Topic").fill("python")
    page.get_by_label("Ambiguous").check()
    page.get_by_role("button", name="Call tool").click()

    task = page.locator("#task-status")
    expect(task).to_contain_text("working")
    # The server's question while the task is input_required: the usual form, answered in the page.
    form = page.locator("#elicitation")
    expect(form).to_be_visible()
    expect(form).to_contain_text("multiple interpretations")
    expect(task).to_have_attribute("data-status", "input_required")
    record = ToolCall.objects.get(user=alice, tool="simulate-research-query")
    expect(task.locator("code")).to_have_text(record.task["id"])
    page.screenshot(path=str(SCREENSHOTS / "tasks-playground.png"), full_page=True)
    form.get_by_label("Clarification").select_option(label="Python snake species")
    form.get_by_role("button", name="Accept").click()

    expect(task).to_have_attribute("data-status", "completed")
    expect(task).to_contain_text("completed")
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result")).to_contain_text("Research Report: python (snake)")
    expect(page.get_by_label("Run as task")).to_be_hidden()

    # "Run as task" on a tool that may run as one: the call carries `as_task` and becomes a task.
    open_playground(page, demo_server)
    pick_tool(page, "Research a topic (runs as a task)")
    expect(page.locator("#tool-badges")).to_contain_text("can run as a task")
    run_as_task = page.get_by_label("Run as task")
    expect(run_as_task).not_to_be_checked()
    run_as_task.check()
    page.get_by_label("Edit as JSON").check()
    page.get_by_label("Arguments (JSON)").fill('{"topic": "tides", "steps": 1, "step_seconds": 0.1}')
    page.get_by_role("button", name="Call tool").click()
    expect(task).to_have_attribute("data-status", "completed")
    expect(page.locator("#result")).to_contain_text("Report on tides")
    research = ToolCall.objects.get(user=alice, tool="research")
    assert research.as_task and research.task["status"] == "completed", research.task

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Tasks").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your tasks")
    rows = page.locator("#task-list tbody tr")
    expect(rows).to_have_count(2)
    # Newest first: the demo's research, then the research query with its final status.
    expect(rows.nth(0)).to_contain_text("research")
    expect(rows.nth(0)).to_contain_text("(run as task)")
    query = rows.nth(1)
    expect(query).to_contain_text("simulate-research-query")
    expect(query.locator("td.task-state")).to_contain_text("completed")
    expect(query.locator("code.task-id")).to_have_text(record.task["id"])
    expect(query.locator("td.call-state")).to_have_text("Succeeded")
    expect(page.locator("#task-list")).not_to_contain_text("bobs-task")
    page.screenshot(path=str(SCREENSHOTS / "tasks-page.png"), full_page=True)

    query.get_by_role("link").click()
    expect(page).to_have_url(re.compile(f"/calls/{record.pk}/$"))
    expect(page.locator("#call-task")).to_contain_text("completed")
    expect(page.locator("#call-task")).to_contain_text(record.task["id"])
    assert page.problems == []
