// The playground's Resources tab: list (with templates), read, fill in templates, subscribe.
import { connect, h } from "./ws.js";
import { nextRef, renderResourceContents } from "./content.js";
import { CompletionField } from "./completions.js";
import { expand, variables } from "./uri-template.js";

const catalog = JSON.parse(document.getElementById("catalog").textContent);
const selected = JSON.parse(document.getElementById("selected").textContent);
const $ = (id) => document.getElementById(id);
const PAGE_SIZE = 50;

const state = {
  server: null, // {id, name, …} from the catalog
  listing: null, // the last `resources` event for it
  shown: PAGE_SIZE,
  item: null, // {kind: "resource", resource} or {kind: "template", template}
  fields: new Map(), // template variable -> {input, completion}
  readRef: null,
  listRef: null,
  subscribed: new Set(), // "serverId uri" this page subscribed to
  pendingSubscribe: new Map(), // ref -> key
};
const servers = new Map(catalog.map((server) => [server.id, server]));
const key = (serverId, uri) => `${serverId} ${uri}`;

// -- listing -------------------------------------------------------------------------------

function selectServer(id) {
  state.server = servers.get(id) || null;
  if (!state.server) return;
  $("server-select").value = String(id);
  state.listing = null;
  state.shown = PAGE_SIZE;
  showItem(null);
  renderLists();
  $("list-status").textContent = "Listing resources…";
  state.listRef = nextRef("list");
  socket.send({ type: "list_resources", ref: state.listRef, server: id });
  const url = new URL(location.href);
  url.searchParams.set("server", id);
  history.replaceState(null, "", url);
}

function matches(item, filter) {
  const text = `${item.name || ""} ${item.title || ""} ${item.uri || item.uriTemplate || ""} ${item.description || ""}`;
  return !filter || text.toLowerCase().includes(filter);
}

function entry(item, address, current, onclick) {
  return h("li", {}, h("button", { type: "button", class: current ? "tool current" : "tool", "aria-current": current ? "true" : null, onclick },
    h("span", { class: "tool-name", text: item.title || item.name || address }), h("code", { class: "small", text: address })));
}

function renderLists() {
  const filter = $("filter").value.trim().toLowerCase();
  const listing = state.listing;
  const resources = (listing?.resources || []).filter((r) => matches(r, filter));
  const templates = (listing?.templates || []).filter((t) => matches(t, filter));
  const current = state.item;
  $("resource-list").replaceChildren(...resources.slice(0, state.shown).map((r) =>
    entry(r, r.uri, current?.kind === "resource" && current.resource.uri === r.uri, () => showItem({ kind: "resource", resource: r }))));
  $("show-more").hidden = resources.length <= state.shown;
  $("show-more").textContent = `Show more (${resources.length - state.shown} left)`;
  $("template-list").replaceChildren(...templates.map((t) =>
    entry(t, t.uriTemplate, current?.kind === "template" && current.template.uriTemplate === t.uriTemplate, () => showItem({ kind: "template", template: t }))));
}

$("show-more").addEventListener("click", () => {
  state.shown += PAGE_SIZE;
  renderLists();
});
$("filter").addEventListener("input", () => {
  state.shown = PAGE_SIZE;
  renderLists();
});

// -- one resource or template ------------------------------------------------------------------

