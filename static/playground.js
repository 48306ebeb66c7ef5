import { TASK_STATUSES, connect, h } from "./ws.js";
import { buildForm, FieldError, nonFinite, showErrors } from "./schema-form.js";
import { nextRef, renderResourceContents } from "./content.js";
import { renderDiff } from "./diff.js";
import { askedBy } from "./approvals-badge.js";
import { clearApp, handleAppEvent, isAppCall, showApp, startApps } from "./apps.js";

const catalog = JSON.parse(document.getElementById("catalog").textContent);
const selected = JSON.parse(document.getElementById("selected").textContent);
const $ = (id) => document.getElementById(id);

// `call` is the call the result pane shows (started here, or picked up from another tab or before a
// reload); `inFlight` says it has not ended, and while it has not the page starts no other.
const state = { server: null, tool: null, form: null, call: null, callClass: "write", ref: 0, pendingRef: null, inFlight: false, arguments: {} };
const servers = new Map(catalog.map((server) => [server.id, server]));

const TERMINAL_LABELS = {
  succeeded: "Succeeded",
  tool_error: "The tool reported an error",
  failed: "Failed",
  timed_out: "Timed out",
  rejected: "Rejected",
  cancelled: "Cancelled",
  interrupted: "Interrupted: the portal stopped",
};
const EFFECT_LABELS = { allow: "runs without asking", ask: "asks you first", deny: "denied" };

// -- server and tool picking ---------------------------------------------------------------

function selectServer(id, { refresh = false } = {}) {
  state.server = servers.get(id) || null;
  if (!state.server) return;
  $("server-select").value = String(id);
  renderToolList();
  $("tools-status").textContent = "Listing tools…";
  socket.send({ type: "list_tools", server: id, refresh });
}

function renderToolList() {
  const list = $("tool-list");
  const filter = $("tool-filter").value.trim().toLowerCase();
  // The buttons are rebuilt; keep keyboard focus on the same tool instead of dropping it to <body>.
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset.tool : undefined;
  list.replaceChildren();
  for (const tool of state.server?.tools || []) {
    const text = `${tool.name} ${tool.title || ""} ${tool.description || ""}`.toLowerCase();
    if (filter && !text.includes(filter)) continue;
    const current = state.tool && state.tool.name === tool.name;
    list.append(h("li", {}, h("button", {
      type: "button",
      class: current ? "tool current" : "tool",
      "aria-current": current ? "true" : null,
      "data-tool": tool.name,
      onclick: () => selectTool(tool.name),
    }, h("span", { class: "tool-name", text: tool.title || tool.name }), h("code", { class: "small", text: tool.name }),
      taskBadge(tool),
      // The list shows the summary (cut at 2,048 characters); the tool pane shows the full description.
      h("span", { class: "tool-summary", text: tool.summary ?? "" }))));
  }
  if (focused !== undefined) [...list.querySelectorAll("button.tool")].find((b) => b.dataset.tool === focused)?.focus();
}

// A tool's `task_support` (its execution.taskSupport): "required" runs only as an MCP task, "optional"
// may ("Run as task"); "forbidden", or a list without the field, gets no badge.
function taskBadge(tool) {
  if (tool.task_support === "required") {
    return h("span", { class: "badge task", title: "The server runs this tool as an MCP task: the portal follows it and shows its status.", text: "runs as a task" });
  }
  if (tool.task_support === "optional") {
    return h("span", { class: "badge task", title: "You may run this tool as an MCP task: tick \"Run as task\" beside Call tool.", text: "can run as a task" });
  }
  return "";
}

function badges(annotations = {}) {
  const out = [];
  if (annotations.readOnlyHint) out.push(h("span", { class: "badge ok", text: "read-only" }));
  if (annotations.destructiveHint) out.push(h("span", { class: "badge error", text: "destructive" }));
  if (annotations.idempotentHint) out.push(h("span", { class: "badge", text: "idempotent" }));
  if (annotations.openWorldHint) out.push(h("span", { class: "badge", text: "open world" }));
  return out;
}

// The tool's badges and what happens when the person calls it now (and why): after "Always allow"
// the page lists the tools again, and this shows the new decision.
function renderDecision(tool) {
  const described = state.server.described?.[tool.name];
  $("tool-badges").replaceChildren(...badges(tool.annotations), taskBadge(tool), described ? h("span", { class: "badge", text: described.class }) : "");
  $("tool-decision").replaceChildren(...(described ? [
    h("span", { class: `badge effect-${described.decision.effect}`, text: EFFECT_LABELS[described.decision.effect] }), " ",
    described.decision.reason,
  ] : []));
}

