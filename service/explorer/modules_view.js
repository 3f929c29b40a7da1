// Stored modules (GET /modules), newest first, and the diff of two of them.

import { getJson } from "./api.js";
import { $, clear, el } from "./dom.js";

export async function showModules(open) {
  const page = await getJson("/modules?limit=50");
  clear($("module-table"),
    el("tr", {}, el("th", {}, ""), el("th", {}, "id"), el("th", {}, "name"), el("th", {}, "target"),
      el("th", {}, "state"), el("th", {}, "created")),
    page.modules.map((m) => el("tr", { class: "module-row", "data-id": m.id },
      el("td", {}, el("input", { type: "checkbox", class: "pick", value: m.id })),
      el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); open(m.id); } }, m.id.slice(0, 12))),
      el("td", {}, m.module_name), el("td", {}, m.target), el("td", {}, m.state),
      el("td", {}, new Date(m.created_at).toLocaleString()))));
}

export async function showDiff() {
  const picked = [...document.querySelectorAll("#module-table .pick:checked")].map((box) => box.value);
  if (picked.length !== 2) {
    clear($("diff"), el("p", { class: "error-message" }, "Check exactly two modules to diff them."));
    return;
  }
  const diff = await getJson(`/modules/${picked[0]}/diff/${picked[1]}`);
  clear($("diff"), Object.entries(diff.diffs).map(([name, part]) => el("div", { class: "diff-part", "data-part": name },
    el("h3", {}, `${name}: ${part.changed ? "changed" : "unchanged"}${part.truncated ? " (truncated)" : ""}`),
    part.changed ? el("pre", { class: "code" }, part.diff.split("\n").map((line) => el("div", {
      class: line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "",
    }, line || " "))) : null)));
}
