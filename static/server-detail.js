import { connect, h } from "./ws.js";
import { updateConnectionBadges } from "./connection-status.js";

const section = document.getElementById("test-connection");
const serverId = Number(section.dataset.server);
const button = document.getElementById("test-button");
const output = document.getElementById("test-result");

function render(test) {
  output.replaceChildren();
  if (test.ok) {
    output.append(
      h("p", {}, h("span", { class: "badge ok", text: "connected" }), " ",
        `${test.server_name} ${test.server_version} · protocol ${test.protocol_version}${test.era ? ` (${test.era} era)` : ""} · ${test.tool_count} tools · ` +
        `handshake ${test.handshake_ms} ms · round trip ${test.round_trip_ms} ms`),
    );
    if (test.instructions) output.append(h("p", { class: "muted pre-wrap instructions", text: `Instructions: ${test.instructions}` }));
    output.append(h("details", {}, h("summary", { text: "Capabilities" }), h("pre", { text: JSON.stringify(test.capabilities, null, 2) })));
  } else {
    output.append(h("p", {}, h("span", { class: "badge error", text: String(test.kind).replaceAll("_", " ") }), " ", test.message));
    if (test.stderr_tail) {
      output.append(h("details", { open: true }, h("summary", { text: "Server stderr (last lines)" }), h("pre", { text: test.stderr_tail })));
    }
  }
}

// -- tools: "Refresh tools" asks a worker to list them again, through this user's session ------------

const toolsSection = document.getElementById("tools");
const toolList = document.getElementById("tool-list");
const toolsStatus = document.getElementById("tools-status");
const refreshButton = document.getElementById("refresh-tools");

function renderTools(tools) {
  document.getElementById("tool-count").textContent = String(tools.length);
  toolList.replaceChildren(
    ...tools.map((tool) => {
      const link = new URL(toolsSection.dataset.playground, location.href);
      link.searchParams.set("server", serverId);
      link.searchParams.set("tool", tool.name);
      const annotations = tool.annotations || {};
      return h("li", {},
        h("a", { href: link.pathname + link.search }, h("strong", { text: tool.title || tool.name })), " ",
        h("code", { class: "small", text: tool.full_name || tool.name }), " ",
        annotations.readOnlyHint ? h("span", { class: "badge ok", text: "read-only" }) : null,
        annotations.destructiveHint ? h("span", { class: "badge error", text: "destructive" }) : null,
        h("div", { class: "muted small", text: tool.summary ?? tool.description ?? "" }));
    }),
  );
  if (!tools.length) toolList.append(h("li", { class: "muted", text: "The server lists no tools." }));
}

function refreshTools(reason) {
  if (refreshButton) refreshButton.disabled = true;
  toolsStatus.textContent = reason || "Listing tools…";
  socket.send({ type: "list_tools", server: serverId, refresh: true });
}

// -- the connection's own log: lines the server sent outside any call ------------------------------

const LOG_LINES = 50;
const logList = document.getElementById("server-log-lines");

function addLogLine(line) {
  document.getElementById("server-log-empty").hidden = true;
  logList.append(h("li", { class: `log-${line.level}` }, h("span", { class: "badge", text: line.level }),
    h("span", { class: "muted", text: ` ${new Date(line.at).toLocaleTimeString()} ` }), line.logger ? `${line.logger}: ` : "", line.data));
  while (logList.children.length > LOG_LINES) logList.firstElementChild.remove();
}

const socket = connect({
  onStatus(status) {
    if (status === "connected") socket.send({ type: "list_server_log", server: serverId, ref: "server-log" });
  },
  onEvent(event) {
    updateConnectionBadges(event);
    if (event.type === "server.logs" && event.server === serverId) {
      logList.replaceChildren();
      document.getElementById("server-log-empty").hidden = event.lines.length > 0;
      for (const line of event.lines) addLogLine(line);
      return;
    }
    if (event.type === "server.log" && event.server === serverId) {
      addLogLine(event);
      return;
    }
    if (event.type === "tools" && event.server === serverId) {
      if (refreshButton) refreshButton.disabled = false;
      if (event.error) {
        toolsStatus.textContent = `Cannot list tools: ${event.error.message}`;
      } else {
        renderTools(event.tools);
        toolsStatus.textContent = "Listed just now.";
      }
    } else if (event.type === "tools.changed" && event.server === serverId) {
      refreshTools("The server says its tools changed; listing them again…");
    } else if (event.type === "connection.tested" && event.server === serverId) {
      render(event);
      if (button) button.disabled = false;
      // The page follows the test: the tools it found, and (as this opens the person's own
      // connection to list them) the connection's status, without a reload.
      if (event.ok) refreshTools("Tested: listing the tools…");
    } else if (event.type === "error" && event.ref === "server-log") {
      document.getElementById("server-log-empty").textContent = event.message;
    } else if (event.type === "error" && button) {
      output.replaceChildren(h("p", { class: "error", text: event.message }));
      button.disabled = false;
    }
  },
});

refreshButton?.addEventListener("click", () => refreshTools());

button?.addEventListener("click", () => {
  button.disabled = true;
  output.replaceChildren(h("p", { class: "muted", text: "Testing… (a worker is connecting to the server)" }));
  socket.send({ type: "test_connection", server: serverId });
});

// The page renders both buttons disabled: a click before this module ran would do nothing at all.
if (button) button.disabled = false;
if (refreshButton) refreshButton.disabled = false;