function selectTool(name, initial) {
  const tool = (state.server?.tools || []).find((t) => t.name === name);
  if (!tool) return;
  const same = state.tool?.name === tool.name; // the same tool, listed again
  state.tool = tool;
  $("tool-empty").hidden = true;
  $("tool-view").hidden = false;
  $("tool-title").textContent = tool.title || tool.annotations?.title || tool.name;
  $("tool-full-name").textContent = state.server.prefix + tool.name;
  renderDecision(tool);
  // "Run as task" only where the person may choose; a new tool starts unticked.
  const optional = tool.task_support === "optional";
  if (!optional || !same) $("run-as-task").checked = false;
  $("run-as-task-choice").hidden = !optional;
  $("tool-description").textContent = tool.description || "";
  $("json-mode").checked = false;
  renderForm(initial);
  renderToolList();
  const url = new URL(location.href);
  url.searchParams.set("server", state.server.id);
  url.searchParams.set("tool", tool.name);
  history.replaceState(null, "", url);
}

function renderForm(initial) {
  state.form = buildForm(state.tool.inputSchema, initial);
  $("form-fields").replaceChildren(state.form.el);
  $("form-fields").hidden = false;
  $("json-editor").hidden = true;
  $("form-error").textContent = "";
}

function readArguments() {
  if ($("json-mode").checked) {
    const text = $("json-arguments").value.trim() || "{}";
    let value;
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new FieldError([], `The arguments are not valid JSON: ${error.message}`);
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) throw new FieldError([], "The arguments must be a JSON object.");
    const infinite = nonFinite(value);
    if (infinite.length) throw new FieldError(infinite[0].path, infinite[0].message, infinite);
    return value;
  }
  return state.form.read();
}

// The same JSON value, whatever the order of its keys.
function canonicalJSON(value) {
  return JSON.stringify(value, (_, v) => (v && typeof v === "object" && !Array.isArray(v)
    ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]])) : v));
}

// What the person has typed so far, errors or not: a form rebuilt for a changed tool starts from it.
function typedArguments() {
  try {
    if (!$("json-mode").checked) return state.form?.value();
    const value = JSON.parse($("json-arguments").value || "{}");
    return value && typeof value === "object" && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

$("json-mode").addEventListener("change", (event) => {
  if (event.target.checked) {
    try {
      // What the form holds, even where a field is still wrong: the JSON editor is where to fix it.
      $("json-arguments").value = JSON.stringify(state.form.value(), null, 2);
    } catch {
      $("json-arguments").value = "{}";
    }
    $("form-fields").hidden = true;
    $("json-editor").hidden = false;
    $("json-arguments").focus();
  } else {
    let values;
    try {
      values = JSON.parse($("json-arguments").value || "{}");
    } catch {
      values = undefined;
    }
    renderForm(values);
  }
});

// -- calling -------------------------------------------------------------------------------

// A name for one intent to call: the portal answers a second message with the same name with the
// first call's events (a resend after a reconnect, two submits that raced past the check below).
function requestId() {
  return globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

$("call-form").addEventListener("submit", (event) => {
  event.preventDefault();
  // One intent is one call: Ctrl+Enter (or a second click) while the shown call runs starts nothing.
  if (!state.tool || state.inFlight) return;
  let args;
  try {
    args = readArguments();
  } catch (error) {
    if (error instanceof FieldError) {
      showErrors($("json-mode").checked ? h("div") : $("form-fields"), error.errors, $("form-error"));
      return;
    }
    throw error;
  }
  showErrors($("form-fields"), [], $("form-error"));
  state.pendingRef = `c${++state.ref}`;
  state.call = null;
  state.inFlight = true;
  state.callClass = state.server.described?.[state.tool.name]?.class || "write";
  state.arguments = args;
  $("call-button").disabled = true;
  setStatus("pending", `Calling ${state.tool.name}…`);
  $("result").replaceChildren();
  clearApp();
  $("log-lines").replaceChildren();
  $("log-pane").hidden = true;
  closeElicitation();
  closeSampling();
  $("progress-message").textContent = "";
  $("call-progress").hidden = true;
  showTask(null);
  const message = { type: "call", ref: state.pendingRef, request_id: requestId(), server: state.server.id, tool: state.tool.name, arguments: args };
  // Only where the tool lets the person choose; a "required" one runs as a task whatever the page says.
  if (state.tool.task_support === "optional" && $("run-as-task").checked) message.as_task = true;
  socket.send(message);
});

document.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !$("tool-view").hidden) {
    event.preventDefault();
    $("call-form").requestSubmit();
  }
});

function setStatus(kind, text) {
  $("call-status").replaceChildren(h("span", { class: `badge status-${kind}`, text: kind.replace("_", " ") }), " ", text);
}

