// Running the module: inputs made up from the report's interface (or an uploaded .npz), the
// outputs shown by shape and first values, and the per-kernel profile.

import { base64Of, send } from "./api.js";
import { $, clear, el } from "./dom.js";

const MAX_VALUES = 12;

export function generatedInputs(report) {
  const inputs = {};
  for (const tensor of (report.interface || {}).inputs || []) {
    if (tensor.shape.some((d) => d < 0)) throw new Error(`input ${tensor.name} has a ? dim: upload an .npz`);
    let seed = 1;
    const value = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      const unit = seed / 2147483648;
      if (tensor.dtype.startsWith("float")) return Math.round((unit * 2 - 1) * 1000) / 1000;
      if (tensor.dtype === "bool") return unit < 0.5;
      return Math.floor(unit * 8);
    };
    const build = (dims) => dims.length === 0 ? value() : Array.from({ length: dims[0] }, () => build(dims.slice(1)));
    inputs[tensor.name] = build(tensor.shape);
  }
  return inputs;
}

export async function runModule(moduleId, report) {
  const file = $("inputs-file").files[0];
  const body = { repeat: Number($("repeat").value) || 1, profile: $("profile").checked, output_format: "json" };
  if (file) body.inputs_npz = base64Of(await file.arrayBuffer());
  else body.inputs = generatedInputs(report);
  clear($("run-status"), "running\u2026");
  const answer = await send("POST", `/modules/${moduleId}/run`, body);
  clear($("run-status"), `median ${answer.latency.median_us.toFixed(1)} \u00b5s over ${answer.latency.runs} run(s)`
    + (file ? ` with ${file.name}` : " with generated inputs"));
  showOutputs(answer.outputs || {});
  showProfile(answer.profile);
}

function showOutputs(outputs) {
  clear($("outputs"), Object.entries(outputs).map(([name, tensor]) => {
    const flat = [tensor.data].flat(Infinity);
    const shown = flat.slice(0, MAX_VALUES).map((v) => typeof v === "number" ? Number(v.toPrecision(5)) : v);
    return el("div", { class: "output", "data-output": name },
      el("strong", {}, name), ` ${tensor.dtype}[${tensor.shape.join(", ")}]: `,
      el("code", {}, shown.join(", ") + (flat.length > MAX_VALUES ? ", \u2026" : "")));
  }));
}

function showProfile(rows) {
  if (!rows) {
    clear($("profile-table"));
    return;
  }
  clear($("profile-table"),
    el("tr", {}, el("th", {}, "kernel"), el("th", {}, "calls"), el("th", {}, "\u00b5s per run"), el("th", {}, "share")),
    rows.map((row) => el("tr", { class: "kernel-row" },
      el("td", {}, row.kernel), el("td", {}, String(row.calls)), el("td", {}, row.us.toFixed(2)),
      el("td", {}, el("span", { class: "bar", style: `width:${Math.min(row.percent, 100)}px` }), ` ${row.percent.toFixed(1)}%`))));
}
