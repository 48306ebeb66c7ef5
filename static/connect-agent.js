// Connect an agent: each Copy button copies the text of the element its data-copy names.

async function copy(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  // Plain http on another host than localhost has no clipboard API: the old way still works there.
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "absolute";
  area.style.left = "-9999px";
  document.body.append(area);
  area.select();
  const done = document.execCommand("copy");
  area.remove();
  if (!done) throw new Error("copy refused");
}

for (const button of document.querySelectorAll("button[data-copy]")) {
  const label = button.textContent;
  button.addEventListener("click", async () => {
    const source = document.getElementById(button.dataset.copy);
    const text = source.tagName === "INPUT" ? source.value : source.textContent;
    try {
      await copy(text);
      button.textContent = "Copied";
    } catch {
      // Selected, so the person can copy it by hand.
      if (source.select) source.select();
      else window.getSelection().selectAllChildren(source);
      button.textContent = "Press Ctrl+C";
    }
    setTimeout(() => { button.textContent = label; }, 2000);
  });
}