function onCallEvent(event) {
  if (event.type === "call.ended") forgetOther(event.call);
  if (event.type === "call.accepted") {
    if (event.ref !== state.pendingRef) return;
    state.call = event.call;
    forgetOther(event.call);
    if (event.status === "awaiting_approval") setStatus("awaiting_approval", "Waiting for your approval…");
    else if (event.status === "pending") setStatus("pending", "Waiting for a worker…");
    return;
  }
  if (event.call !== state.call) {
    // Kept for "Show": the pane then starts from the task's latest status.
    if (event.type === "call.task" && others.has(event.call)) others.get(event.call).task = event.task;
    // A call this page does not show (another tab's, or one started before a reload): catch up.
    if (event.type !== "call.ended" && !others.has(event.call)) askForCalls();
    return;
  }
  if (event.type === "call.started") {
    setStatus("running", "Running…");
    $("cancel-button").hidden = false;
    $("cancel-button").disabled = false;
  } else if (event.type === "call.log") {
    addLogLine(event);
  } else if (event.type === "call.progress") {
    showProgress(event);
  } else if (event.type === "call.task") {
    showTask(event.task);
  } else if (event.type === "call.ended") {
    state.inFlight = false;
    $("call-button").disabled = false;
    $("cancel-button").hidden = true;
    renderOthers(); // their Show buttons work again
    closeElicitation();
    closeSampling();
    $("call-progress").hidden = true;
    const took = event.duration_ms != null ? ` in ${event.duration_ms.toFixed(1)} ms` : "";
    setStatus(event.status, `${TERMINAL_LABELS[event.status] || event.status}${took}`);
    // The task's final status stays in view; an event without one leaves what the page last saw.
    if (event.task) showTask(event.task);
    renderOutcome(event);
    const server = servers.get(event.server);
    const tool = (server?.tools || []).find((t) => t.name === event.tool);
    if (tool && event.result && (event.status === "succeeded" || event.status === "tool_error")) {
      showApp({ server: server.id, serverName: server.name, tool, arguments: state.arguments, result: event.result });
    }
  }
}

// The call's MCP task, as the worker last saw it: its status, the server's status message and its id.
// All of it comes from the server, so it goes in as text only.

function showTask(task) {
  const line = $("task-status");
  if (!task || typeof task !== "object" || !task.status) {
    line.hidden = true;
    line.replaceChildren();
    return;
  }
  const status = String(task.status);
  const known = TASK_STATUSES.has(status);
  line.dataset.status = known ? status : "unknown";
  line.replaceChildren(
    "Task ", h("span", { class: `badge task-${known ? status : "unknown"}`, text: status.replace("_", " ") }),
    task.message ? ` — ${String(task.message)}` : "",
    task.id ? h("span", { class: "task-id" }, " · id ", h("code", { text: String(task.id) })) : "");
  line.hidden = false;
}

function showProgress(event) {
  const bar = $("call-progress");
  bar.hidden = false;
  if (event.total) {
    bar.max = event.total;
    bar.value = event.progress;
  } else {
    bar.removeAttribute("value");
  }
  $("progress-message").textContent = event.message || (event.total ? `${event.progress} of ${event.total}` : `${event.progress}`);
}

// -- calls in flight elsewhere: another tab's, or this page's before a reload ------------------

const others = new Map(); // call id → its entry in the `calls` answer, for calls the pane does not show
let asking = null;
let askAgain = false;

// At most twice a second however many events come, and once more after the last of a burst: a form
// requested just after the answer was read must not be missed.
function askForCalls() {
  if (asking) {
    askAgain = true;
    return;
  }
  socket.send({ type: "list_calls" });
  asking = setTimeout(() => {
    asking = null;
    if (askAgain) {
      askAgain = false;
      askForCalls();
    }
  }, 500);
}

function forgetOther(callId) {
  if (others.delete(callId)) renderOthers();
}

function renderOthers() {
  const list = $("running-calls");
  list.replaceChildren(...[...others.values()].map((entry) => h("li", {},
    h("span", { class: `badge status-${entry.status}`, text: entry.status.replace("_", " ") }), " ",
    h("code", { text: entry.tool }), ` on ${entry.server_name} `,
    h("button", { type: "button", class: "link", text: "Show", disabled: state.inFlight, onclick: () => showCall(entry) }))));
  list.hidden = !others.size;
}

