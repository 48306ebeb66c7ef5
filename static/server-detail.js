import { connect, h } from "./ws.js";

const section = document.getElementById("test-connection");
const serverId = Number(section.dataset.server);
const button = document.getElementById("test-button");
const output = document.getElementById("test-result");

function render(test) {
  output.replaceChildren();
  if (test.ok) {
    output.append(
      h("p", {}, h("span", { class: "badge ok", text: "connected" }), " ",
        `${test.server_name} ${test.server_version} · protocol ${test.protocol_version} · ${test.tool_count} tools · ` +
        `handshake ${test.handshake_ms} ms · round trip ${test.round_trip_ms} ms`),
    );
    if (test.instructions) output.append(h("p", { class: "muted", text: `Instructions: ${test.instructions}` }));
    output.append(h("details", {}, h("summary", { text: "Capabilities" }), h("pre", { text: JSON.stringify(test.capabilities, null, 2) })));
  } else {
    output.append(h("p", {}, h("span", { class: "badge error", text: String(test.kind).replaceAll("_", " ") }), " ", test.message));
    if (test.stderr_tail) {
      output.append(h("details", { open: true }, h("summary", { text: "Server stderr (last lines)" }), h("pre", { text: test.stderr_tail })));
    }
  }
}

const socket = connect({
  onEvent(event) {
    if (event.type === "connection.tested" && event.server === serverId) {
      render(event);
      if (button) button.disabled = false;
    } else if (event.type === "error" && button) {
      output.replaceChildren(h("p", { class: "error", text: event.message }));
      button.disabled = false;
    }
  },
});

button?.addEventListener("click", () => {
  button.disabled = true;
  output.replaceChildren(h("p", { class: "muted", text: "Testing… (a worker is connecting to the server)" }));
  socket.send({ type: "test_connection", server: serverId });
});
