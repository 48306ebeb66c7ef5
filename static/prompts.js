// The playground's Prompts tab: list, fill in the arguments (with completions), get the messages.
import { connect, h } from "./ws.js";
import { nextRef, renderBlock } from "./content.js";
import { CompletionField } from "./completions.js";

const catalog = JSON.parse(document.getElementById("catalog").textContent);
const selected = JSON.parse(document.getElementById("selected").textContent);
const $ = (id) => document.getElementById(id);

const state = { server: null, listing: null, prompt: null, fields: new Map(), listRef: null, getRef: null };
const servers = new Map(catalog.map((server) => [server.id, server]));

function selectServer(id) {
  state.server = servers.get(id) || null;
  if (!state.server) return;
  $("server-select").value = String(id);
  state.listing = null;
  showPrompt(null);
  $("list-status").textContent = "Listing prompts…";
  state.listRef = nextRef("list");
  socket.send({ type: "list_prompts", ref: state.listRef, server: id });
  const url = new URL(location.href);
  url.searchParams.set("server", id);
  history.replaceState(null, "", url);
}

function renderList() {
  const current = state.prompt?.name;
  $("prompt-list").replaceChildren(...(state.listing?.prompts || []).map((prompt) =>
    h("li", {}, h("button", {
      type: "button", class: prompt.name === current ? "tool current" : "tool", "aria-current": prompt.name === current ? "true" : null,
      onclick: () => showPrompt(prompt),
    }, h("span", { class: "tool-name", text: prompt.title || prompt.name }), h("code", { class: "small", text: prompt.name })))));
}

function showPrompt(prompt) {
  state.prompt = prompt;
  state.fields.clear();
  $("prompt-empty").hidden = !!prompt;
  $("prompt-view").hidden = !prompt;
  $("prompt-error").textContent = "";
  renderList();
  if (!prompt) return;
  $("prompt-title").textContent = prompt.title || prompt.name;
  $("prompt-name").textContent = prompt.name;
  $("prompt-description").textContent = prompt.description || "";
  const fields = (prompt.arguments || []).map((argument, index) => {
    const id = `prompt-arg-${index}`;
    const input = h("input", { id, type: "text", required: !!argument.required, "aria-describedby": argument.description ? `${id}-help` : null });
    const field = h("div", { class: "field" },
      h("label", { for: id }, argument.title || argument.name, argument.required ? h("span", { class: "required", "aria-hidden": "true", text: " *" }) : null),
      input,
      argument.description ? h("div", { class: "help", id: `${id}-help`, text: argument.description }) : null);
    // After the input has a place: the suggestions list goes right after it.
    const completion = state.listing?.completions
      ? new CompletionField(input, (ref, value) => socket.send({
        type: "complete", ref, server: state.server.id, prompt: prompt.name, argument: argument.name, value, context: values(argument.name),
      }))
      : null;
    state.fields.set(argument.name, { input, completion, argument });
    return field;
  });
  $("prompt-fields").replaceChildren(...(fields.length ? fields : [h("p", { class: "muted", text: "This prompt takes no arguments." })]));
}

// Prompt arguments are strings; an empty optional one is left out.
function values(except) {
  const out = {};
  for (const [name, { input }] of state.fields) if (name !== except && input.value !== "") out[name] = input.value;
  return out;
}

$("prompt-form").addEventListener("submit", (event) => {
  event.preventDefault();
  if (!state.prompt) return;
  const missing = [...state.fields.values()].filter(({ argument, input }) => argument.required && input.value === "");
  for (const { input } of state.fields.values()) input.removeAttribute("aria-invalid");
  if (missing.length) {
    for (const { input } of missing) input.setAttribute("aria-invalid", "true");
    $("prompt-error").textContent = `Fill in ${missing.map(({ argument }) => argument.name).join(", ")}.`;
    return;
  }
  $("prompt-error").textContent = "";
  state.getRef = nextRef("get");
  $("get-button").disabled = true;
  $("get-status").textContent = `Getting ${state.prompt.name}…`;
  $("messages").replaceChildren();
  socket.send({ type: "get_prompt", ref: state.getRef, server: state.server.id, name: state.prompt.name, arguments: values() });
});

function renderMessages(event) {
  const out = [];
  if (event.description) out.push(h("p", { class: "muted", text: event.description }));
  for (const message of event.messages || []) {
    out.push(h("article", { class: `message role-${message.role === "assistant" ? "assistant" : "user"}` },
      h("h3", { class: "small-heading", text: message.role }), renderBlock(message.content || {})));
  }
  return out;
}

const socket = connect({
  onStatus(status) {
    $("connection-status").textContent = {
      connected: "Connected to the portal.",
      disconnected: "Connection lost; reconnecting…",
      "logged-out": "You are logged out. Reload the page to log in.",
    }[status];
  },
  onEvent(event) {
    if (event.type === "prompts" && event.ref === state.listRef) {
      if (event.error) {
        $("list-status").textContent = `Cannot list prompts: ${event.error.message}`;
        return;
      }
      state.listing = event;
      $("list-status").textContent = event.offered ? `${event.prompts.length} prompts` : "This server offers no prompts.";
      renderList();
    } else if (event.type === "prompt.got" && event.ref === state.getRef) {
      $("get-button").disabled = false;
      if (event.error) {
        $("get-status").replaceChildren(h("div", { class: "call-error", role: "alert" }, h("strong", { text: `${event.error.kind}: ` }), event.error.message));
        return;
      }
      $("get-status").textContent = `${event.messages.length} message${event.messages.length === 1 ? "" : "s"}`;
      $("messages").replaceChildren(...renderMessages(event));
    } else if (event.type === "completion") {
      for (const { completion } of state.fields.values()) if (completion?.offer(event)) break;
    } else if (event.type === "error") {
      if (event.ref === state.getRef) {
        $("get-button").disabled = false;
        $("get-status").textContent = event.message;
      } else if (event.ref === state.listRef) {
        $("list-status").textContent = event.message;
      }
    }
  },
});

$("server-select").addEventListener("change", (event) => selectServer(Number(event.target.value)));
$("refresh").addEventListener("click", () => state.server && selectServer(state.server.id));

if (catalog.length) selectServer((servers.get(Number(selected.server)) || catalog[0]).id);