// The result pane takes over a call it did not start: its status, progress and open forms now; its
// log lines and its end as they come.
function showCall(entry) {
  others.delete(entry.call);
  state.call = entry.call;
  state.pendingRef = null;
  state.inFlight = true;
  state.callClass = servers.get(entry.server)?.described?.[entry.tool]?.class || "write";
  state.arguments = entry.arguments || {};
  $("call-button").disabled = true;
  $("result").replaceChildren();
  clearApp();
  $("log-lines").replaceChildren();
  $("log-pane").hidden = true;
  $("progress-message").textContent = "";
  $("call-progress").hidden = true;
  closeElicitation();
  closeSampling();
  showTask(entry.task);
  const running = entry.status === "running";
  setStatus(entry.status, {
    running: `Running ${entry.tool}…`,
    pending: `${entry.tool}: waiting for a worker…`,
    awaiting_approval: `${entry.tool}: waiting for your approval…`,
  }[entry.status] || entry.tool);
  $("cancel-button").hidden = !running;
  $("cancel-button").disabled = false;
  if (entry.progress) showProgress(entry.progress);
  const form = entry.elicitations.at(-1);
  if (form) showElicitation(form);
  const asked = entry.sampling.at(-1);
  if (asked) showSampling(asked);
  renderOthers();
}

function onCalls(event) {
  const shown = event.calls.find((entry) => entry.call === state.call);
  others.clear();
  // An app's calls in flight are the app's to follow (static/apps.js), not the result pane's.
  for (const entry of event.calls) if (entry.call !== state.call && !isAppCall(entry.call)) others.set(entry.call, entry);
  if (shown) {
    // This page's own call, after the socket came back: forms opened meanwhile are shown.
    if (!elicitation.id && shown.elicitations.length) showElicitation(shown.elicitations.at(-1));
    if (!sampling.id && shown.sampling.length) showSampling(shown.sampling.at(-1));
    if (shown.progress) showProgress(shown.progress);
    if (shown.task) showTask(shown.task); // a status that changed while the socket was down
  } else if (state.call && state.inFlight) {
    // The shown call ended while the socket was down: its record has the outcome.
    state.inFlight = false;
    $("call-button").disabled = false;
    $("cancel-button").hidden = true;
    setStatus("done", "The call ended while the page was away: see the History for its outcome.");
  }
  if (!state.inFlight && others.size) {
    // Nothing shown here is running: show the newest call in flight.
    showCall([...others.values()].at(-1));
    return;
  }
  renderOthers();
}

function renderOutcome(event) {
  const out = $("result");
  out.replaceChildren();
  if (event.error) {
    out.append(h("div", { class: "call-error", role: "alert" }, h("strong", { text: event.error_kind ? `${event.error_kind}: ` : "" }), event.error));
  }
  if (event.error_kind === "needs_auth") {
    out.append(h("p", {}, h("a", { class: "button primary", href: `/credentials/#server-${event.server}`, text: "Connect your account" })));
  }
  if (event.details?.errors) showArgumentErrors(event.details.errors);
  for (const wanted of event.details?.elicitations || []) {
    // Error -32042: pages to visit before the call can work; then the person retries it.
    out.append(h("div", { class: "elicitation" }, h("p", { text: wanted.message || "" }), urlBlock(String(wanted.url || "")),
      h("div", { class: "row" },
        webPage(String(wanted.url || "")) ? h("button", { type: "button", text: "Open the page", onclick: () => openPage(String(wanted.url)) }) : null,
        h("button", { type: "button", class: "primary", text: "Retry the call", onclick: () => $("call-form").requestSubmit() }))));
  }
  if (event.details?.stderr_tail) {
    out.append(h("details", { open: true }, h("summary", { text: "Server stderr (last lines)" }), h("pre", { text: event.details.stderr_tail })));
  }
  if (event.omitted) out.append(h("p", { class: "call-note", role: "status", text: event.omitted }));
  if (event.details?.truncated) {
    const cut = event.details.truncated;
    // One notice, written by the worker (sessions/mcp/truncation.py describe): returned, shown, downloadable.
    const whole = cut.kept_bytes >= cut.full_bytes;
    out.append(h("p", { class: "muted small truncation-notice" }, `${cut.notice || "The output was cut."} `,
      h("a", { href: `/calls/${event.call}/full-output`, text: whole ? "Download the full output" : "Download the first part of the output" })));
  }
  if (!event.result) return;
  if (state.callClass === "write" || event.status === "tool_error") {
    // A tool's error is read, not folded away under "Read-only result".
    out.append(renderResult(event.result));
  } else {
    // Search and read results can be long and are rarely the point: they fold away, as Claude Code folds them.
    out.append(h("details", { class: "result-fold", open: true },
      h("summary", { text: `${state.callClass === "search" ? "Search" : "Read-only"} result (click to fold)` }),
      renderResult(event.result)));
  }
}

// -- the conversation: cancel, server logs, elicitation ------------------------------------

