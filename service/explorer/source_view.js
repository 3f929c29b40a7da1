// The input as numbered lines, with the line of a parse or type error marked and a caret under
// its column.

import { $, clear, el } from "./dom.js";

export function showSource(text, problem) {
  const line = problem && Number.isInteger(problem.line) ? problem.line : null;
  const column = problem && Number.isInteger(problem.column) ? problem.column : 1;
  const rows = text.split("\n").map((source, index) => {
    const number = index + 1;
    const marked = number === line;
    const row = el("div", { class: marked ? "line error-line" : "line", "data-line": number },
      el("span", { class: "lineno" }, String(number)), el("span", { class: "src" }, source || " "));
    if (!marked) return row;
    const caret = el("div", { class: "line caret-line" }, el("span", { class: "lineno" }, ""),
      el("span", { class: "src" }, " ".repeat(Math.max(column - 1, 0)) + "^ " + (problem.detail || problem.title)));
    return [row, caret];
  });
  const header = problem
    ? el("div", { class: "error-message" },
      line ? `line ${line}, column ${column}: ` : "", problem.title || "", problem.detail ? ` — ${problem.detail}` : "")
    : null;
  clear($("source-view"), header, rows);
  const marked = $("source-view").querySelector(".error-line");
  if (marked) marked.scrollIntoView({ block: "center" });
}
