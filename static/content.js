// Showing what MCP servers send: prompt message content and resource contents.
// Text always goes in as text (textContent), never as HTML; media only from base64 data.
import { h } from "./ws.js";

const SAFE_MEDIA = /^(image|audio)\/[a-z0-9.+-]+$/i;
const JSON_TYPE = /^application\/([a-z0-9.+-]+\+)?json$/i;

function bytesOf(base64) {
  const binary = atob(base64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

// The extension a person's system opens the type with (text/plain is .txt, not .plain).
const EXTENSIONS = { "text/plain": "txt", "text/markdown": "md", "text/javascript": "js", "application/octet-stream": "bin", "image/svg+xml": "svg", "image/jpeg": "jpg", "audio/mpeg": "mp3", "application/gzip": "gz" };

export function fileName(uri, mimeType) {
  const last = (uri || "").split(/[/?#]/).filter(Boolean).pop() || "resource";
  const safe = last.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 100);
  if (safe.includes(".") || !mimeType) return safe;
  const type = mimeType.split(";")[0].trim().toLowerCase();
  return `${safe}.${EXTENSIONS[type] || type.split("/").pop().replace(/\+.*$/, "").replace(/[^a-z0-9]+/gi, "")}`;
}

function sizeOf(count) {
  return count < 1024 ? `${count} bytes` : `${(count / 1024).toFixed(1)} KB`;
}

function downloadLink(bytes, mimeType, uri) {
  const url = URL.createObjectURL(new Blob([bytes], { type: mimeType || "application/octet-stream" }));
  const name = fileName(uri, mimeType);
  return h("a", { class: "button download", href: url, download: name, text: `Download ${name} (${sizeOf(bytes.length)})` });
}

function prettyText(text, mimeType) {
  if (JSON_TYPE.test(mimeType || "")) {
    try {
      return h("pre", { class: "json", text: JSON.stringify(JSON.parse(text), null, 2) });
    } catch {
      // Not JSON after all: show it as it came.
    }
  }
  return h("pre", { class: "text-block", text });
}

// One item of resources/read's `contents`: text, or a blob shown (images, audio) or offered as a download.
export function renderResourceContents(item) {
  const head = h("div", { class: "muted small" }, h("code", { text: item.uri || "" }), item.mimeType ? ` · ${item.mimeType}` : "");
  if (item.omitted) return h("div", { class: "resource-contents" }, head, h("p", { class: "muted", text: item.omitted }));
  if (typeof item.text === "string") return h("div", { class: "resource-contents" }, head, prettyText(item.text, item.mimeType));
  if (typeof item.blob !== "string") return h("div", { class: "resource-contents" }, head, h("pre", { text: JSON.stringify(item, null, 2) }));
  let bytes;
  try {
    bytes = bytesOf(item.blob);
  } catch {
    return h("div", { class: "resource-contents" }, head, h("p", { class: "error", text: "The server sent a blob that is not valid base64." }));
  }
  const body = [];
  if (SAFE_MEDIA.test(item.mimeType || "")) {
    const src = `data:${item.mimeType};base64,${item.blob}`;
    body.push(item.mimeType.startsWith("image/")
      ? h("img", { class: "image-block", src, alt: `Image resource ${item.uri || ""}` })
      : h("audio", { controls: true, src }));
  }
  body.push(downloadLink(bytes, item.mimeType, item.uri));
  return h("div", { class: "resource-contents" }, head, ...body);
}

// One content block of a prompt message (text, image, audio, an embedded resource, a link).
export function renderBlock(block) {
  switch (block.type) {
    case "text":
      return h("pre", { class: "text-block", text: block.text });
    case "image":
    case "audio":
      if (!SAFE_MEDIA.test(block.mimeType || "")) return h("p", { class: "muted", text: `${block.type} of type ${block.mimeType}` });
      return block.type === "image"
        ? h("img", { class: "image-block", src: `data:${block.mimeType};base64,${block.data}`, alt: "Image in the message" })
        : h("audio", { controls: true, src: `data:${block.mimeType};base64,${block.data}` });
    case "resource":
      return renderResourceContents(block.resource || {});
    case "resource_link":
      return h("p", { class: "resource-link" }, "Resource: ", h("code", { text: block.uri }), block.name ? ` (${block.name})` : "");
    default:
      return h("pre", { class: "json", text: JSON.stringify(block, null, 2) });
  }
}

// A per-page prefix keeps this page's refs apart from another tab's: answers go to all of a user's sockets.
const PAGE = Math.random().toString(36).slice(2, 8);
let counter = 0;
export function nextRef(kind) {
  return `${kind}-${PAGE}-${++counter}`;
}
