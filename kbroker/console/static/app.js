// The kbroker console: hash routes (#/brokers, #/topics, #/topics/NAME, #/groups, #/groups/ID, #/produce)
// rendered from the JSON endpoints under /api/. Plain DOM, no build step.
"use strict";

const view = () => document.getElementById("view");
const statusLine = () => document.getElementById("status");

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// A table with a caption and column headers; `numeric` names the right-aligned columns.
function table(caption, headers, rows, numeric = []) {
  return el("table", {},
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", class: numeric.includes(h) ? "num" : null }, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((cell, i) =>
      i === 0 ? el("th", { scope: "row" }, cell)
        : el("td", { class: numeric.includes(headers[i]) ? "num" : null }, cell))))));
}

function page(title, ...content) {
  document.title = `${title} - kbroker console`;
  view().replaceChildren(el("h1", {}, title), ...content.filter((part) => part !== null && part !== undefined));
}

function topicLink(name) { return el("a", { href: `#/topics/${encodeURIComponent(name)}` }, name); }
function groupLink(id) { return el("a", { href: `#/groups/${encodeURIComponent(id)}` }, id); }

async function brokersPage() {
  const cluster = await api("/api/cluster");
  page("Brokers",
    el("p", {}, "Cluster id ", el("code", {}, cluster.cluster_id || "unknown"), ", bootstrap ",
      el("code", {}, cluster.bootstrap_servers), "."),
    table("Brokers of the cluster", ["Broker id", "Host", "Port", "Rack", "Role"],
      cluster.brokers.map((b) => [String(b.id), b.host, String(b.port), b.rack || "-",
        b.controller ? el("span", { class: "badge" }, "controller") : "broker"]), ["Port"]));
}

async function topicsPage() {
  const { topics } = await api("/api/topics");
  page("Topics",
    table(`${topics.length} topics`, ["Topic", "Partitions", "Replication factor", "Messages", "Under-replicated"],
      topics.map((t) => [topicLink(t.name), String(t.partitions), String(t.replication_factor), String(t.messages),
        String(t.under_replicated)]), ["Partitions", "Replication factor", "Messages", "Under-replicated"]));
}

