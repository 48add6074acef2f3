// The Molecule Relay console. Plain JavaScript, no dependencies: every
// text is set with textContent, never parsed as HTML.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const $ = (sel) => document.querySelector(sel);
  let readOnly = false;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") e.textContent = v;
      else if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }

  async function api(path, body) {
    const opts = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf }, body: JSON.stringify(body) };
    const r = await fetch(path, Object.assign({ credentials: "same-origin" }, opts));
    const data = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(data.error || r.status + " " + r.statusText);
    return data;
  }

  function toast(msg) { const t = $("#toast"); t.textContent = msg; clearTimeout(toast.timer); toast.timer = setTimeout(() => { t.textContent = ""; }, 5000); }
  function fail(e) { toast("Error: " + e.message); }
  const time = (s) => { if (!s) return "never"; const d = new Date(s); return isNaN(d) ? "–" : d.toLocaleTimeString(); };
  const ago = (s) => { if (!s) return "never"; const secs = Math.round((Date.now() - new Date(s)) / 1000); return secs < 0 ? "now" : secs < 120 ? secs + " s ago" : Math.round(secs / 60) + " min ago"; };
  // span is the time from a to b (two timestamps) in ms, or "–".
  const span = (a, b) => { if (!a || !b) return "–"; const d = new Date(b) - new Date(a); return isNaN(d) || d < 0 ? "–" : d + " ms"; };
  const clock = (s) => { if (!s) return "–"; const d = new Date(s); return isNaN(d) ? "–" : d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0"); };
  const short = (id) => (id && id.length > 13 ? id.slice(0, 8) + "…" : id || "–");
  function fill(tbody, rows, empty, cols) {
    tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: cols, class: "muted", text: empty }))]));
  }

  function confirmAction(text) {
    const d = $("#confirm");
    $("#confirm-text").textContent = text;
    d.returnValue = "";
    d.showModal();
    return new Promise((resolve) => d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true }));
  }

  // ---- views and routing
  const loaders = {};
  let current = "";
  let refresher = 0;
  function show() {
    const view = (location.hash || "#overview").slice(1);
    if (!loaders[view]) { location.hash = "#overview"; return; }
    current = view;
    for (const p of document.querySelectorAll("[data-panel]")) p.hidden = p.id !== "view-" + view;
    for (const a of document.querySelectorAll("nav a")) { if (a.dataset.view === view) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current"); }
    clearInterval(refresher);
    const panel = document.getElementById("view-" + view);
    panel.removeAttribute("data-loaded");
    loaders[view]().then(() => { panel.dataset.loaded = "1"; }, fail);
    if (view !== "flow" && view !== "conversations" && view !== "dlq" && view !== "workspaces") refresher = setInterval(() => loaders[current]().catch(() => {}), 3000);
  }

  // ---- overview
  // eventStream is the poller's event stream of w: its state, since when,
  // why it reconnects, and its last event.
  function eventStream(w) {
    if (!w.event_stream) return "not recorded (a one-shot poller or an older relay)";
    let t = w.event_stream + " since " + time(w.event_stream_since);
    if (w.event_stream_error) t += " (" + w.event_stream_error + ")";
    if (w.event_stream !== "disabled") t += "; last event " + ago(w.last_event_at);
    return t;
  }
  loaders.overview = async () => {
    const v = await api("/api/overview");
    $("#overview-note").textContent = "Last poll, heartbeat and event are rewritten every " + v.status_refresh_secs + " s while nothing else changes; a failure or a change of the event stream at once.";
    fill($("#overview-table tbody"), v.workspaces.map((w) => {
      const rl = w.live && w.live.rate_limit;
      const budget = !rl || !rl.Known ? "unknown" : rl.Limit < 0 ? "unlimited" : rl.Remaining + " of " + rl.Limit;
      return el("tr", {},
        el("td", { class: "mono", text: w.workspace_id }),
        el("td", { class: "state-" + (w.state === "ok" ? "answered" : w.state.startsWith("error") ? "error" : "received"), text: w.state + (w.last_poll_error ? ": " + w.last_poll_error : "") }),
        el("td", { text: w.registered ? "yes (" + (w.delivery_mode || "poll") + ")" : "no" }),
        el("td", { text: w.generation }),
        el("td", { class: "mono", text: short(w.cursor) }),
        el("td", { text: ago(w.last_poll_at) }),
        el("td", { text: ago(w.last_heartbeat_at) + (w.heartbeat_error ? " (failed: " + w.heartbeat_error + ")" : "") }),
        el("td", { class: "state-" + ({ connected: "answered", reconnecting: "error" }[w.event_stream] || "received"), text: eventStream(w) }),
        el("td", { text: budget }),
        el("td", { class: "mono", text: w.polled_by ? w.group + ": " + w.polled_by : "this relay (no group)" }));
    }), "No workspace recorded yet.", 10);
  };

  // ---- flow
  const flowRows = new Map();
  let openTimeline = "";
  function flowRow(m) {
    const key = m.workspace + "/" + m.activity;
    const row = el("tr", { "data-key": key, class: flowRows.has(key) ? "" : "fresh" },
      el("td", { text: time(m.seen_at) }),
      el("td", { class: "mono", text: short(m.workspace) }),
      el("td", { class: "mono", text: m.activity }),
      el("td", { text: m.source === "peer_agent" ? "peer " + short(m.peer) : m.source || "–" }),
      el("td", { class: "state-" + m.state, text: m.state.replace("_", " ") }),
      el("td", { text: span(m.created_at, m.polled_at) }), el("td", { text: span(m.polled_at, m.handled_at) }),
      el("td", { text: span(m.handled_at, m.sent_at) }), el("td", { text: span(m.created_at, m.sent_at) }),
      el("td", {}, el("button", { type: "button", "aria-label": "Timeline of " + m.activity, onclick: () => timeline(m.workspace, m.activity) }, "Timeline")));
    return [key, row];
  }
  const flowMsgs = new Map();
  // upsert shows m, unless the page holds a newer state of it (more
  // steps): the snapshot a view loads may be older than the stream's
  // updates that overtook it. A new message goes on top, or at the
  // bottom when it comes from the snapshot (older ones).
  function upsert(m, fromSnapshot) {
    const [key, row] = flowRow(m);
    const have = flowMsgs.get(key);
    if (have && have.steps.length > m.steps.length) return;
    flowMsgs.set(key, m);
    const tbody = $("#flow-table tbody");
    const old = flowRows.get(key);
    // When the row first appeared (ms since the epoch): the browser test
    // measures arrival to appearance with it.
    row.dataset.shownAt = old ? old.dataset.shownAt : String(Date.now());
    row.dataset.polledAt = m.polled_at || "";
    if (fromSnapshot) row.className = "";
    if (old) old.replaceWith(row); else { if (!flowRows.size) tbody.replaceChildren(); if (fromSnapshot) tbody.append(row); else tbody.prepend(row); }
    flowRows.set(key, row);
    if (openTimeline === key) timeline(m.workspace, m.activity, true).catch(() => {});
  }
  function stats(s) {
    const rec = s.received_per_s.reduce((a, b) => a + b, 0), ans = s.answered_per_s.reduce((a, b) => a + b, 0);
    $("#flow-throughput").textContent = rec + " received, " + ans + " answered (" + (ans / 60).toFixed(2) + " per second)";
    const max = Math.max(1, ...s.histogram);
    $("#flow-histogram").replaceChildren(...s.histogram.map((n, i) => el("li", {},
      el("span", { class: "label", text: i < s.bounds_ms.length ? "≤ " + s.bounds_ms[i] + " ms" : "> " + s.bounds_ms[s.bounds_ms.length - 1] + " ms" }),
      el("span", { class: "bar", style: null, "data-w": n }), el("span", { text: String(n) }))));
    for (const b of document.querySelectorAll("#flow-histogram .bar")) b.style.width = (b.dataset.w / max) * 12 + "rem";
  }
  let stream = null;
  function watchFlow() {
    if (stream) return;
    stream = new EventSource("/api/flow/stream");
    stream.addEventListener("open", () => { $("#flow-status").textContent = "Live: messages appear as they arrive."; });
    stream.addEventListener("error", () => { $("#flow-status").textContent = "Reconnecting to the live flow…"; });
    stream.addEventListener("message", (e) => upsert(JSON.parse(e.data)));
    stream.addEventListener("stats", (e) => stats(JSON.parse(e.data)));
  }
  loaders.flow = async () => {
    watchFlow();
    const v = await api("/api/flow");
    for (const m of v.messages) upsert(m, true);
    if (!flowRows.size) fill($("#flow-table tbody"), [], "No recent message: none in the streams and records the flow reads.", 10);
    stats(v.stats);
  };
  async function timeline(ws, act, quiet) {
    const v = await api("/api/flow/" + encodeURIComponent(ws) + "/" + encodeURIComponent(act));
    const m = v.message, box = $("#timeline");
    openTimeline = ws + "/" + act;
    $("#timeline-id").textContent = ws + " / " + act + " · " + m.state.replace("_", " ") + (m.error ? " · " + m.error : "");
    const steps = m.steps.map((s) => el("li", {}, el("strong", { text: clock(s.at) + " " + s.stage + ": " }), s.what + (s.detail ? " (" + s.detail + ")" : "")));
    for (const d of v.dead_letters) steps.push(el("li", {}, el("strong", { text: "dead letter " + d.seq + ": " }), (d.dead_letter.reason || "") + " " + (d.dead_letter.error || "")));
    $("#timeline-steps").replaceChildren(...steps);
    if (!quiet) { $("#timeline-body").hidden = true; box.hidden = false; box.focus(); }
  }
  $("#timeline-close").addEventListener("click", () => { $("#timeline").hidden = true; const k = openTimeline; openTimeline = ""; const r = flowRows.get(k); if (r) r.querySelector("button").focus(); });
  $("#timeline-reveal").addEventListener("click", async () => {
    const [ws, act] = openTimeline.split("/");
    try {
      const b = await api("/api/flow/" + encodeURIComponent(ws) + "/" + encodeURIComponent(act) + "/reveal", {});
      const pre = $("#timeline-body"); pre.textContent = "Message:\n" + b.text + (b.reply ? "\n\nReply:\n" + b.reply : ""); pre.hidden = false;
    } catch (e) { fail(e); }
  });

  // ---- dead letters
  let dlqEntries = [], dlqOpen = 0;
  loaders.dlq = async () => {
    const q = new URLSearchParams(new FormData($("#dlq-filter")));
    const v = await api("/api/dlq?" + q);
    dlqEntries = v.entries;
    $("#dlq-count").textContent = v.total + " dead letter" + (v.total === 1 ? "" : "s");
    $("#dlq-all").checked = false;
    fill($("#dlq-table tbody"), v.entries.map((e) => {
      const d = e.dead_letter || {};
      return el("tr", { "data-seq": e.seq },
        el("td", {}, el("input", { type: "checkbox", class: "pick", value: e.seq, "aria-label": "Select dead letter " + e.seq })),
        el("td", { text: e.seq }), el("td", { text: time(e.stored) }), el("td", { text: d.stage || "–" }),
        el("td", { class: "mono", text: short(d.workspace_id) }), el("td", { class: "mono", text: d.activity_id || "–" }),
        el("td", { text: d.reason || e.decode_error || "–" }), el("td", { text: d.deliveries || "–" }), el("td", { class: "wrap", text: d.error || "" }),
        el("td", {},
          el("button", { type: "button", "aria-label": "Inspect dead letter " + e.seq, onclick: () => inspect(e.seq) }, "Inspect"), " ",
          el("button", { type: "button", "data-action": true, "aria-label": "Replay dead letter " + e.seq, onclick: () => act("replay", [e.seq]), disabled: readOnly }, "Replay")));
    }), "No dead letter.", 10);
  };
  $("#dlq-filter").addEventListener("submit", (e) => { e.preventDefault(); loaders.dlq().catch(fail); });
  $("#dlq-all").addEventListener("change", (e) => { for (const c of document.querySelectorAll("#dlq-table .pick")) c.checked = e.target.checked; });
  const picked = () => [...document.querySelectorAll("#dlq-table .pick:checked")].map((c) => Number(c.value));
  $("#dlq-replay").addEventListener("click", () => act("replay", picked()));
  $("#dlq-purge").addEventListener("click", () => act("purge", picked()));
  async function act(verb, seqs) {
    if (!seqs.length) { toast("Select one or more dead letters first."); return; }
    const what = seqs.length === 1 ? "dead letter " + seqs[0] : seqs.length + " dead letters";
    const warn = verb === "purge" ? "Purge " + what + "? It is deleted for good." : "Replay " + what + "? Its stage runs it again.";
    if (!(await confirmAction(warn))) { toast(verb + " cancelled"); return; }
    try {
      const out = await api("/api/dlq/" + verb, { seqs });
      const failed = out.filter((o) => !o.done);
      toast(failed.length ? failed.length + " failed: " + failed[0].error : (verb === "purge" ? "Purged " : "Replayed ") + what);
      $("#dlq-detail").hidden = true;
      await loaders.dlq();
    } catch (e) { fail(e); }
  }
  async function inspect(seq) {
    const e = await api("/api/dlq/" + seq).catch(fail);
    if (!e) return;
    dlqOpen = seq;
    $("#h-dlq-detail").textContent = "Dead letter " + seq + (e.withheld && e.withheld.length ? " (withheld: " + e.withheld.join(", ") + ")" : "");
    $("#dlq-detail-json").textContent = JSON.stringify(e, null, 2);
    $("#dlq-detail-body").hidden = true;
    const box = $("#dlq-detail"); box.hidden = false; box.focus();
  }
  $("#dlq-reveal").addEventListener("click", async () => {
    try { const b = await api("/api/dlq/" + dlqOpen + "/reveal", {}); const pre = $("#dlq-detail-body"); pre.textContent = JSON.stringify(b, null, 2); pre.hidden = false; } catch (e) { fail(e); }
  });

  // ---- conversations
  let convOpen = null;
  loaders.conversations = async () => {
    const v = await api("/api/conversations");
    const list = $("#conv-list");
    if (!v.workspaces.length) { list.replaceChildren(el("p", { class: "muted", text: "No workspace recorded yet." })); return; }
    list.replaceChildren(...v.workspaces.map((w) => el("section", { "aria-label": "Workspace " + w.workspace_id },
      el("h3", { class: "mono", text: w.workspace_id }),
      w.conversations.length ? el("ul", {}, ...w.conversations.map((c) => el("li", {},
        el("button", { type: "button", "aria-label": "Open conversation " + c + " of " + w.workspace_id, onclick: () => conversation(w.workspace_id, c).catch(fail) }, c))))
        : el("p", { class: "muted", text: "No conversation in memory." }))));
  };
  async function conversation(ws, c) {
    const v = await api("/api/conversations/" + encodeURIComponent(ws) + "/" + encodeURIComponent(c));
    convOpen = { ws, c };
    $("#h-conv-detail").textContent = "Conversation " + c + " of " + short(ws);
    fill($("#conv-turns tbody"), v.turns.map((t) => el("tr", {}, el("td", { text: time(t.at) }), el("td", { text: t.role }), el("td", { class: "mono", text: t.activity_id || "–" }), el("td", { text: t.chars }), el("td", { text: t.files }))), "No turn.", 5);
    $("#conv-body").hidden = true;
    const box = $("#conv-detail"); box.hidden = false; box.focus();
  }
  $("#conv-reveal").addEventListener("click", async () => {
    try { const b = await api("/api/conversations/" + encodeURIComponent(convOpen.ws) + "/" + encodeURIComponent(convOpen.c) + "/reveal", {}); const pre = $("#conv-body"); pre.textContent = b.turns.map((t) => t.role + ": " + t.text).join("\n\n"); pre.hidden = false; } catch (e) { fail(e); }
  });
  $("#conv-forget").addEventListener("click", async () => {
    if (!(await confirmAction("Forget conversation " + convOpen.c + "? Its turns are erased."))) return;
    try { await api("/api/conversations/forget", { workspace_id: convOpen.ws, conversation: convOpen.c }); toast("Forgotten"); $("#conv-detail").hidden = true; await loaders.conversations(); } catch (e) { fail(e); }
  });

  // ---- workspaces (the registry). An error stays in the view, in the
  // server's words (what, and what to do), until the next change works.
  function wsProblem(msg) { const p = $("#ws-error"); p.textContent = msg || ""; p.hidden = !msg; }
  loaders.workspaces = async () => {
    let v;
    try { v = await api("/api/workspaces"); } catch (e) { wsProblem(e.message); throw e; }
    const note = $("#ws-note");
    note.textContent = v.on ? v.write_note || "" : v.off;
    note.hidden = !note.textContent;
    $("#ws-list").hidden = !v.on;
    const can = v.on && v.writable && !readOnly;
    $("#ws-add").hidden = !can;
    fill($("#ws-table tbody"), v.workspaces.map((w) => el("tr", { "data-ws": w.id },
      el("td", { class: "mono", text: w.id }), el("td", { class: "wrap", text: w.platform_url }), el("td", { class: "mono", text: w.org_id || "–" }),
      el("td", { class: w.paused ? "state-received" : "state-answered", text: w.paused ? "paused" : "active" }),
      el("td", { text: new Date(w.added).toLocaleString() }),
      el("td", {}, ...(can ? [
        el("button", { type: "button", "data-action": true, "aria-label": (w.paused ? "Resume " : "Pause ") + w.id, onclick: () => wsChange(w.paused ? "resume" : "pause", w.id) }, w.paused ? "Resume" : "Pause"), " ",
        el("button", { type: "button", "data-action": true, class: "danger", "aria-label": "Remove " + w.id, onclick: () => wsChange("remove", w.id) }, "Remove")] : ["–"])))),
    v.on ? "No workspace in the registry yet." : "The registry is off.", 6);
  };
  const wsDone = { pause: "Paused", resume: "Resumed", remove: "Removed", add: "Added" };
  async function wsChange(verb, id) {
    if (verb === "remove" && !(await confirmAction("Remove workspace " + id + " from the registry? It stops being polled within 2 s and its token is forgotten; its messages already taken in are still answered."))) { toast("Remove cancelled"); return; }
    try { await api("/api/workspaces/" + verb, { id }); wsProblem(""); toast(wsDone[verb] + " " + id); } catch (e) { wsProblem(e.message); }
    await loaders.workspaces().catch(() => {});
  }
  $("#ws-add").addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = e.target;
    const body = Object.fromEntries(new FormData(f));
    try { await api("/api/workspaces/add", body); wsProblem(""); f.reset(); toast("Added " + body.id); } catch (err) { f.elements.token.value = ""; wsProblem(err.message); }
    await loaders.workspaces().catch(() => {});
  });

  // ---- delegations, MCP, NATS
  loaders.delegations = async () => {
    const v = await api("/api/delegations");
    fill($("#del-table tbody"), v.map((d) => el("tr", {}, el("td", { text: time(d.created_at) }), el("td", { class: "mono", text: short(d.workspace) }), el("td", { class: "mono", text: short(d.peer) }),
      el("td", { class: "mono", text: d.activity }), el("td", { text: d.state }), el("td", { text: d.sent_at ? time(d.sent_at) : "not yet" }), el("td", { text: time(d.deadline) }))), "No question waits for an answer.", 7);
  };
  loaders.mcp = async () => {
    const v = await api("/api/mcp");
    fill($("#mcp-table tbody"), v.map((s) => el("tr", {}, el("td", { class: "mono", text: s.workspace_id }), el("td", { class: "mono", text: s.instance + (s.pid ? " (pid " + s.pid + ")" : "") }),
      el("td", { text: s.role === "holds" ? "holds the channel" : "waits since " + time(s.since) }), el("td", { text: time(s.expires) }), el("td", { text: s.live ? "yes" : "no (expired)" }))), "No MCP session holds or waits for a workspace.", 5);
  };
  loaders.nats = async () => {
    const v = await api("/api/nats");
    $("#nats-server").textContent = "Connected to " + v.server + (v.cluster ? " in cluster " + v.cluster : " (no cluster)") + ".";
    fill($("#nats-nodes tbody"), v.nodes.map((n) => el("tr", {}, el("td", { text: n.name }), el("td", { text: n.leads }), el("td", { text: n.current ? "yes" : "no" }))), "No clustered stream: a single server.", 3);
    const rows = [];
    for (const s of v.streams) {
      rows.push(el("tr", {}, el("th", { scope: "row", text: s.name }), el("td", { text: s.retention }), el("td", { text: s.messages }), el("td", { text: s.bytes }), el("td", { text: "" }), el("td", { text: "" }), el("td", { text: "" }), el("td", { text: s.replicas }), el("td", { text: s.leader || "–" })));
      for (const c of s.consumers) rows.push(el("tr", {}, el("td", { text: "↳ " + c.name }), el("td", { text: "" }), el("td", { text: "" }), el("td", { text: "" }), el("td", { text: c.pending }), el("td", { text: c.ack_pending }), el("td", { text: c.redelivered }), el("td", { text: "" }), el("td", { text: c.leader || "–" })));
    }
    fill($("#nats-streams tbody"), rows, "No stream.", 9);
  };

  // ---- start
  api("/api/session").then((s) => {
    readOnly = s.read_only;
    $("#session").textContent = "Authentication: " + s.auth + (s.read_only ? " · read-only: actions are off" : "");
    for (const b of document.querySelectorAll("[data-action]")) b.disabled = readOnly;
  }).catch(fail);
  window.addEventListener("hashchange", show);
  watchFlow();
  show();
})();