$("cancel-button").addEventListener("click", () => {
  if (!state.call) return;
  $("cancel-button").disabled = true;
  socket.send({ type: "cancel_call", call: state.call });
});

function addLogLine(event) {
  $("log-pane").hidden = false;
  // A flooding server's lines are thinned out by the worker, which says how many it left out.
  if (event.skipped) $("log-lines").append(h("li", { class: "muted small", text: `(${event.skipped} messages not shown)` }));
  const text = typeof event.data === "string" ? event.data : JSON.stringify(event.data);
  $("log-lines").append(h("li", { class: `log-${event.level}` },
    h("span", { class: "badge", text: event.level }), event.logger ? ` ${event.logger}: ` : " ", text));
}

const elicitation = { id: null, form: null };

// Only a web page is offered: the portal drops other schemes, and the browser checks again.
function webPage(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed : null;
  } catch {
    return null;
  }
}

function openPage(url) {
  if (webPage(url)) window.open(url, "_blank", "noopener,noreferrer");
}

// A page to visit: its address in full (the host in bold), opened only when the person says so.
function urlBlock(url) {
  const page = webPage(url);
  return h("p", { class: "url-elicitation" }, "The server wants you to open ",
    page ? h("strong", { text: page.host }) : null, ": ", h("code", { text: url }));
}

function showElicitation(event) {
  elicitation.id = event.elicitation;
  elicitation.mode = event.mode;
  elicitation.url = event.url;
  $("elicitation-message").textContent = event.message;
  $("elicitation-error").textContent = "";
  if (event.mode === "url") {
    elicitation.form = null;
    $("elicitation-fields").replaceChildren(urlBlock(event.url));
    $("elicitation-accept").textContent = "Open the page";
  } else {
    elicitation.form = buildForm(event.schema, event.defaults || {});
    $("elicitation-fields").replaceChildren(elicitation.form.el);
    $("elicitation-accept").textContent = "Accept";
  }
  $("elicitation").hidden = false;
  $("elicitation").querySelector("input, select, textarea, button.primary")?.focus();
}

function closeElicitation() {
  elicitation.id = null;
  $("elicitation").hidden = true;
  $("elicitation-fields").replaceChildren();
}

function answerElicitation(action) {
  if (!elicitation.id) return;
  let content;
  if (action === "accept" && elicitation.mode === "url") {
    openPage(elicitation.url); // the person's consent: now, and only now, the page opens
  } else if (action === "accept") {
    try {
      content = elicitation.form.read();
    } catch (error) {
      if (error instanceof FieldError) {
        showErrors($("elicitation-fields"), error.errors, $("elicitation-error"));
        return;
      }
      throw error;
    }
  }
  socket.send({ type: "answer_elicitation", ref: `e:${elicitation.id}`, elicitation: elicitation.id, action, content });
}

$("elicitation").addEventListener("submit", (event) => {
  event.preventDefault();
  answerElicitation("accept");
});
$("elicitation-decline").addEventListener("click", () => answerElicitation("decline"));
$("elicitation-cancel").addEventListener("click", () => answerElicitation("cancel"));

function onElicitationEvent(event) {
  if (event.type === "elicitation.auto_answered" && event.call === state.call) {
    $("progress-message").textContent = `The server asked "${event.message}"; your team's automatic answer (${event.action}) was given.`;
  } else if (event.type === "elicitation.completed" && event.call === state.call) {
    $("progress-message").textContent = "The server says the page is done.";
  } else if (event.type === "elicitation.requested" && event.call === state.call) {
    showElicitation(event);
  } else if (event.type === "elicitation.requested") {
    askForCalls(); // another tab's call asks: shown here too when nothing else is
  } else if ((event.type === "elicitation.answered" || event.type === "elicitation.ended") && event.elicitation === elicitation.id) {
    closeElicitation();
  } else if (event.type === "error" && event.ref === `e:${elicitation.id}`) {
    // The portal refused the answer (it checks it against the schema too): show why, keep the form.
    showErrors($("elicitation-fields"), event.errors || [], $("elicitation-error"));
    if (!event.errors) $("elicitation-error").textContent = event.message;
  }
}

// Sampling: the server's messages shown, the person writes (or edits) the reply and approves it.
const sampling = { id: null };

function samplingText(content) {
  const blocks = Array.isArray(content) ? content : [content];
  return blocks.map((block) => (block?.type === "text" ? block.text : `[${block?.type || "unknown"} content]`)).join("\n");
}

