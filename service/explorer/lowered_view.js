// lowered.relay with every `@global` that a call_lowered names made a link: it scrolls to the
// function's definition (a Relay `def` or a PrimFunc comment block) and shows the call's entry
// of the report (kind, target, args, metadata) and the function's.

import { $, clear, el } from "./dom.js";

const DEFINITION = /^(?:def @(\w+)|\/\* @(\w+) = PrimFunc)/;
const GLOBAL = /@(\w+)/g;

export function showLowered(text, report) {
  const calls = new Map((report.calls || []).map((call) => [call.callee, call]));
  const lines = text.split("\n").map((line) => {
    const found = DEFINITION.exec(line);
    const id = found ? `def-${found[1] || found[2]}` : undefined;
    return el("div", { class: "line", id }, linked(line, calls, report));
  });
  clear($("lowered"), lines);
  clear($("call-info"), el("p", { class: "hint" }, "Choose a call_lowered callee to see its metadata."));
}

function linked(line, calls, report) {
  if (!line.includes("call_lowered(")) return line;
  const parts = [];
  let at = 0;
  for (const match of line.matchAll(GLOBAL)) {
    const name = match[1];
    if (!calls.has(name)) continue;
    parts.push(line.slice(at, match.index));
    parts.push(el("a", {
      href: `#def-${name}`, class: "callee", "data-callee": name,
      onclick: (event) => { event.preventDefault(); focus(name, calls.get(name), report); },
    }, match[0]));
    at = match.index + match[0].length;
  }
  parts.push(line.slice(at));
  return parts;
}

function focus(name, call, report) {
  const target = document.getElementById(`def-${name}`);
  if (target) {
    document.querySelectorAll("#lowered .focused").forEach((node) => node.classList.remove("focused"));
    target.classList.add("focused");
    target.scrollIntoView({ block: "start" });
  }
  const fn = (report.functions || {})[name];
  clear($("call-info"),
    el("h3", {}, name),
    el("dl", {},
      el("dt", {}, "kind"), el("dd", {}, call.kind),
      el("dt", {}, "target"), el("dd", {}, call.target),
      el("dt", {}, "args"), el("dd", {}, (call.args || []).join(", "))),
    el("h4", {}, "call metadata"), el("pre", { class: "code" }, JSON.stringify(call.metadata, null, 2)),
    fn ? [el("h4", {}, "function"), el("pre", { class: "code" }, JSON.stringify(fn, null, 2))] : null);
}