function formatBytes(n) {
  if (n === null || n === undefined) return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

async function topicPage(name) {
  const topic = await api(`/api/topics/${encodeURIComponent(name)}`);
  const results = el("div", { id: "messages" });
  const partitions = topic.partitions.map((p) => el("option", { value: p.partition }, String(p.partition)));
  const form = el("form", { class: "inline", "aria-label": "Browse messages", onsubmit: (event) => {
    event.preventDefault();
    browse(name, new FormData(event.target), results);
  } },
  el("label", {}, "Partition", el("select", { name: "partition" }, partitions)),
  el("label", {}, "From offset", el("input", { name: "offset", type: "number", min: "0", inputmode: "numeric" })),
  el("label", {}, "From time", el("input", { name: "time", type: "datetime-local", step: "1" })),
  el("label", {}, "Key contains", el("input", { name: "key", type: "search" })),
  el("label", {}, "Limit", el("input", { name: "limit", type: "number", min: "1", max: "500", value: "50" })),
  el("button", { type: "submit" }, "Show messages"));
  page(`Topic ${name}`,
    el("h2", {}, "Partitions"),
    table(`${topic.partitions.length} partitions`,
      ["Partition", "Leader", "Replicas", "In-sync replicas", "Earliest offset", "Latest offset", "Size"],
      topic.partitions.map((p) => [String(p.partition), String(p.leader), p.replicas.join(", "), p.isr.join(", "),
        String(p.earliest_offset), String(p.latest_offset), formatBytes(p.size_bytes)]),
      ["Earliest offset", "Latest offset", "Size"]),
    topic.sizes_note ? el("p", { class: "muted" }, `Sizes unknown: ${topic.sizes_note}.`) : null,
    el("h2", {}, "Messages"), form, results,
    el("h2", {}, "Configuration"),
    table("Topic configuration", ["Name", "Value", "Source"],
      topic.configs.map((c) => [c.name, c.value === null ? "(sensitive)" : c.value, c.default ? "default" : c.source])));
}

// Text as JSON pretty-printed when it parses as a JSON object or array, else as is; binary as base64.
function renderData(data) {
  if (data === null) return el("span", { class: "muted" }, "null");
  if (data.base64 !== undefined) return el("pre", {}, `base64:${data.base64}`);
  const text = data.text;
  if (/^\s*[{[]/.test(text)) {
    try { return el("pre", { class: "json" }, JSON.stringify(JSON.parse(text), null, 2)); } catch (e) { /* not JSON */ }
  }
  return el("pre", {}, text);
}

async function browse(topic, form, results) {
  const query = new URLSearchParams({ partition: form.get("partition"), limit: form.get("limit") || "50" });
  if (form.get("offset")) query.set("offset", form.get("offset"));
  if (form.get("time")) query.set("timestamp", String(new Date(form.get("time")).getTime()));
  if (form.get("key")) query.set("key", form.get("key"));
  results.replaceChildren(el("p", { role: "status" }, "Loading..."));
  try {
    const answer = await api(`/api/topics/${encodeURIComponent(topic)}/messages?${query}`);
    results.replaceChildren(table(`${answer.messages.length} messages from offset ${answer.start_offset}`,
      ["Offset", "Timestamp", "Key", "Value", "Headers"],
      answer.messages.map((m) => [String(m.offset), new Date(m.timestamp).toISOString(), renderData(m.key),
        renderData(m.value), m.headers.length ? el("ul", {}, m.headers.map((h) => el("li", {}, `${h.key}: `,
          h.value && h.value.text !== undefined ? h.value.text : JSON.stringify(h.value)))) : "-"]), ["Offset"]));
  } catch (error) {
    results.replaceChildren(el("p", { role: "alert", class: "error" }, error.message));
  }
}

async function groupsPage() {
  const { groups } = await api("/api/groups");
  page("Consumer groups",
    table(`${groups.length} consumer groups`, ["Group", "State", "Members", "Coordinator", "Total lag"],
      groups.map((g) => [groupLink(g.group_id), g.state, String(g.members),
        g.coordinator ? String(g.coordinator.id) : "-", String(g.lag)]), ["Members", "Total lag"]));
}

// Lag over time as an inline SVG line chart, with a text equivalent for screen readers.
function lagChart(samples) {
  const width = 720, height = 200, pad = 36;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  const latest = samples.length ? samples[samples.length - 1][1] : 0;
  svg.setAttribute("aria-label", `Total lag over time, ${samples.length} samples, latest ${latest}`);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
  };
  const maxLag = Math.max(1, ...samples.map((s) => s[1]));
  const t0 = samples.length ? samples[0][0] : 0;
  const span = Math.max(1, samples.length ? samples[samples.length - 1][0] - t0 : 1);
  const x = (t) => pad + ((t - t0) / span) * (width - 2 * pad);
  const y = (lag) => height - pad - (lag / maxLag) * (height - 2 * pad);
  add("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#57606a" });
  add("line", { x1: pad, y1: pad, x2: pad, y2: height - pad, stroke: "#57606a" });
  add("text", { x: 4, y: pad, "font-size": 11 }, String(maxLag));
  add("text", { x: 4, y: height - pad, "font-size": 11 }, "0");
  add("text", { x: width - pad, y: height - 10, "font-size": 11, "text-anchor": "end" }, `${Math.round(span)} s`);
  if (samples.length) {
    const points = samples.map(([t, lag]) => `${x(t).toFixed(1)},${y(lag).toFixed(1)}`).join(" ");
    add("polyline", { points, fill: "none", stroke: "#0b5cad", "stroke-width": 2 });
    for (const [t, lag] of samples) add("circle", { cx: x(t), cy: y(lag), r: 2.5, fill: "#0b5cad" });
  }
  return el("figure", {}, svg, el("figcaption", { class: "muted" },
    `Total lag sampled by the console every few seconds: ${samples.length} samples, latest ${latest}.`));
}

async function groupPage(id) {
  const group = await api(`/api/groups/${encodeURIComponent(id)}`);
  page(`Consumer group ${id}`,
    el("p", {}, `State ${group.state}, assignor ${group.protocol || "-"}, coordinator broker `,
      group.coordinator ? String(group.coordinator.id) : "-", "."),
    el("h2", {}, "Members"),
    table(`${group.members.length} members`, ["Member", "Client id", "Host", "Assigned partitions"],
      group.members.map((m) => [m.member_id, m.client_id, m.host,
        m.assignment.map((a) => `${a.topic}-${a.partition}`).join(", ") || "-"])),
    el("h2", {}, "Offsets and lag"),
    table("Committed offsets", ["Topic", "Partition", "Committed offset", "Log end offset", "Lag"],
      group.offsets.map((o) => [topicLink(o.topic), String(o.partition), String(o.committed_offset),
        String(o.log_end_offset), String(o.lag)]), ["Partition", "Committed offset", "Log end offset", "Lag"]),
    el("h2", {}, "Lag over time"), lagChart(group.lag_history));
}

async function producePage() {
  const { topics } = await api("/api/topics");
  const outcome = el("div", { id: "produce-result" });
  const form = el("form", { "aria-label": "Produce a test message", onsubmit: async (event) => {
    event.preventDefault();
    const data = new FormData(event.target);
    const headers = (data.get("headers") || "").split("\n").filter((line) => line.includes("="))
      .map((line) => ({ key: line.slice(0, line.indexOf("=")).trim(), value: line.slice(line.indexOf("=") + 1) }));
    try {
      const ack = await api(`/api/topics/${encodeURIComponent(data.get("topic"))}/messages`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ key: data.get("key"), value: data.get("value"), partition: data.get("partition"), headers }),
      });
      outcome.replaceChildren(el("p", { role: "status" },
        `Produced to ${ack.topic} partition ${ack.partition} at offset ${ack.offset}.`));
    } catch (error) {
      outcome.replaceChildren(el("p", { role: "alert", class: "error" }, error.message));
    }
  } },
  el("label", {}, "Topic", el("select", { name: "topic", required: true },
    topics.map((t) => el("option", { value: t.name }, t.name)))),
  el("label", {}, "Partition (empty: the client's partitioner)", el("input", { name: "partition", type: "number", min: "0" })),
  el("label", {}, "Key", el("input", { name: "key" })),
  el("label", {}, "Value", el("textarea", { name: "value", rows: "5" })),
  el("label", {}, "Headers (one key=value a line)", el("textarea", { name: "headers", rows: "2" })),
  el("button", { type: "submit" }, "Produce"));
  page("Produce a test message", form, outcome);
}

const routes = [
  [/^#\/topics\/(.+)$/, (m) => topicPage(decodeURIComponent(m[1])), "#/topics"],
  [/^#\/topics$/, topicsPage, "#/topics"],
  [/^#\/groups\/(.+)$/, (m) => groupPage(decodeURIComponent(m[1])), "#/groups"],
  [/^#\/groups$/, groupsPage, "#/groups"],
  [/^#\/produce$/, producePage, "#/produce"],
  [/^#\/brokers$|^#?\/?$/, brokersPage, "#/brokers"],
];

async function route() {
  const hash = location.hash || "#/brokers";
  for (const [pattern, render, section] of routes) {
    const match = hash.match(pattern);
    if (!match) continue;
    for (const link of document.querySelectorAll("nav a")) {
      if (link.getAttribute("href") === section) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    statusLine().textContent = "";
    try {
      await render(match);
      document.getElementById("main").focus({ preventScroll: true });
    } catch (error) {
      page("Error", el("p", { role: "alert", class: "error" }, error.message));
    }
    return;
  }
  page("Not found", el("p", {}, "No such page."));
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
