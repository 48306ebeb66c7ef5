// The approvals inbox, live: the page's cards come from the same `approval.requested` events the
// server drew them from (Approval.as_event), so after the first `approvals` list this module draws
// them all. Answers go over the page's socket (the nav count's, approvals-badge.js); the page's forms
// still post when JavaScript is off.
import { h } from "./ws.js";
import { renderDiff } from "./diff.js";
import { askedBy, listen, notificationsWanted, setNotificationsWanted } from "./approvals-badge.js";

const $ = (id) => document.getElementById(id);
const box = $("approvals");
const answerUrl = box.dataset.answerUrl;
const csrf = document.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
const approvals = new Map(); // id → approval.requested event with a deadline, oldest first
const answering = new Set(); // ids whose answer was sent, their buttons disabled until the end comes

function badges(annotations = {}) {
  const out = [];
  if (annotations.readOnlyHint) out.push(h("span", { class: "badge ok", text: "read-only" }));
  if (annotations.destructiveHint) out.push(h("span", { class: "badge error", text: "destructive" }));
  if (annotations.idempotentHint) out.push(h("span", { class: "badge", text: "idempotent" }));
  if (annotations.openWorldHint) out.push(h("span", { class: "badge", text: "open world" }));
  return out;
}

function hints(annotations = {}) {
  const said = Object.entries(annotations).map(([name, value]) => `${name}: ${JSON.stringify(value)}`);
  return said.length ? said.join(", ") : "none given (not assumed read-only)";
}

function secondsLeft(approval) {
  return Math.max(0, Math.round((approval.deadline - Date.now()) / 1000));
}

function expiresText(approval) {
  const left = secondsLeft(approval);
  return left ? `${left} s, then the call ends as timed out` : "timed out";
}

// A form like the server's: it still posts if the socket cannot take the answer.
function answerForm(cls, ids, ...buttons) {
  return h(
    "form",
    { method: "post", action: answerUrl, class: cls },
    h("input", { type: "hidden", name: "csrfmiddlewaretoken", value: csrf }),
    ids.map((id) => h("input", { type: "hidden", name: "approval", value: id })),
    buttons,
  );
}

function button(answer, text, cls) {
  return h("button", { type: "submit", class: cls, name: "answer", value: answer, text });
}

function card(approval) {
  const id = approval.approval;
  const diff = approval.diff
    ? [
        h("h3", { text: "The tool changed since you approved it" }),
        h("div", { class: "diff-box" }, h("table", { class: "diff" }, renderedDiff(approval.diff_rows || []))),
      ]
    : [];
  const article = h(
    "article",
    { class: "card approval-card", "data-approval": id, "aria-labelledby": `approval-${id}` },
    h(
      "h2",
      { id: `approval-${id}` },
      h("span", { class: "asked-by", text: askedBy(approval) }),
      " asks to run ",
      h("span", { class: "server", text: approval.server_name }),
      " · ",
      h("code", { class: "tool", text: approval.tool }),
      " ",
      badges(approval.annotations),
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", { text: "Annotations" }),
      h("dd", { class: "annotations small", text: hints(approval.annotations) }),
      h("dt", { text: "Why you are asked" }),
      h("dd", { class: "reason", text: approval.reason }),
      h("dt", { text: "Time left" }),
      h("dd", { class: "expires", "data-deadline": approval.expires_at, text: expiresText(approval) }),
    ),
    approval.description ? h("p", { class: "description small", text: approval.description }) : null,
    h("h3", { text: "Arguments" }),
    h("pre", { class: "json arguments", text: JSON.stringify(approval.arguments, null, 2) }),
    diff,
    answerForm(
      "actions",
      [id],
      button("allow_once", "Allow once", "primary"),
      approval.can_remember ? button("always_allow", "Always allow") : null,
      button("deny", "Deny", "danger"),
    ),
    h("div", { class: "error", role: "alert" }),
  );
  if (answering.has(id)) for (const b of article.querySelectorAll("button")) b.disabled = true;
  return article;
}

function renderedDiff(rows) {
  const body = h("tbody");
  renderDiff(body, rows);
  return body;
}

