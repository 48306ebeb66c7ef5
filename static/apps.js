// MCP Apps in the playground (docs/tasks-and-apps.md): the host side of the extension's bridge.
//
// A tool whose definition names a `ui://` resource (`_meta.ui.resourceUri`, or the older
// `_meta["ui/resourceUri"]`) gets its app beside the result once a call ends: the resource is read over
// the playground's socket, and its HTML goes to the sandbox page on the apps origin (PORTAL_APPS_ORIGIN),
// which renders it in an inner iframe without allow-same-origin. Every message from it is JSON-RPC;
// its `tools/call` goes to the portal as an ordinary `call` marked with the app's URI, so the portal
// decides it as it decides the person's (deny, ask in the approval dialog, allow) and records it as the app's.
import { h } from "./ws.js";

const PROTOCOL_VERSION = "2026-01-26";
const APP_MIME = "text/html;profile=mcp-app";
const MIN_HEIGHT = 60;
const MAX_HEIGHT = 800; // an app cannot push the page around: taller content scrolls inside it
const ACTIVITY_LINES = 50;
const $ = (id) => document.getElementById(id);

// The app a tool names, or "".
export function appOf(tool) {
  const meta = tool?._meta;
  const uri = meta?.ui?.resourceUri ?? meta?.["ui/resourceUri"];
  return typeof uri === "string" && uri.startsWith("ui://") ? uri : "";
}

let socket = null;
let origin = ""; // the apps origin, "" when the operator set none
let refs = 0;
let current = null; // the app shown: {server, uri, tool, arguments, result, frame, html, csp, initialized}
const calls = new Map(); // socket ref → {app, id} for the app's tools/call, until call.accepted names the call
const byCall = new Map(); // call id → {app, id}
const reads = new Map(); // socket ref → {app, id} (null id: the app's own HTML)

export function startApps(options) {
  socket = options.socket;
  try {
    origin = options.origin ? new URL(options.origin).origin : "";
  } catch {
    origin = "";
  }
  window.addEventListener("message", onMessage);
  const dialog = $("app-link-dialog");
  $("app-link-open").addEventListener("click", () => dialog.close("open"));
  $("app-link-cancel").addEventListener("click", () => dialog.close("cancel"));
  // Escape closes it too: not opened.
  dialog.addEventListener("close", () => answerLink(dialog.returnValue === "open"));
}

// Whether a call id is one an app made (the playground leaves those to this module).
export function isAppCall(callId) {
  return byCall.has(callId);
}

// The app of `tool` for a call that ended with `result`, in place of any app shown before.
export function showApp({ server, serverName, tool, arguments: args, result }) {
  clearApp();
  const uri = appOf(tool);
  if (!uri) return;
  const pane = $("app-pane");
  pane.hidden = false;
  $("app-uri").textContent = uri;
  $("app-server").textContent = serverName;
  if (!origin) {
    $("app-frame-box").replaceChildren(h("p", { class: "muted small", text: "This tool has an app, but MCP Apps are off: the portal's operator has not set PORTAL_APPS_ORIGIN (docs/tasks-and-apps.md)." }));
    return;
  }
  current = { server, uri, tool, arguments: args || {}, result, frame: null, html: null, csp: null, initialized: false };
  $("app-frame-box").replaceChildren(h("p", { class: "muted small", text: "Loading the app…" }));
  const ref = `apps:${++refs}`;
  reads.set(ref, { app: current, id: null });
  socket.send({ type: "read_resource", ref, server, uri });
}

export function clearApp() {
  current = null;
  $("app-pane").hidden = true;
  $("app-frame-box").replaceChildren();
  $("app-activity").replaceChildren();
}

// Socket events for the apps: true when it was one (the playground then leaves it alone).
export function handleAppEvent(event) {
  const ref = typeof event.ref === "string" ? event.ref : "";
  if (event.type === "resource.read" && reads.has(ref)) {
    const { app, id } = reads.get(ref);
    reads.delete(ref);
    if (app !== current) return true;
    if (id === null) loadApp(event);
    else if (event.error) reply(id, null, { code: -32603, message: `${event.error.kind}: ${event.error.message}` });
    else reply(id, { contents: event.contents });
    return true;
  }
  if (event.type === "error" && (calls.has(ref) || reads.has(ref))) {
    // Refused before it became a call: not the app's server's app, a tool apps may not call, a rate limit.
    const { app, id } = calls.get(ref) || reads.get(ref);
    calls.delete(ref);
    reads.delete(ref);
    if (app !== current) return true;
    if (id === null) {
      $("app-frame-box").replaceChildren(h("p", { class: "call-error", role: "alert", text: `The app could not be loaded: ${event.message}` }));
    } else {
      activity(`Refused: ${event.message}`, "error");
      reply(id, null, { code: -32000, message: event.message });
    }
    return true;
  }
  if (event.type === "call.accepted" && calls.has(ref)) {
    const pending = calls.get(ref);
    calls.delete(ref);
    byCall.set(event.call, pending);
    if (event.status === "awaiting_approval") activity(`${event.tool} waits for your approval.`);
    return true;
  }
  if (typeof event.type === "string" && event.type.startsWith("call.") && byCall.has(event.call)) {
    if (event.type === "call.ended") endCall(event);
    return true;
  }
  return false;
}

