// The static memory plan as a timeline: x is the executor's call index (a buffer lives from
// first_use to last_use), y the byte offset in the workspace; hovering a buffer names it.

import { $, bytes, clear, el, svg } from "./dom.js";

const WIDTH = 720;
const HEIGHT = 300;
const LEFT = 70;
const BOTTOM = 24;

export function showMemory(report) {
  const memory = report.memory || {};
  const buffers = memory.buffers || [];
  clear($("memory-summary"),
    `workspace ${bytes(memory.workspace_bytes || 0)}, constants ${bytes(memory.constant_bytes || 0)}, `
    + `inputs/outputs ${bytes(memory.io_bytes || 0)}, ${buffers.length} planned buffer(s)`);
  clear($("memory-hover"));
  if (!buffers.length) {
    clear($("memory-plan"), el("p", { class: "hint" }, "No planned buffers: every intermediate lives in a kernel."));
    return;
  }
  const steps = Math.max((report.calls || []).length, ...buffers.map((b) => b.last_use + 1), 1);
  const top = Math.max(...buffers.map((b) => b.offset + b.bytes), 1);
  const x = (step) => LEFT + (step / steps) * (WIDTH - LEFT - 10);
  const y = (offset) => HEIGHT - BOTTOM - (offset / top) * (HEIGHT - BOTTOM - 10);
  const axis = [
    svg("line", { x1: LEFT, y1: HEIGHT - BOTTOM, x2: WIDTH - 10, y2: HEIGHT - BOTTOM, class: "axis" }),
    svg("line", { x1: LEFT, y1: 10, x2: LEFT, y2: HEIGHT - BOTTOM, class: "axis" }),
    svg("text", { x: LEFT - 6, y: y(top) + 4, "text-anchor": "end" }, bytes(top)),
    svg("text", { x: LEFT - 6, y: HEIGHT - BOTTOM, "text-anchor": "end" }, "0"),
    svg("text", { x: (LEFT + WIDTH) / 2, y: HEIGHT - 4, "text-anchor": "middle" }, "call index (lifetime)"),
  ];
  for (let step = 0; step <= steps; step += Math.max(1, Math.ceil(steps / 10))) {
    axis.push(svg("text", { x: x(step), y: HEIGHT - BOTTOM + 12, "text-anchor": "middle" }, String(step)));
  }
  const rects = buffers.map((buffer, index) => {
    const describe = describeBuffer(buffer);
    const rect = svg("rect", {
      class: "buffer", "data-buffer": buffer.name,
      x: x(buffer.first_use), width: Math.max(x(buffer.last_use + 1) - x(buffer.first_use) - 1, 2),
      y: y(buffer.offset + buffer.bytes), height: Math.max(y(buffer.offset) - y(buffer.offset + buffer.bytes), 2),
      fill: `hsl(${(index * 67) % 360} 60% 60%)`,
      onmouseenter: () => clear($("memory-hover"), el("pre", {}, describe)),
    }, svg("title", {}, describe));
    return rect;
  });
  clear($("memory-plan"), svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT }, axis, rects));
}

function describeBuffer(buffer) {
  const lines = [
    `${buffer.name}: ${bytes(buffer.bytes)} at offset ${buffer.offset}`,
    `live from call ${buffer.first_use} to call ${buffer.last_use}`,
  ];
  for (const part of buffer.allocations || []) lines.push(`  ${part.name}: ${bytes(part.bytes)} at ${part.offset}`);
  return lines.join("\n");
}
