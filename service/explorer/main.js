// The explorer: compile what the form says, follow the build's events, then fill every pane
// from the module's report and artifacts.

import { ApiProblem, base64Of, events, getJson, getText, send, setApiKey } from "./api.js";
import { $, clear, el } from "./dom.js";
import { showLowered } from "./lowered_view.js";
import { showMemory } from "./memory_view.js";
import { showDiff, showModules } from "./modules_view.js";
import { showPartition } from "./partition_view.js";
import { showPasses } from "./passes_view.js";
import { runModule } from "./run_view.js";
import { showSource } from "./source_view.js";
import { setUpTabs, showTab } from "./tabs.js";

const state = { moduleId: null, report: null, onnx: null, codegenDocs: [] };

async function start() {
  setUpTabs();
  const key = $("api-key");
  key.value = sessionStorage.getItem("relaycc-api-key") || "";
  setApiKey(key.value);
  key.addEventListener("change", () => {
    setApiKey(key.value);
    sessionStorage.setItem("relaycc-api-key", key.value);
    loadTargets();
  });
  $("relay-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (file) { $("relay").value = await file.text(); state.onnx = null; $("onnx-file").value = ""; }
  });
  $("onnx-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    state.onnx = file ? { name: file.name, b64: base64Of(await file.arrayBuffer()) } : null;
  });
  $("codegen-files").addEventListener("change", (e) => readCodegens([...e.target.files]));
  $("compile").addEventListener("click", () => guard(compile, "status"));
  $("run").addEventListener("click", () => guard(() => runModule(state.moduleId, state.report), "run-status"));
  $("refresh-modules").addEventListener("click", () => guard(() => showModules(open), "status"));
  $("diff-modules").addEventListener("click", () => guard(showDiff, "status"));
  for (const button of document.querySelectorAll("#tabs button")) {
    if (button.dataset.tab === "Modules") button.addEventListener("click", () => guard(() => showModules(open), "status"));
  }
  $("run").disabled = true;
  await guard(loadTargets, "status");
}

async function guard(action, where) {
  try {
    await action();
  } catch (err) {
    const problem = err instanceof ApiProblem ? err.problem : { title: "error", detail: String(err.message || err) };
    clear($(where), el("span", { class: "error-message" }, `${problem.title}: ${problem.detail || ""}`));
  }
}

async function loadTargets() {
  const targets = await getJson("/targets");
  clear($("host"), targets.hosts.map((h) => el("option", { value: h }, h)));
  clear($("codegens"), el("legend", {}, "Codegens"), el("span", { class: "hint" }, "built in: "),
    targets.codegens.map((c) => el("label", { class: "codegen" },
      el("input", { type: "checkbox", class: "builtin-codegen", value: c.name }), ` ${c.name} `)),
    targets.codegen_documents ? null : el("span", { class: "hint" }, " (this service takes no codegen documents)"));
}

async function readCodegens(files) {
  const texts = new Map();
  for (const file of files) texts.set(file.name, await file.text());
  state.codegenDocs = [];
  const notes = [];
  for (const [name, text] of texts) {
    if (!name.endsWith(".json")) continue;
    const document = JSON.parse(text);
    const sources = {};
    for (const source of (document.library || {}).sources || []) {
      const base = source.split("/").pop();
      if (texts.has(base)) sources[source] = texts.get(base);
      else notes.push(`${name}: its source ${source} was not chosen`);
    }
    state.codegenDocs.push({ document, sources });
    notes.unshift(`${document.name} (${name}, ${Object.keys(sources).length} source file(s))`);
  }
  clear($("codegen-docs"), notes.join("; "));
}

function compileBody() {
  const builtin = [...document.querySelectorAll(".builtin-codegen:checked")].map((box) => box.value);
  const external = [...builtin, ...state.codegenDocs.map((c) => c.document.name)];
  const body = {
    target: [...external, $("host").value || "c"].join(", "),
    module_name: $("module-name").value || "default",
    codegens: state.codegenDocs,
  };
  if ($("record-passes").checked) body.record_passes = true;
  if (state.onnx) body.onnx = state.onnx.b64;
  else body.relay = $("relay").value;
  return body;
}

async function compile() {
  const body = compileBody();
  const text = state.onnx ? `(ONNX model ${state.onnx.name})` : body.relay;
  showSource(text, null);
  setProgress({ stage: "submitting" });
  clear($("status"));
  let status;
  try {
    status = await send("POST", "/compile", body);
  } catch (err) {
    if (err instanceof ApiProblem) return failed(text, err.problem);
    throw err;
  }
  state.moduleId = status.id;
  clear($("status"), `module ${status.id.slice(0, 12)}: ${status.state}`);
  // A stream ends after the final state, or after the service's longest stream (30 s) while
  // the job still runs: then connect again.
  while (status.state === "queued" || status.state === "running") {
    for await (const { event, data } of events(`/modules/${status.id}/events`)) {
      if (event === "progress") setProgress(data);
      else if (event === "state") { status = data; break; }
      else if (event === "error") return failed(text, data);
    }
    if (status.state === "queued" || status.state === "running") status = await getJson(`/modules/${status.id}`);
  }
  if (status.state === "failed") return failed(text, status.error || { title: "the build failed" });
  setProgress({ stage: "done", done: 1, total: 1 });
  await open(status.id);
}

function failed(text, problem) {
  setProgress({ stage: "failed" });
  showSource(text, problem);
  clear($("status"), el("span", { class: "error-message" },
    `${problem.title}${problem.line ? ` at line ${problem.line}, column ${problem.column}` : ""}`));
  showTab("Input");
}

function setProgress(progress) {
  const bar = $("progress");
  if (Number.isInteger(progress.total) && progress.total > 0) {
    bar.max = progress.total;
    bar.value = progress.done || 0;
  } else {
    bar.removeAttribute("value");
  }
  if (progress.stage === "failed") bar.value = 0;
  const counts = Number.isInteger(progress.total) ? ` ${progress.done}/${progress.total}` : "";
  clear($("stage"), `${progress.stage}${counts}${progress.last_pass ? ` (${progress.last_pass})` : ""}`);
}

async function open(id) {
  const base = `/modules/${id}`;
  const [status, report, artifacts] = await Promise.all([
    getJson(base), getJson(`${base}/metadata`), getJson(`${base}/artifacts`),
  ]);
  state.moduleId = id;
  state.report = report;
  const names = artifacts.artifacts.map((a) => a.name);
  const lowered = await getText(`${base}/artifacts/lowered.relay`);
  const passes = names.includes("passes.json") ? await getJson(`${base}/artifacts/passes.json`) : null;
  clear($("status"), `module ${id.slice(0, 12)} (${status.module_name}, ${status.target}): ${status.state}`);
  showLowered(lowered, report);
  showPasses(passes);
  showMemory(report);
  showPartition(report, lowered);
  clear($("report"), JSON.stringify(report, null, 2));
  const sources = names.filter((n) => n.startsWith("src/"));
  const select = $("c-file");
  clear(select, sources.map((n) => el("option", { value: n }, n)));
  select.onchange = () => guard(async () => clear($("c-text"), await getText(`${base}/artifacts/${select.value}`)), "status");
  if (sources.length) clear($("c-text"), await getText(`${base}/artifacts/${sources[0]}`));
  $("run").disabled = false;
  showTab("Lowered");
}

start();
