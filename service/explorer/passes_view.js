// passes.json: the module after each pass. A pass that changed nothing has no text of its
// own; choosing it shows the text it left unchanged.

import { $, clear, el } from "./dom.js";

export function showPasses(records) {
  const list = $("pass-list");
  if (!records) {
    clear(list, el("li", { class: "hint" }, "not recorded: compile with \u201cIR after each pass\u201d"));
    clear($("pass-text"));
    return;
  }
  const items = records.map((record, index) => el("li", {
    class: record.changed ? "pass changed" : "pass unchanged",
    onclick: () => choose(records, index, items),
  }, record.pass, record.changed ? "" : " (unchanged)"));
  clear(list, items);
  const last = records.length - 1;
  if (last >= 0) choose(records, last, items);
}

function choose(records, index, items) {
  items.forEach((item, i) => item.classList.toggle("chosen", i === index));
  let source = index;
  while (source > 0 && records[source].text === null) source -= 1;
  clear($("pass-text"), records[source].text || "");
}