function showSampling(event) {
  const request = event.request || {};
  sampling.id = event.sampling;
  $("sampling-system").textContent = request.systemPrompt ? `System prompt: ${request.systemPrompt}` : "";
  $("sampling-messages").replaceChildren(...(request.messages || []).map((message) =>
    h("li", {}, h("span", { class: "badge", text: message.role }), " ", h("span", { class: "pre-wrap", text: samplingText(message.content) }))));
  $("sampling-limits").textContent = `At most ${request.maxTokens} tokens` +
    (request.temperature != null ? `, temperature ${request.temperature}` : "") +
    (request.modelPreferences?.hints?.length ? `; model hints: ${request.modelPreferences.hints.map((hint) => hint.name).join(", ")}` : "");
  $("sampling-reply").value = "";
  $("sampling-error").textContent = "";
  $("sampling").hidden = false;
  $("sampling-reply").focus();
}

function closeSampling() {
  sampling.id = null;
  $("sampling").hidden = true;
}

function answerSampling(action) {
  if (!sampling.id) return;
  const message = { type: "answer_sampling", ref: `s:${sampling.id}`, sampling: sampling.id, action };
  if (action === "approve") {
    const text = $("sampling-reply").value;
    if (!text.trim()) {
      $("sampling-error").textContent = "Write the reply first (or decline).";
      return;
    }
    Object.assign(message, { text, model: $("sampling-model").value.trim() || "human" });
  }
  socket.send(message);
}

$("sampling").addEventListener("submit", (event) => {
  event.preventDefault();
  answerSampling("approve");
});
$("sampling-decline").addEventListener("click", () => answerSampling("decline"));
$("sampling-reply").addEventListener("input", () => { $("sampling-error").textContent = ""; });

function onSamplingEvent(event) {
  if (event.type === "sampling.requested" && event.call === state.call) {
    showSampling(event);
  } else if (event.type === "sampling.requested") {
    askForCalls();
  } else if ((event.type === "sampling.answered" || event.type === "sampling.ended") && event.sampling === sampling.id) {
    closeSampling();
  } else if (event.type === "error" && event.ref === `s:${sampling.id}`) {
    $("sampling-error").textContent = event.message;
  }
}

// Schema errors go beside their fields; in JSON mode those fields are hidden, so every error
// goes under the JSON box instead, with its path.
function showArgumentErrors(errors) {
  const fields = $("json-mode").checked ? h("div") : $("form-fields");
  showErrors(fields, errors, $("form-error"));
}

const SAFE_MEDIA = /^(image|audio)\/[a-z0-9.+-]+$/i;

function renderResult(result) {
  const box = h("div", { class: result.isError ? "result is-error" : "result" });
  for (const block of result.content || []) box.append(renderBlock(block));
  if (result.structuredContent != null) {
    box.append(h("section", { class: "structured" }, h("h3", { text: "Structured content" }),
      h("pre", { class: "json", text: JSON.stringify(result.structuredContent, null, 2) })));
  }
  return box;
}

function renderBlock(block) {
  switch (block.type) {
    case "text":
      return h("pre", { class: "text-block", text: block.text });
    case "image":
      if (!SAFE_MEDIA.test(block.mimeType || "")) return h("p", { class: "muted", text: `An image of type ${block.mimeType}` });
      return h("img", { class: "image-block", src: `data:${block.mimeType};base64,${block.data}`, alt: "Image returned by the tool" });
    case "audio":
      if (!SAFE_MEDIA.test(block.mimeType || "")) return h("p", { class: "muted", text: `Audio of type ${block.mimeType}` });
      return h("audio", { controls: true, src: `data:${block.mimeType};base64,${block.data}` });
    case "resource_link":
      return renderResourceLink(block);
    case "resource": {
      const res = block.resource || {};
      return h("div", { class: "resource" }, h("code", { text: res.uri || "" }),
        res.text != null ? h("pre", { text: res.text }) : h("p", { class: "muted", text: `binary, ${res.mimeType || "unknown type"}` }));
    }
    default:
      return h("pre", { class: "json", text: JSON.stringify(block, null, 2) });
  }
}

// A link to a resource: read it (resources/read on the same server) where it stands.
const links = new Map(); // ref → the element the contents go into

function renderResourceLink(block) {
  const box = h("div", { class: "resource-contents" });
  const read = h("button", { type: "button", class: "link", text: "Read it", onclick: () => {
    const ref = nextRef("link");
    links.set(ref, box);
    read.disabled = true;
    box.replaceChildren(h("p", { class: "muted small", text: "Reading…" }));
    socket.send({ type: "read_resource", server: state.server.id, uri: String(block.uri || ""), ref });
  } });
  const title = block.title || block.name;
  return h("div", { class: "resource-link" }, h("p", {}, "Resource: ", h("code", { text: block.uri }), title ? ` (${title})` : "",
    block.mimeType ? ` · ${block.mimeType}` : "", " ", read), block.description ? h("p", { class: "muted small", text: block.description }) : null, box);
}

