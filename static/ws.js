// A call's status as the pages name it (the records' own labels, sessions/models.py CallStatus).
export const CALL_STATUS_LABELS = {
  succeeded: "Succeeded",
  tool_error: "Tool error",
  failed: "Failed",
  timed_out: "Timed out",
  rejected: "Rejected",
  cancelled: "Cancelled",
  interrupted: "Interrupted",
};
// An MCP task's statuses (docs/tasks-and-apps.md); anything else a server says is shown as unknown.
export const TASK_STATUSES = new Set(["working", "input_required", "completed", "failed", "cancelled"]);

// The playground WebSocket: reconnects with backoff and queues messages sent while it is down.
export function connect({ onEvent, onStatus }) {
  let socket = null;
  let attempt = 0;
  const queue = [];

  function open() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/playground/");
    socket.addEventListener("open", () => {
      attempt = 0;
      onStatus?.("connected");
      while (queue.length && socket.readyState === WebSocket.OPEN) socket.send(queue.shift());
    });
    socket.addEventListener("message", (event) => {
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      onEvent(data);
    });
    socket.addEventListener("close", (event) => {
      if (event.code === 4401) {
        onStatus?.("logged-out");
        return;
      }
      onStatus?.("disconnected");
      setTimeout(open, Math.min(5000, 250 * 2 ** attempt++));
    });
  }
  open();

  return {
    send(message) {
      const text = JSON.stringify(message);
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(text);
      else queue.push(text);
    },
  };
}

// Build an element with attributes and children; text always goes in as text, never as HTML.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}
