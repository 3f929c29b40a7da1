// The service's HTTP API as the page uses it: JSON in and out, problem+json errors as
// ApiProblem, server-sent events read from a fetch (an EventSource cannot send the API key).

let apiKey = "";

export function setApiKey(key) {
  apiKey = key.trim();
}

function headers(json) {
  const h = {};
  if (apiKey) h["Authorization"] = `Bearer ${apiKey}`;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

export class ApiProblem extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || `HTTP ${problem.status}`);
    this.problem = problem;
  }
}

async function problemOf(response) {
  try {
    return await response.json();
  } catch {
    return { title: response.statusText, status: response.status };
  }
}

export async function getJson(path) {
  const response = await fetch(path, { headers: headers(false) });
  if (!response.ok) throw new ApiProblem(await problemOf(response));
  return response.json();
}

export async function getText(path) {
  const response = await fetch(path, { headers: headers(false) });
  if (!response.ok) throw new ApiProblem(await problemOf(response));
  return response.text();
}

export async function send(method, path, body) {
  const response = await fetch(path, {
    method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw new ApiProblem(await problemOf(response));
  return response.status === 204 ? null : response.json();
}

// Yields {event, data} for each event of `path`'s stream until it ends.
export async function* events(path) {
  const response = await fetch(path, { headers: headers(false) });
  if (!response.ok) throw new ApiProblem(await problemOf(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

export function base64Of(arrayBuffer) {
  const bytes = new Uint8Array(arrayBuffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}
