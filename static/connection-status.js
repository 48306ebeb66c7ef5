// Live connection badges: the worker holding a session pushes `connection.status` events.
import { h } from "./ws.js";

const LABELS = {
  connected: "connected",
  pending: "connecting",
  "needs-auth": "needs authorization",
  failed: "failed",
  closed: "not connected",
};

export function updateConnectionBadges(event) {
  if (event.type !== "connection.status") return;
  for (const holder of document.querySelectorAll(`[data-connection="${Number(event.server)}"]`)) {
    if (holder.querySelector(".badge")?.textContent === "disabled") continue;
    const status = event.status in LABELS ? event.status : "failed";
    const badge = h("span", {
      class: status === "closed" ? "badge off" : `badge connection-${status}`,
      text: LABELS[status],
      title: event.error || null,
    });
    holder.replaceChildren(badge);
  }
}
