// A tool definition's diff as a table, from the rows the server made (servers/diffs.py): the same
// table as the server page's templates/servers/diff.html, each line marked added or removed.
import { h } from "./ws.js";

const MARK = { added: ["+", " added"], removed: ["−", " removed"], same: ["", ""] };

export function renderDiff(body, rows) {
  body.replaceChildren(
    ...rows.map((row) => {
      if (row.kind === "hunk") return h("tr", { class: "diff-hunk" }, h("td", { colspan: 4, text: row.text }));
      const [mark, said] = MARK[row.kind] || MARK.same;
      return h(
        "tr",
        { class: `diff-${row.kind}` },
        h("td", { class: "ln", text: row.old ?? "" }),
        h("td", { class: "ln", text: row.new ?? "" }),
        h("td", { class: "mark" }, mark, said ? h("span", { class: "visually-hidden", text: said }) : null),
        h("td", { class: "text", text: row.text }),
      );
    }),
  );
}
