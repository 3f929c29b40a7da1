// One pane visible at a time, chosen by a row of tab buttons built from the panes' data-tab.

import { $, el } from "./dom.js";

export function setUpTabs() {
  const tabs = $("tabs");
  for (const pane of document.querySelectorAll(".pane")) {
    const name = pane.dataset.tab;
    tabs.append(el("button", { role: "tab", "data-tab": name, onclick: () => showTab(name) }, name));
  }
  showTab("Input");
}

export function showTab(name) {
  for (const pane of document.querySelectorAll(".pane")) pane.hidden = pane.dataset.tab !== name;
  for (const tab of document.querySelectorAll("#tabs button")) {
    tab.setAttribute("aria-selected", String(tab.dataset.tab === name));
  }
}
