// The partition as a graph: @main's inputs, then every call of the executor in a column by its
// depth, coloured by the codegen that runs it (the host's kernels in grey), each listing the
// operators it holds (a host kernel's fused ops, an external function's call_extern symbols).

import { $, clear, el, svg } from "./dom.js";

const BOX_W = 230;
const LINE_H = 15;
const GAP_X = 60;
const GAP_Y = 18;

export function showPartition(report, lowered) {
  const prefix = `tvmgen_${report.module_name}_`;
  const inputs = ((report.interface || {}).inputs || []).map((t) => t.name);
  const results = resultVars(lowered);
  const externs = externSymbols(lowered);
  const nodes = inputs.map((name) => ({ id: `%${name}`, title: `%${name}`, lines: [], target: "input", depth: 0 }));
  const byVar = new Map(nodes.map((node) => [node.id, node]));
  (report.calls || []).forEach((call, index) => {
    const sources = (call.args || []).map((arg) => byVar.get(arg)).filter(Boolean);
    const node = {
      id: `call${index}`, title: call.callee.startsWith(prefix) ? call.callee.slice(prefix.length) : call.callee,
      target: call.compiler || call.target, lines: operatorsOf(call, prefix, externs), sources,
      depth: 1 + Math.max(0, ...sources.map((s) => s.depth)),
    };
    nodes.push(node);
    if (results[index]) byVar.set(results[index], node);
  });
  layOut(nodes);
  const targets = [...new Set(nodes.map((n) => n.target))];
  const colour = (target) => target === "input" ? "#eef" : target === report.target.host ? "#ddd"
    : `hsl(${(targets.indexOf(target) * 97) % 360} 65% 78%)`;
  const edges = nodes.flatMap((node) => (node.sources || []).map((source) => svg("path", {
    class: "edge",
    d: `M${source.x + BOX_W} ${source.y + source.h / 2} C${source.x + BOX_W + GAP_X / 2} ${source.y + source.h / 2} `
      + `${node.x - GAP_X / 2} ${node.y + node.h / 2} ${node.x} ${node.y + node.h / 2}`,
  })));
  const boxes = nodes.map((node) => svg("g", { class: "node", "data-target": node.target },
    svg("rect", { x: node.x, y: node.y, width: BOX_W, height: node.h, rx: 5, fill: colour(node.target) }),
    svg("text", { x: node.x + 6, y: node.y + LINE_H, class: "node-title" }, node.title),
    svg("text", { x: node.x + 6, y: node.y + 2 * LINE_H, class: "node-target" },
      node.target === "input" ? "input" : `on ${node.target}`),
    node.lines.map((line, i) => svg("text", { x: node.x + 12, y: node.y + (3 + i) * LINE_H, class: "node-op" }, line))));
  const width = Math.max(...nodes.map((n) => n.x + BOX_W)) + 10;
  const height = Math.max(...nodes.map((n) => n.y + n.h)) + 10;
  const legend = el("p", { class: "legend" }, targets.map((t) =>
    el("span", { class: "swatch", style: `background:${colour(t)}` }, t === report.target.host ? `${t} (host)` : t)));
  clear($("partition"), legend, svg("svg", { width, height, viewBox: `0 0 ${width} ${height}` }, edges, boxes));
}

function layOut(nodes) {
  const rows = new Map();
  for (const node of nodes) {
    node.h = (2 + node.lines.length) * LINE_H + 8;
    const y = rows.get(node.depth) || 10;
    node.x = 10 + node.depth * (BOX_W + GAP_X);
    node.y = y;
    rows.set(node.depth, y + node.h + GAP_Y);
  }
}

// `%N = call_lowered(@f, ...)` in @main, in order: the variable each call's result is bound to.
function resultVars(lowered) {
  const vars = [];
  for (const line of lowered.split("\n")) {
    if (!line.includes("call_lowered(")) continue;
    const bound = /^\s*(%\w+) = call_lowered\(/.exec(line);
    vars.push(bound ? bound[1] : null);
  }
  return vars;
}

// The call_extern symbols of each PrimFunc block of lowered.relay.
function externSymbols(lowered) {
  const found = new Map();
  let current = null;
  for (const line of lowered.split("\n")) {
    const start = /^\/\* @(\w+) = PrimFunc/.exec(line);
    if (start) current = start[1];
    const call = /call_extern\('(\w+)'/.exec(line);
    if (current && call) found.set(current, [...(found.get(current) || []), call[1]]);
  }
  return found;
}

function operatorsOf(call, prefix, externs) {
  if (call.kind === "extern") return (externs.get(call.callee) || []).map((s) => `${s}()`);
  const fused = call.callee.slice(prefix.length).replace(/^fused_/, "").replace(/_\d+$/, "");
  return fused ? [fused] : [];
}
