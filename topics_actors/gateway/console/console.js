// The topics console: a page over the /v0 HTTP API of the node that served it.
// The API key lives in this tab's sessionStorage and travels only in the Authorization
// header (never in a URL); the live records come from a watch stream read with fetch, which
// can send that header where EventSource cannot. Everything shown is set as text, never as
// HTML: record data is whatever writers sent.
"use strict";

const KEY_ITEM = "topics.console.key";
const REFRESH_MS = 2000;
const RECORDS_KEPT = 100;
const RECORDS_BACK = 20;
const QUEUES_LOOKED_AT = 50;
const state = { key: sessionStorage.getItem(KEY_ITEM) || "", selected: null, heads: {},
                stream: null, canWrite: false };

function headers(json, accept) {
  const out = { "Accept": accept || "application/json" };
  if (json) out["Content-Type"] = "application/json";
  if (state.key) out["Authorization"] = "Bearer " + state.key;
  return out;
}

async function api(method, path, body) {
  const reply = await fetch(path, { method, headers: headers(body !== undefined),
                                    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await reply.text();
  let doc = null;
  try { doc = text ? JSON.parse(text) : {}; } catch (e) { doc = null; }
  if (!reply.ok) {
    const error = new Error((doc && doc.error && doc.error.code) || "HTTP " + reply.status);
    error.status = reply.status;
    throw error;
  }
  return doc;
}

function cell(row, value, numeric) {
  const td = row.insertCell();
  td.textContent = value === null || value === undefined ? "-" : String(value);
  if (numeric) td.className = "n";
  return td;
}

function fill(tableId, rows, numericColumns) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren();
  for (const values of rows) {
    const row = body.insertRow();
    values.forEach((v, i) => cell(row, v, numericColumns.includes(i)));
  }
  return body;
}

function say(text) { document.getElementById("status").textContent = text || ""; }

function humanBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

async function listTopics() {
  const found = [];
  let cursor = null;
  do {
    const query = "page_size=1000" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
    const page = await api("GET", "/v0/topics?" + query);
    found.push(...page.topics);
    cursor = page.next_cursor;
  } while (cursor);
  return found;
}

function rateOf(topic, now) {
  const last = state.heads[topic.topic];
  state.heads[topic.topic] = { head: topic.head_seq, at: now };
  if (!last || now <= last.at) return null;
  return Math.max(0, (topic.head_seq - last.head) * 1000 / (now - last.at)).toFixed(1);
}

async function refreshTopics() {
  const topics = await listTopics();
  const now = Date.now();
  const body = fill("topics", topics.map(t => [t.topic, t.head_seq, rateOf(t, now), t.count,
    humanBytes(t.bytes), t.durability || (t.durable ? "fsync" : "not fsync")]), [1, 2, 3, 4]);
  [...body.rows].forEach((row, i) => {
    const name = topics[i].topic;
    row.className = "topic" + (name === state.selected ? " selected" : "");
    row.dataset.topic = name;
    row.onclick = () => selectTopic(name);
  });
  return topics;
}

async function refreshQueues(topics) {
  const rows = [];
  for (const t of topics.slice(0, QUEUES_LOOKED_AT)) {
    const info = await api("GET", "/v0/topics/" + encodeURIComponent(t.topic) + "?touch=false");
    if (info.queue) {
      rows.push([t.topic, info.queue.ready, info.queue.in_flight, info.queue.dead_lettered,
                 info.config && info.config.dead_letter]);
    }
  }
  fill("queues", rows, [1, 2, 3]);
}

async function refreshRouters() {
  const page = await api("GET", "/v0/routers?page_size=1000");
  fill("routers", page.routers.map(r => [r.router, r.source, r.dest, r.guarantee,
                                           r.forwarded_total]), [4]);
}

async function refreshCluster() {
  const note = document.getElementById("cluster-note");
  try {
    const doc = await api("GET", "/v0/cluster");
    note.textContent = "node " + doc.node_id + ", controller " + doc.controller + ", " +
      Object.keys(doc.nodes || {}).length + " nodes, session " + doc.session;
    fill("cluster", Object.entries(doc.topics || {}).map(([name, t]) => [name, t.leader,
      (t.isr || []).join(", "), (t.replicas || []).join(", "),
      Object.entries(t.followers || {}).map(([n, f]) => n + ": " + f.lag).join(", ")]), []);
  } catch (error) {
    if (error.status !== 404) throw error;
    note.textContent = "a single node (not in a cluster)";
    fill("cluster", [], []);
  }
}

async function refreshQuarantine() {
  const note = document.getElementById("quarantine-note");
  try {
    const doc = await api("GET", "/v0/quarantine");
    note.textContent = "recovery policy " + doc.recovery_policy + ", " +
      doc.quarantined.length + " quarantined";
    fill("quarantine", doc.quarantined.map(q => [q.topic, q.reason, q.first_bad_seq,
      q.would_lose && q.would_lose.records]), [2, 3]);
  } catch (error) {
    if (error.status !== 401 && error.status !== 403 && error.status !== 404) throw error;
    note.textContent = error.status === 404 ? "not served by this server"
                                            : "needs a key with the admin scope";
    fill("quarantine", [], []);
  }
}

async function refresh() {
  try {
    const topics = await refreshTopics();
    await Promise.all([refreshQueues(topics), refreshRouters(), refreshCluster(),
                       refreshQuarantine()]);
    say("");
  } catch (error) {
    say(error.status === 401 || error.status === 403
        ? "the key is missing or lacks the read scope" : "refresh failed: " + error.message);
  }
}

// --- the selected topic's records, live -------------------------------------------------

function showRecords(records) {
  const body = document.querySelector("#records tbody");
  for (const r of records) {
    const row = body.insertRow(0);
    cell(row, r["$seq"], true);
    cell(row, new Date(r["$ts"]).toISOString().slice(11, 23));
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(r.data);
    row.insertCell().appendChild(pre);
  }
  while (body.rows.length > RECORDS_KEPT) body.deleteRow(-1);
}

function parseFrames(buffer, onEvent) {
  let end;
  while ((end = buffer.indexOf("\n\n")) >= 0) {
    const frame = buffer.slice(0, end);
    buffer = buffer.slice(end + 2);
    let event = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
    }
    if (data.length) onEvent(event, data.join("\n"));
  }
  return buffer;
}