function showItem(item) {
  state.item = item;
  $("item-empty").hidden = !!item;
  $("item-view").hidden = !item;
  $("item-error").textContent = "";
  state.fields.clear();
  if (!item) return;
  const data = item.kind === "resource" ? item.resource : item.template;
  $("item-title").textContent = data.title || data.name || "";
  $("item-uri").textContent = item.kind === "resource" ? data.uri : data.uriTemplate;
  $("item-description").textContent = [data.description, data.mimeType].filter(Boolean).join(" · ");
  const form = $("template-form");
  form.hidden = item.kind !== "template";
  $("template-fields").replaceChildren();
  if (item.kind === "template") {
    for (const name of variables(data.uriTemplate)) {
      const id = `var-${name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
      const input = h("input", { id, name, type: "text", required: true });
      const field = h("div", { class: "field" }, h("label", { for: id, text: name }), input);
      $("template-fields").append(field);
      const completion = state.listing?.completions
        ? new CompletionField(input, (ref, value) => socket.send({
          type: "complete", ref, server: state.server.id, template: data.uriTemplate, argument: name, value, context: templateValues(name),
        }))
        : null;
      state.fields.set(name, { input, completion });
      input.addEventListener("input", updateTemplateUri);
    }
    updateTemplateUri();
  }
  updateSubscribeButton();
  renderLists();
}

function templateValues(except) {
  const values = {};
  for (const [name, { input }] of state.fields) if (name !== except && input.value !== "") values[name] = input.value;
  return values;
}

function currentUri() {
  const item = state.item;
  if (!item) return "";
  return item.kind === "resource" ? item.resource.uri : expand(item.template.uriTemplate, templateValues());
}

function updateTemplateUri() {
  $("template-uri").textContent = currentUri();
  updateSubscribeButton();
}

function updateSubscribeButton() {
  const button = $("subscribe-button");
  const canSubscribe = !!(state.listing?.subscribe && state.item);
  button.hidden = !canSubscribe;
  if (!canSubscribe) return;
  const subscribed = state.subscribed.has(key(state.server.id, currentUri()));
  button.textContent = subscribed ? "Unsubscribe" : "Subscribe";
  button.setAttribute("aria-pressed", subscribed ? "true" : "false");
}

function read(uri) {
  if (!uri) return;
  if (state.item?.kind === "template") {
    const missing = [...state.fields].filter(([, { input }]) => input.value === "").map(([name]) => name);
    if (missing.length) {
      $("item-error").textContent = `Fill in ${missing.join(", ")}.`;
      return;
    }
  }
  $("item-error").textContent = "";
  state.readRef = nextRef("read");
  $("read-status").textContent = `Reading ${uri}…`;
  $("contents").replaceChildren();
  socket.send({ type: "read_resource", ref: state.readRef, server: state.server.id, uri });
}

$("read-button").addEventListener("click", () => read(currentUri()));
$("template-form").addEventListener("submit", (event) => {
  event.preventDefault();
  read(currentUri());
});

$("subscribe-button").addEventListener("click", () => {
  const uri = currentUri();
  const k = key(state.server.id, uri);
  const ref = nextRef("sub");
  if (state.subscribed.has(k)) {
    state.subscribed.delete(k);
    socket.send({ type: "unsubscribe_resource", ref, server: state.server.id, uri });
    notice(`Unsubscribed from ${uri}.`);
  } else {
    state.pendingSubscribe.set(ref, k);
    socket.send({ type: "subscribe_resource", ref, server: state.server.id, uri });
    $("subscribe-button").disabled = true;
  }
  updateSubscribeButton();
});

// -- news ------------------------------------------------------------------------------------

function notice(text, { uri = null, serverId = null, kind = "info" } = {}) {
  const time = new Date().toLocaleTimeString();
  const item = h("li", { class: `notice ${kind}` }, h("span", { class: "muted small", text: `${time} ` }), text);
  if (uri && serverId === state.server?.id) {
    item.append(" ", h("button", { type: "button", class: "link", text: "Read again", onclick: () => read(uri) }));
  }
  $("notices").prepend(item);
  while ($("notices").children.length > 20) $("notices").lastChild.remove();
}

function serverName(id) {
  return servers.get(id)?.name || `server ${id}`;
}

const socket = connect({
  onStatus(status) {
    $("connection-status").textContent = {
      connected: "Connected to the portal.",
      disconnected: "Connection lost; reconnecting… (subscriptions end with the connection)",
      "logged-out": "You are logged out. Reload the page to log in.",
    }[status];
    if (status === "disconnected" && state.subscribed.size) {
      // The server side gives a closed socket's subscriptions back; say so rather than pretend.
      state.subscribed.clear();
      updateSubscribeButton();
    }
  },
  onEvent(event) {
    switch (event.type) {
      case "resources":
        if (event.ref !== state.listRef) return;
        if (event.error) {
          $("list-status").textContent = `Cannot list resources: ${event.error.message}`;
          return;
        }
        state.listing = event;
        $("list-status").textContent = event.offered
          ? `${event.resources.length} resources, ${event.templates.length} templates`
          : "This server offers no resources.";
        renderLists();
        updateSubscribeButton();
        break;
      case "resource.read":
        if (event.ref !== state.readRef) return;
        if (event.error) {
          $("read-status").replaceChildren(h("div", { class: "call-error", role: "alert" },
            h("strong", { text: `${event.error.kind}: ` }), event.error.message));
          return;
        }
        $("read-status").textContent = `${event.contents.length} item${event.contents.length === 1 ? "" : "s"} from ${event.uri}`;
        $("contents").replaceChildren(...event.contents.map(renderResourceContents));
        break;
      case "completion":
        for (const { completion } of state.fields.values()) if (completion?.offer(event)) break;
        break;
      case "resource.subscribed": {
        const k = state.pendingSubscribe.get(event.ref);
        if (!k) return;
        state.pendingSubscribe.delete(event.ref);
        $("subscribe-button").disabled = false;
        if (event.error) {
          $("item-error").textContent = `Cannot subscribe: ${event.error.message}`;
        } else {
          state.subscribed.add(k);
          notice(`Subscribed to ${event.uri}: changes will show here.`);
        }
        updateSubscribeButton();
        break;
      }
      case "resource.updated":
        if (!state.subscribed.has(key(event.server, event.uri))) return;
        notice(`${event.uri} on ${serverName(event.server)} changed.`, { uri: event.uri, serverId: event.server, kind: "updated" });
        break;
      case "resource.ended":
        if (!state.subscribed.delete(key(event.server, event.uri))) return;
        notice(`The subscription to ${event.uri} ended: ${event.message || "the connection closed"}`, { kind: "ended" });
        updateSubscribeButton();
        break;
      case "error":
        if (state.pendingSubscribe.has(event.ref)) {
          state.pendingSubscribe.delete(event.ref);
          $("subscribe-button").disabled = false;
        }
        if (event.ref === state.readRef) $("read-status").textContent = event.message;
        else if (event.ref === state.listRef) $("list-status").textContent = event.message;
        else $("item-error").textContent = event.message;
        break;
      default:
        break;
    }
  },
});

$("server-select").addEventListener("change", (event) => selectServer(Number(event.target.value)));
$("refresh").addEventListener("click", () => state.server && selectServer(state.server.id));

if (catalog.length) selectServer((servers.get(Number(selected.server)) || catalog[0]).id);
