// The MCP Apps sandbox proxy (docs/tasks-and-apps.md), served only on the apps origin (portal/apps_origin.py).
//
// playground (portal origin) ⇄ this page (apps origin) ⇄ the app (inner iframe, sandbox="allow-scripts",
// an opaque origin). The playground sends the app's HTML once (ui/notifications/sandbox-resource-ready);
// every other message is relayed as it is, each direction checked by its source window and origin.
// The app's document inherits this page's Content-Security-Policy, made from the resource's domains.
(() => {
  const RESOURCE_READY = "ui/notifications/sandbox-resource-ready";
  const PROXY_READY = "ui/notifications/sandbox-proxy-ready";
  const allowed = (document.body.dataset.portalOrigins || "").split(" ").filter(Boolean);

  if (window.parent === window) {
    document.body.textContent = "This page shows MCP Apps inside the portal's playground; on its own it does nothing.";
    return;
  }

  const inner = document.createElement("iframe");
  // No allow-same-origin: the app gets an opaque origin (no cookies, no storage, no access to this page).
  inner.setAttribute("sandbox", "allow-scripts");
  inner.setAttribute("title", "MCP App");
  document.body.append(inner);

  let portal = null; // the portal origin that sent the app, the only one answered from then on
  let loaded = false;
  const isSandboxMessage = (data) => typeof data?.method === "string" && data.method.startsWith("ui/notifications/sandbox-");

  window.addEventListener("message", (event) => {
    const data = event.data;
    if (event.source === window.parent) {
      if (!allowed.includes(event.origin) || (portal && event.origin !== portal)) return;
      portal = event.origin;
      if (data?.method === RESOURCE_READY) {
        // One app per page: a second document would be a second app in the same frame.
        if (loaded || typeof data.params?.html !== "string") return;
        loaded = true;
        inner.srcdoc = data.params.html;
      } else if (loaded && !isSandboxMessage(data)) {
        // The app's origin is opaque: "*" is the only target that reaches it, and only it listens there.
        inner.contentWindow?.postMessage(data, "*");
      }
    } else if (event.source !== null && event.source === inner.contentWindow) {
      // An opaque origin reads as "null"; anything else is not the app this page made.
      if (event.origin !== "null" || !portal || isSandboxMessage(data)) return;
      window.parent.postMessage(data, portal);
    }
  });

  // The page does not know which of the portal's origins framed it (no referrer is sent): a message
  // posted to another origin than the parent's is dropped by the browser.
  for (const origin of allowed) window.parent.postMessage({ jsonrpc: "2.0", method: PROXY_READY, params: {} }, origin);
})();