async function follow(topic, fromSeq, controller) {
  let cursor = fromSeq;
  while (!controller.signal.aborted) {
    try {
      const session = await api("POST", "/v0/watch",
        { topics: { [topic]: { from_seq: cursor } }, heartbeat_ms: 5000 });
      const reply = await fetch(session.stream_url, {
        headers: headers(false, "text/event-stream"), signal: controller.signal });
      if (!reply.ok) throw new Error("stream answered " + reply.status);
      const reader = reply.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = parseFrames(buffer + decoder.decode(value, { stream: true }), (event, data) => {
          if (event !== "record") return;
          const page = JSON.parse(data);
          showRecords(page.records);
          cursor = Math.max(cursor, page.to_seq);
        });
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    await new Promise(resolve => setTimeout(resolve, 1000));   // then resume from the cursor
  }
}

async function selectTopic(name) {
  if (state.stream) state.stream.abort();
  state.selected = name;
  document.getElementById("records-topic").textContent = name;
  document.querySelector("#records tbody").replaceChildren();
  document.getElementById("append").hidden = !state.canWrite;
  for (const row of document.querySelectorAll("#topics tbody tr")) {
    row.classList.toggle("selected", row.dataset.topic === name);
  }
  try {
    const info = await api("GET", "/v0/topics/" + encodeURIComponent(name) + "?touch=false");
    state.stream = new AbortController();
    follow(name, Math.max(0, info.head_seq - RECORDS_BACK), state.stream);
  } catch (error) {
    say("cannot read " + name + ": " + error.message);
  }
}

// --- key and mode -------------------------------------------------------------------------

async function probeWrite() {
  // An append that may not create the topic, to a name that does not exist: 404 when the
  // key may write (nothing is created), 401 or 403 when it may not.
  const probe = "console-probe-" + Math.random().toString(36).slice(2);
  try {
    await api("POST", "/v0/topics/" + probe, { records: [{ data: null }], create: false });
    state.canWrite = true;     // not expected: the name was free
  } catch (error) {
    state.canWrite = error.status === 404;
  }
  const mode = document.getElementById("mode");
  mode.textContent = state.canWrite ? "read-write" : "read-only";
  mode.className = state.canWrite ? "write" : "";
  document.getElementById("append").hidden = !(state.canWrite && state.selected);
}

function useKey(key) {
  state.key = key;
  if (key) sessionStorage.setItem(KEY_ITEM, key); else sessionStorage.removeItem(KEY_ITEM);
  document.getElementById("key").value = "";
  probeWrite().then(refresh);
  if (state.selected) selectTopic(state.selected);
}

document.getElementById("key-form").onsubmit = event => {
  event.preventDefault();
  useKey(document.getElementById("key").value);
};
document.getElementById("key-forget").onclick = () => useKey("");
document.getElementById("append").onsubmit = async event => {
  event.preventDefault();
  const status = document.getElementById("append-status");
  let data;
  try { data = JSON.parse(document.getElementById("append-data").value); }
  catch (error) { status.textContent = "not JSON: " + error.message; return; }
  try {
    const reply = await api("POST", "/v0/topics/" + encodeURIComponent(state.selected),
                            { records: [{ data }] });
    status.textContent = "appended seq " + reply.last_seq;
  } catch (error) {
    status.textContent = "refused: " + error.message;
  }
};
document.getElementById("node").textContent = location.host;
probeWrite().then(refresh);
setInterval(refresh, REFRESH_MS);