function onResourceRead(event) {
  const box = links.get(event.ref);
  if (!box) return;
  links.delete(event.ref);
  box.replaceChildren(...(event.error
    ? [h("div", { class: "call-error", role: "alert" }, h("strong", { text: `${event.error.kind}: ` }), event.error.message)]
    : event.contents.map(renderResourceContents)));
}

// -- approvals ------------------------------------------------------------------------------

const approvals = new Map(); // id → approval.requested event, oldest first
const dialog = $("approval-dialog");
let shown = null;
let countdown = null;

function addApproval(event) {
  approvals.set(event.approval, { ...event, deadline: Date.now() + event.expires_in * 1000 });
  if (event.call === state.call) setStatus("awaiting_approval", "Waiting for your approval…");
}

function renderPending() {
  const box = $("pending-approvals");
  box.replaceChildren();
  if (!approvals.size) return;
  const count = approvals.size === 1 ? "1 call waits" : `${approvals.size} calls wait`;
  box.append(h("p", { class: "call-error" }, `${count} for your approval. `,
    h("button", { type: "button", class: "link", onclick: () => showApproval(), text: "Review" })));
}

function showApproval(id) {
  const approval = approvals.get(id) || approvals.values().next().value;
  if (!approval) {
    closeApproval();
    return;
  }
  shown = approval.approval;
  // A call an agent or an MCP App made says so: the person is not approving their own click.
  const byOther = approval.via && approval.via !== "playground";
  $("approval-caller-label").hidden = $("approval-caller").hidden = !byOther;
  $("approval-caller").textContent = byOther ? askedBy(approval) : "";
  $("approval-server").textContent = approval.server_name;
  $("approval-tool").textContent = approval.tool;
  $("approval-badges").replaceChildren(...badges(approval.annotations));
  $("approval-reason").textContent = approval.reason;
  $("approval-description").textContent = approval.description;
  $("approval-arguments").textContent = JSON.stringify(approval.arguments, null, 2);
  const hints = Object.entries(approval.annotations || {}).map(([name, value]) => `${name}: ${JSON.stringify(value)}`);
  $("approval-annotations").textContent = hints.length ? hints.join(", ") : "none given (not assumed read-only)";
  $("approval-diff-box").hidden = !approval.diff;
  renderDiff($("approval-diff"), approval.diff_rows || []);
  $("approval-always").hidden = !approval.can_remember;
  $("approval-error").textContent = "";
  $("approval-queue").textContent = approvals.size > 1 ? `${approvals.size - 1} more after this one.` : "";
  for (const button of dialog.querySelectorAll(".actions button")) button.disabled = false;
  const tick = () => {
    const left = Math.max(0, Math.round((approval.deadline - Date.now()) / 1000));
    $("approval-expires").textContent = left ? `${left} s, then the call ends as timed out` : "timed out";
  };
  tick();
  clearInterval(countdown);
  countdown = setInterval(tick, 1000);
  if (!dialog.open) dialog.showModal();
  $("approval-allow-once").focus();
}

function closeApproval() {
  shown = null;
  clearInterval(countdown);
  if (dialog.open) dialog.close();
}

const remembered = new Map(); // approval id → server, for answers that saved an "always allow" rule

function answer(kind) {
  if (!shown) return;
  const approval = approvals.get(shown);
  if (approval && (!state.call || state.call === approval.call)) {
    // After a reload the page knows the call only through its approval: show its outcome here.
    state.call = approval.call;
    state.inFlight = kind !== "deny";
    forgetOther(approval.call);
    state.callClass = servers.get(approval.server)?.described?.[approval.tool]?.class || "write";
    if (kind !== "deny") setStatus("pending", "Approved; waiting for a worker…");
  }
  for (const button of dialog.querySelectorAll(".actions button")) button.disabled = button.id !== "approval-later";
  if (kind === "always_allow" && approval) remembered.set(shown, approval.server);
  socket.send({ type: "answer_approval", ref: `approval:${shown}`, approval: shown, answer: kind });
}

$("approval-allow-once").addEventListener("click", () => answer("allow_once"));
$("approval-always").addEventListener("click", () => answer("always_allow"));
$("approval-deny").addEventListener("click", () => answer("deny"));
$("approval-later").addEventListener("click", closeApproval);
dialog.addEventListener("close", () => {
  shown = null;
  clearInterval(countdown);
});

