// Tasks: each row follows its task (`call.task`) and its call (`call.ended`) as they change, in any tab.
// The status message is the server's: it goes in as text only.
import { CALL_STATUS_LABELS, TASK_STATUSES, connect, h } from "./ws.js";

function row(callId) {
  return document.querySelector(`tr[data-call="${CSS.escape(String(callId))}"]`);
}

function showTask(tr, task) {
  if (!task || typeof task !== "object" || !task.status) return;
  const status = String(task.status);
  const message = task.message ? String(task.message) : "";
  tr.querySelector("td.task-state").replaceChildren(
    h("span", { class: `badge task-${TASK_STATUSES.has(status) ? status : "unknown"}`, text: status }),
    message ? h("span", { class: "small", text: ` ${message.length > 200 ? `${message.slice(0, 199)}…` : message}` }) : null);
  if (task.id) tr.querySelector("code.task-id").textContent = String(task.id);
}

connect({
  onEvent(event) {
    if (event.type !== "call.task" && event.type !== "call.ended") return;
    const tr = row(event.call);
    if (!tr) {
      // A task this page did not list (started since it opened): say so rather than reload under the reader.
      if (event.type === "call.task") document.getElementById("new-tasks").hidden = false;
      return;
    }
    showTask(tr, event.task);
    if (event.type === "call.ended") {
      tr.querySelector("td.call-state").replaceChildren(
        h("span", { class: `badge status-${event.status}`, text: CALL_STATUS_LABELS[event.status] || String(event.status) }));
    }
  },
});
