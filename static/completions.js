// Suggestions from the server's completion/complete, offered in a <datalist> under an input.
import { h } from "./ws.js";
import { nextRef } from "./content.js";

const WAIT_MS = 200;

export class CompletionField {
  // `ask(ref, value)` sends the complete message; answers come back through `offer`.
  // The input must already be in its field: the suggestions list goes right after it.
  constructor(input, ask) {
    this.input = input;
    this.ask = ask;
    this.ref = null;
    this.timer = null;
    this.list = h("datalist", { id: `${input.id}-suggestions` });
    input.setAttribute("list", this.list.id);
    input.setAttribute("autocomplete", "off");
    input.after(this.list);
    input.addEventListener("input", () => this.schedule());
    input.addEventListener("focus", () => this.schedule(), { once: true });
  }

  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.ref = nextRef("complete");
      this.ask(this.ref, this.input.value);
    }, WAIT_MS);
  }

  // True when the answer was this field's (only the latest question counts).
  offer(event) {
    if (event.ref !== this.ref) return false;
    this.list.replaceChildren(...(event.values || []).map((value) => h("option", { value })));
    return true;
  }
}