function endCall(event) {
  const { app, id } = byCall.get(event.call);
  byCall.delete(event.call);
  if (app !== current) return;
  if ((event.status === "succeeded" || event.status === "tool_error") && event.result) {
    const result = { content: event.result.content || [], isError: !!event.result.isError };
    if (event.result.structuredContent != null) result.structuredContent = event.result.structuredContent;
    activity(`${event.tool}: ${event.status === "succeeded" ? "succeeded" : "the tool reported an error"}.`);
    reply(id, result);
  } else {
    // Denied, timed out, failed…: the app hears why, as a JSON-RPC error.
    const message = `${event.status}: ${event.error || "the call did not run"}`;
    activity(`${event.tool}: ${message}`, "error");
    reply(id, null, { code: -32000, message });
  }
}

// -- the app's document --------------------------------------------------------------------------

function decodeBlob(blob) {
  const bytes = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

function loadApp(event) {
  const box = $("app-frame-box");
  const content = (event.contents || []).find((c) => c.uri === current.uri) || (event.contents || [])[0];
  let html = null;
  if (!event.error && content && String(content.mimeType || "").replace(/\s/g, "").toLowerCase() === APP_MIME) {
    html = typeof content.text === "string" ? content.text : typeof content.blob === "string" ? decodeBlob(content.blob) : null;
  }
  if (html === null) {
    const why = event.error ? `${event.error.kind}: ${event.error.message}` : `the resource is not an app (${APP_MIME})`;
    box.replaceChildren(h("p", { class: "call-error", role: "alert", text: `The app could not be loaded: ${why}` }));
    return;
  }
  current.html = html;
  current.csp = content._meta?.ui?.csp || {};
  const src = `${origin}/?csp=${encodeURIComponent(JSON.stringify(current.csp))}`;
  // allow-same-origin keeps the sandbox page on its own (the apps) origin, as the extension asks of
  // the proxy; the app itself gets no such flag (static/sandbox.js). No popups, forms or top navigation.
  current.frame = h("iframe", { id: "app-frame", class: "app-frame", title: `App ${current.uri}`, src, sandbox: "allow-scripts allow-same-origin", referrerpolicy: "no-referrer" });
  current.frame.style.height = "240px";
  box.replaceChildren(current.frame);
}

// -- the bridge ---------------------------------------------------------------------------------

function post(message) {
  current?.frame?.contentWindow?.postMessage({ jsonrpc: "2.0", ...message }, origin);
}

function reply(id, result, error) {
  if (id === null || id === undefined) return;
  post(error ? { id, error } : { id, result });
}

function notify(method, params) {
  // The extension: nothing goes to the app before it said it is initialized.
  if (current?.initialized) post({ method, params });
}

function onMessage(event) {
  // Only the sandbox frame this page made, on the apps origin: any other window's message is ignored.
  if (!current?.frame || event.source !== current.frame.contentWindow || event.origin !== origin) return;
  const message = event.data;
  if (!message || typeof message !== "object" || message.jsonrpc !== "2.0" || typeof message.method !== "string") return;
  const params = message.params && typeof message.params === "object" ? message.params : {};
  if (message.method === "ui/notifications/sandbox-proxy-ready") {
    post({ method: "ui/notifications/sandbox-resource-ready", params: { html: current.html, csp: current.csp } });
  } else if (message.id !== undefined && message.id !== null) {
    onRequest(message.id, message.method, params);
  } else {
    onNotification(message.method, params);
  }
}

function onRequest(id, method, params) {
  const app = current;
  switch (method) {
    case "ui/initialize":
      return reply(id, {
        protocolVersion: PROTOCOL_VERSION,
        hostInfo: { name: "mcp-portal", version: "1" },
        hostCapabilities: {
          openLinks: {},
          serverTools: {},
          serverResources: {},
          logging: {},
          message: { text: {} },
          sandbox: { csp: app.csp, permissions: {} },
        },
        hostContext: {
          toolInfo: { tool: app.tool },
          theme: "light",
          displayMode: "inline",
          availableDisplayModes: ["inline"],
          containerDimensions: { maxHeight: MAX_HEIGHT },
          locale: navigator.language,
          timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
          platform: "web",
        },
      });
    case "ping":
      return reply(id, {});
    case "tools/call": {
      const name = params.name;
      const args = params.arguments ?? {};
      if (typeof name !== "string" || !name || typeof args !== "object" || Array.isArray(args)) {
        return reply(id, null, { code: -32602, message: "tools/call needs a tool name and an arguments object." });
      }
      // Always the app's own server: the portal checks again that the app is one of that server's.
      const ref = `apps:${++refs}`;
      calls.set(ref, { app, id });
      activity(`The app calls ${name} ${JSON.stringify(args)}`);
      return socket.send({ type: "call", ref, request_id: requestId(), server: app.server, tool: name, arguments: args, app: app.uri });
    }
    case "resources/read": {
      if (typeof params.uri !== "string" || !params.uri) return reply(id, null, { code: -32602, message: "resources/read needs a uri." });
      const ref = `apps:${++refs}`;
      reads.set(ref, { app, id });
      return socket.send({ type: "read_resource", ref, server: app.server, uri: params.uri });
    }
    case "ui/message":
      showMessage(params);
      return reply(id, {});
    case "ui/open-link":
      return askToOpen(id, params.url);
    case "ui/request-display-mode":
      return reply(id, { mode: "inline" });
    default:
      return reply(id, null, { code: -32601, message: `The portal does not offer ${method} to apps.` });
  }
}

function onNotification(method, params) {
  if (method === "ui/notifications/initialized") {
    current.initialized = true;
    notify("ui/notifications/tool-input", { arguments: current.arguments });
    if (current.result) notify("ui/notifications/tool-result", current.result);
  } else if (method === "ui/notifications/size-changed") {
    const height = Number(params.height);
    if (Number.isFinite(height)) current.frame.style.height = `${Math.min(MAX_HEIGHT, Math.max(MIN_HEIGHT, Math.ceil(height)))}px`;
  } else if (method === "notifications/message") {
    const data = typeof params.data === "string" ? params.data : JSON.stringify(params.data);
    activity(`log ${params.level || "info"}: ${data}`);
  }
}

function requestId() {
  return globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

function activity(text, kind = "") {
  const list = $("app-activity");
  list.append(h("li", { class: kind ? `app-${kind}` : "", text }));
  while (list.children.length > ACTIVITY_LINES) list.firstElementChild.remove();
}

// ui/message: what the app says to the person, shown as the app's, as text only.
function showMessage(params) {
  const blocks = Array.isArray(params.content) ? params.content : [];
  const text = blocks.map((b) => (b?.type === "text" ? String(b.text ?? "") : `[${b?.type || "unknown"} content]`)).join("\n");
  $("app-activity").append(h("li", { class: "app-message" }, h("span", { class: "badge", text: "message from the app" }), " ", h("span", { class: "pre-wrap", text })));
}

// ui/open-link: only an http(s) address, and only if the person says so.
let linkAsked = null; // {app, id, url}

function askToOpen(id, url) {
  let parsed = null;
  try {
    parsed = new URL(String(url));
  } catch {
    parsed = null;
  }
  if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
    activity(`Refused to open ${String(url).slice(0, 200)}: only http and https links are opened.`, "error");
    return reply(id, { isError: true });
  }
  if (linkAsked) reply(linkAsked.id, { isError: true }); // one question at a time: the older one is dropped
  linkAsked = { app: current, id, url: parsed.href };
  $("app-link-url").textContent = parsed.href;
  $("app-link-app").textContent = current.uri;
  const dialog = $("app-link-dialog");
  dialog.returnValue = "";
  if (!dialog.open) dialog.showModal();
}

function answerLink(open) {
  const asked = linkAsked;
  linkAsked = null;
  if (!asked || asked.app !== current) return;
  if (open) {
    window.open(asked.url, "_blank", "noopener,noreferrer");
    activity(`Opened ${asked.url}`);
  } else {
    activity(`You did not open ${asked.url}`);
  }
  reply(asked.id, open ? {} : { isError: true });
}