function render() {
  // Several waiting calls of one tool of one server: one button allows each of them once.
  const groups = new Map();
  // Oldest first, however the events arrived (an approval expires a fixed time after it is asked).
  const oldestFirst = [...approvals.values()].sort((a, b) => Date.parse(a.expires_at) - Date.parse(b.expires_at));
  for (const approval of oldestFirst) {
    const key = `${approval.server}\u0000${approval.tool}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(approval);
  }
  // Drawn anew on each change: a keyboard user keeps their place (the same button, or the next card's),
  // unless they went elsewhere on the page.
  const keep = place && (box.contains(document.activeElement) || document.activeElement === document.body);
  const errors = new Map([...box.querySelectorAll("[data-approval]")].map((el) => [el.dataset.approval, el.querySelector(".error")?.textContent]));
  box.replaceChildren(
    ...[...groups.values()].map((group) => {
      const { server_name: server, tool } = group[0];
      const all = group.length > 1
        ? answerForm(
            "approve-all row",
            group.map((a) => a.approval),
            h("span", {}, `${group.length} calls of `, h("strong", { text: server }), " · ", h("code", { text: tool }), " wait."),
            button("allow_once", `Allow all ${group.length} once`),
          )
        : null;
      return h("section", { class: "approval-group", "aria-label": `${server} · ${tool}` }, all, group.map(card));
    }),
  );
  for (const [id, text] of errors) {
    const holder = box.querySelector(`[data-approval="${CSS.escape(id)}"] .error`);
    if (holder && text) holder.textContent = text;
  }
  $("approvals-empty").hidden = approvals.size > 0;
  if (keep) refocus(place);
}

let place = null; // where focus last was among the cards
box.addEventListener("focusin", (event) => {
  const holder = event.target.closest("[data-approval]");
  place = {
    approval: holder?.dataset.approval,
    answer: event.target.value,
    index: [...box.querySelectorAll("[data-approval]")].indexOf(holder),
  };
});

function refocus({ approval, answer, index }) {
  const cards = [...box.querySelectorAll("[data-approval]")];
  const same = cards.find((el) => el.dataset.approval === approval);
  const target = same
    ? same.querySelector(`button[value="${answer}"]:not(:disabled)`) || same.querySelector("button:not(:disabled)")
    : cards[Math.min(Math.max(index, 0), cards.length - 1)]?.querySelector("button:not(:disabled)");
  if (target) target.focus();
  else if (!same && !cards.length) $("approvals-empty").focus();
}

function add(event) {
  approvals.set(event.approval, { ...event, deadline: Date.now() + event.expires_in * 1000 });
}

function answer(ids, kind) {
  for (const id of ids) {
    answering.add(id);
    socket.send({ type: "answer_approval", ref: `approval:${id}`, approval: id, answer: kind });
  }
  render();
}

box.addEventListener("submit", (event) => {
  const form = event.target;
  const kind = event.submitter?.value;
  if (!kind) return;
  event.preventDefault();
  answer([...form.querySelectorAll("input[name=approval]")].map((input) => input.value), kind);
});

setInterval(() => {
  for (const el of box.querySelectorAll("[data-approval]")) {
    const approval = approvals.get(el.dataset.approval);
    const expires = el.querySelector(".expires");
    if (approval && expires) expires.textContent = expiresText(approval);
  }
}, 1000);

const socket = listen({
  onStatus(status) {
    $("inbox-status").textContent = {
      connected: "",
      disconnected: "Connection lost; reconnecting…",
      "logged-out": "You are logged out. Reload the page to log in.",
    }[status];
    // What waits may have changed while the socket was down: ask on every (re)connect.
    if (status === "connected") socket.send({ type: "list_approvals", ref: "inbox" });
  },
  onEvent(event) {
    if (event.type === "approvals") {
      approvals.clear();
      for (const approval of event.approvals) add(approval);
      for (const id of answering) if (!approvals.has(id)) answering.delete(id);
      render();
    } else if (event.type === "approval.requested") {
      add(event);
      render();
    } else if (event.type === "approval.ended") {
      approvals.delete(event.approval);
      answering.delete(event.approval);
      render();
    } else if (event.type === "error" && String(event.ref || "").startsWith("approval:")) {
      const id = event.ref.slice("approval:".length);
      answering.delete(id);
      render();
      const holder = box.querySelector(`[data-approval="${CSS.escape(id)}"] .error`);
      if (holder) holder.textContent = event.message;
      socket.send({ type: "list_approvals", ref: "inbox" }); // it may have ended meanwhile: resynchronize
    }
  },
});

// -- browser notifications (shown by approvals-badge.js, on every page) ---------------------------

const notify = $("notify-me");
function showNotifyState() {
  if (!("Notification" in window)) {
    $("notify-status").textContent = "This browser cannot show notifications.";
    return;
  }
  const on = Notification.permission === "granted" && notificationsWanted();
  notify.hidden = on || Notification.permission === "denied";
  $("notify-status").textContent = on
    ? "This browser notifies you of new approvals while the portal's tab is hidden."
    : Notification.permission === "denied" ? "Notifications are blocked for this site in the browser's settings." : "";
}
notify.addEventListener("click", async () => {
  const permission = await Notification.requestPermission();
  setNotificationsWanted(permission === "granted");
  showNotifyState();
});
showNotifyState();
