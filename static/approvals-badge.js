// The navigation's count of calls waiting for the person's approval, on every page, and the browser
// notification of a new one while the portal's tab is hidden. The server draws the first count
// (sessions/context_processors.py); this page's socket keeps it true. The inbox (approvals.js) listens
// on the same socket; the playground keeps its own (static/playground.js), so it opens two.
import { connect } from "./ws.js";

const NOTIFY_KEY = "portal.notify-approvals";
const link = document.getElementById("nav-approvals");
const badge = document.getElementById("approvals-count");
const listeners = [];

/** Who asked, in the person's words: the playground, an MCP App by its ui:// URI, or the agent's client by name and version. */
export function askedBy(approval) {
  if (approval.via === "app") return `The MCP App ${approval.client}`;
  return approval.via === "playground" ? "Playground" : approval.client || "An MCP client";
}

export function notificationsWanted() {
  try {
    return localStorage.getItem(NOTIFY_KEY) === "on";
  } catch {
    return false; // storage refused (a private window's settings): no notifications
  }
}

export function setNotificationsWanted(on) {
  try {
    if (on) localStorage.setItem(NOTIFY_KEY, "on");
    else localStorage.removeItem(NOTIFY_KEY);
  } catch {
    // nothing to remember it in: the button is offered again next time
  }
}

function setCount(count) {
  if (!badge) return;
  badge.querySelector("[data-count]").textContent = String(count);
  badge.hidden = count === 0;
}

function notify(event) {
  if (!document.hidden || !("Notification" in window)) return;
  if (Notification.permission !== "granted" || !notificationsWanted()) return;
  // One notification per approval, however many of the person's tabs heard of it.
  const shown = new Notification(`${askedBy(event)} asks to run ${event.server_name} · ${event.tool}`, {
    body: event.reason || "",
    tag: `approval:${event.approval}`,
  });
  shown.addEventListener("click", () => {
    window.focus();
    location.href = link?.href || "/approvals/";
    shown.close();
  });
}

let recount = null;
function askAgain() {
  // A burst of events (several calls, "Allow all") asks once.
  clearTimeout(recount);
  recount = setTimeout(() => socket.send({ type: "list_approvals", ref: "badge" }), 100);
}

const socket = connect({
  onStatus(status) {
    if (status === "connected") socket.send({ type: "list_approvals", ref: "badge" });
    for (const listener of listeners) listener.onStatus?.(status);
  },
  onEvent(event) {
    if (event.type === "approvals") setCount(event.approvals.length);
    else if (event.type === "approval.requested") {
      notify(event);
      askAgain();
    } else if (event.type === "approval.ended") askAgain();
    for (const listener of listeners) listener.onEvent(event);
  },
});

/** This page's portal socket, for another module of the page (the inbox): its events and statuses. */
export function listen({ onEvent, onStatus }) {
  listeners.push({ onEvent, onStatus });
  return socket;
}
