// History: a running call can be cancelled here too (after a reload, from another tab), and its row
// follows the call to its end.
import { CALL_STATUS_LABELS, connect, h } from "./ws.js";

function cell(callId) {
  return document.querySelector(`td.call-status[data-call="${CSS.escape(callId)}"]`);
}

const socket = connect({
  onEvent(event) {
    if (event.type === "call.ended" && cell(event.call)) {
      cell(event.call).replaceChildren(h("span", { class: `badge status-${event.status}`, text: CALL_STATUS_LABELS[event.status] || event.status }),
        event.error ? h("span", { class: "muted small", text: ` ${event.error.slice(0, 80)}` }) : null);
      document.querySelector(`button[data-cancel="${CSS.escape(event.call)}"]`)?.remove();
    } else if (event.type === "cancel.sent" && cell(event.call)) {
      cell(event.call).append(h("span", { class: "muted small", text: " Cancelling…" }));
    } else if (event.type === "error" && String(event.ref || "").startsWith("cancel:")) {
      const callId = event.ref.slice("cancel:".length);
      const button = document.querySelector(`button[data-cancel="${CSS.escape(callId)}"]`);
      if (button) button.disabled = false;
      cell(callId)?.append(h("span", { class: "error small", role: "alert", text: ` ${event.message}` }));
    }
  },
});

for (const button of document.querySelectorAll("button[data-cancel]")) {
  button.addEventListener("click", () => {
    button.disabled = true;
    socket.send({ type: "cancel_call", ref: `cancel:${button.dataset.cancel}`, call: button.dataset.cancel });
  });
}