function onApprovalEvent(event) {
  if (event.type === "approvals") {
    approvals.clear();
    for (const approval of event.approvals) addApproval(approval);
    renderPending();
    if (approvals.size && !dialog.open) showApproval();
  } else if (event.type === "approval.requested") {
    addApproval(event);
    renderPending();
    if (!dialog.open) showApproval(event.approval);
  } else if (event.type === "approval.ended") {
    approvals.delete(event.approval);
    // "Always allow" saved a rule: the tool's badge must say so, not "asks you first".
    const server = remembered.get(event.approval);
    remembered.delete(event.approval);
    if (server !== undefined && event.state === "approved") socket.send({ type: "list_tools", server });
    renderPending();
    if (shown === event.approval) approvals.size ? showApproval() : closeApproval();
  }
}

// -- the socket ----------------------------------------------------------------------------

const socket = connect({
  onStatus(status) {
    $("connection-status").textContent = {
      // The portal's socket, not a server: a server's own failure is said beside its tools.
      connected: "Connected to the portal.",
      disconnected: "Connection lost; reconnecting…",
      "logged-out": "You are logged out. Reload the page to log in.",
    }[status];
    // Approvals and calls outlive the page: ask for the waiting and running ones on every (re)connect.
    if (status === "connected") {
      socket.send({ type: "list_approvals" });
      socket.send({ type: "list_calls" });
    }
  },
  onEvent(event) {
    if (handleAppEvent(event)) return;
    if (event.type === "resource.read") {
      onResourceRead(event);
    } else if (event.type === "calls") {
      onCalls(event);
    } else if (event.type === "tools") {
      const server = servers.get(event.server);
      if (!server) return;
      if (event.error) {
        if (server === state.server) $("tools-status").textContent = `Cannot list tools: ${event.error.message}`;
        return;
      }
      server.tools = event.tools;
      if (event.described) server.described = event.described;
      if (server === state.server) {
        $("tools-status").textContent = `${event.tools.length} tools`;
        renderToolList();
        if (state.tool) {
          const fresh = event.tools.find((t) => t.name === state.tool.name);
          // A changed definition gets a new form, keeping what was typed; the same one (PostgreSQL
          // returns a stored list with its keys reordered) leaves the form alone.
          if (fresh && canonicalJSON(fresh) !== canonicalJSON(state.tool)) selectTool(fresh.name, typedArguments());
          else if (fresh) renderDecision(state.tool);
        } else if (pendingTool) {
          selectTool(pendingTool, pendingArguments);
          pendingTool = pendingArguments = null;
        }
      }
    } else if (event.type === "approvals" || event.type?.startsWith("approval.")) {
      onApprovalEvent(event);
    } else if (event.type === "tools.changed") {
      // The server changed its tool list: the worker dropped its cache; list again if we show it.
      const server = servers.get(event.server);
      if (server && server === state.server) {
        $("tools-status").textContent = "The server's tools changed; listing them again…";
        socket.send({ type: "list_tools", server: server.id, refresh: true });
      }
    } else if (event.type?.startsWith("elicitation.") || (event.type === "error" && String(event.ref || "").startsWith("e:"))) {
      onElicitationEvent(event);
    } else if (event.type?.startsWith("sampling.") || (event.type === "error" && String(event.ref || "").startsWith("s:"))) {
      onSamplingEvent(event);
    } else if (event.type === "error") {
      if (typeof event.ref === "string" && event.ref.startsWith("approval:")) {
        $("approval-error").textContent = event.message;
        for (const button of dialog.querySelectorAll(".actions button")) button.disabled = false;
        socket.send({ type: "list_approvals" }); // it may have ended meanwhile: resynchronize
      } else if (event.ref && event.ref === state.pendingRef) {
        state.inFlight = false;
        $("call-button").disabled = false;
        setStatus("rejected", event.message);
      } else {
        $("tools-status").textContent = event.message;
      }
    } else if (event.type?.startsWith("call.")) {
      onCallEvent(event);
    }
  },
});

startApps({ socket, origin: JSON.parse(document.getElementById("apps-origin").textContent) });

$("server-select").addEventListener("change", (event) => {
  state.tool = null;
  $("tool-view").hidden = true;
  $("tool-empty").hidden = false;
  selectServer(Number(event.target.value));
});
$("refresh-tools").addEventListener("click", () => state.server && selectServer(state.server.id, { refresh: true }));
$("tool-filter").addEventListener("input", renderToolList);

let pendingTool = selected.tool || null;
// Arguments of a call re-run from the history, prefilled in the tool's form.
let pendingArguments = selected.arguments || undefined;
if (catalog.length) {
  const first = servers.get(Number(selected.server)) || catalog[0];
  selectServer(first.id);
  if (pendingTool && (first.tools || []).some((t) => t.name === pendingTool)) {
    selectTool(pendingTool, pendingArguments);
    pendingTool = pendingArguments = null;
  }
}
