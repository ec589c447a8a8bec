// The reactq watch page: submit a turn and follow the session's events live.
// Events arrive over fetch() as Server-Sent Events (fetch, not EventSource, so the
// API key can travel in the Authorization header); after a dropped connection the
// page reconnects with Last-Event-ID and the gateway resumes exactly after it.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { session: null, lastId: null, controller: null, retryTimer: null, turns: new Map(), todoEvents: 0 };
// Only with ?debug in the page's address (tests use it): every event id received, in
// order, the connections made, and a way to drop the stream.
const debug = new URLSearchParams(location.search).has("debug")
  ? { ids: [], connects: 0, drop: () => state.controller && state.controller.abort("drop") }
  : null;
if (debug) window.reactqDebug = debug;

// The session and agent are remembered across visits. The API key only for this tab:
// sessionStorage ends with it, where localStorage would keep the key on disk, readable
// by any script of this origin long after. (A key an older page left there goes.)
const stores = { session: localStorage, agent: localStorage, apikey: sessionStorage };
localStorage.removeItem("reactq.apikey");
for (const [name, store] of Object.entries(stores)) {
  const saved = store.getItem("reactq." + name);
  if (saved && !$(name).value) $(name).value = saved;
  $(name).addEventListener("change", () => store.setItem("reactq." + name, $(name).value));
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const key = $("apikey").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function setConn(text, cls) { const c = $("conn"); c.textContent = text; c.className = "conn " + cls; }
function notice(text) { $("notice").textContent = text || ""; }

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function turnBox(ev) {
  let box = state.turns.get(ev.turn_id);
  if (!box) {
    box = el("article", "turn");
    box.dataset.turnId = ev.turn_id;
    const head = el("div", "head");
    head.append(el("span", "tid", ev.turn_id), el("span", "status queued", "queued"));
    box.append(head);
    $("timeline").append(box);
    state.turns.set(ev.turn_id, box);
  }
  return box;
}

function setStatus(box, status) {
  const s = box.querySelector(".status");
  s.textContent = status; s.className = "status " + status;
}

function line(box, ev, cls, tag, body) {
  const row = el("div", "ev " + cls);
  row.dataset.eventId = ev.id;
  row.append(el("span", "tag", tag));
  if (typeof body === "string") row.append(document.createTextNode(body)); else row.append(body);
  box.append(row);
  return row;
}

function code(text) { return el("code", "", text); }

// The queued event carries an image's URL, or only the type and size of an inline one.
function userMessage(ev) {
  const span = el("span", "", ev.message);
  for (const image of ev.images || []) {
    if (/^https?:\/\//.test(image)) {
      const img = el("img", "thumb"); img.src = image; img.alt = image; img.loading = "lazy";
      span.append(" ", img);
    } else {
      span.append(" ", el("span", "image", `[image: ${image}]`));
    }
  }
  return span;
}

function todoItems(list, items) {
  const marks = { pending: "☐", in_progress: "◐", done: "☑" };
  for (const item of items) list.append(el("li", "todo " + item.status, `${marks[item.status] || "?"} ${item.text}`));
  if (!items.length) list.append(el("li", "todo empty", "(empty)"));
  return list;
}

function showPlan(items) {
  $("todo-list").replaceChildren(); todoItems($("todo-list"), items);
  $("plan").hidden = false;
}

// The session's stored list (GET /v1/sessions/{id}/todos), for a session whose stream
// no longer holds its todos events. A live event that arrives meanwhile is newer: it wins.
async function loadTodos(session) {
  const seen = state.todoEvents;
  let items;
  try { items = await getJSON(`/v1/sessions/${encodeURIComponent(session)}/todos`); } catch (err) { return; }  // a new session: none yet
  if (state.session !== session || state.todoEvents !== seen || !items.length) return;
  showPlan(items);
}

// The page's drawings, by the view kind an event's class names (its ``page`` trait,
// shared/events.py; EVENT_VIEWS in events.js, generated from them). "generic" (a plain
// line with the type and its fields) is also what a type without a known view gets:
// an event is never dropped unseen.
const VIEWS = {
  hidden() {},
  generic(box, ev) {
    const fields = {};
    for (const [k, v] of Object.entries(ev)) if (!EVENT_BASE_FIELDS.includes(k)) fields[k] = v;
    line(box, ev, "generic", ev.type, code(JSON.stringify(fields)));
  },
  text(box, ev, view) {
    const text = view.template.replace(/\{(\w+)\}/g, (_, k) => (ev[k] === undefined || ev[k] === null ? "" : String(ev[k])));
    line(box, ev, ev.type, view.tag, text);
  },
  queued(box, ev, view) { line(box, ev, "user", view.tag, userMessage(ev)); },
  started(box, ev, view) {
    setStatus(box, "running");
    line(box, ev, "started", view.tag, `attempt ${ev.attempt}` + (ev.worker ? ` on ${ev.worker}` : ""));
  },
  call(box, ev, view) {
    const args = typeof ev.args === "string" ? ev.args : JSON.stringify(ev.args);
    const span = el("span"); span.append(document.createTextNode(ev.tool + " "), code(args));
    line(box, ev, "action", view.tag, span);
  },
  result(box, ev, view) {
    const span = el("span"); span.append(document.createTextNode(ev.tool + " → "), code(ev.output));
    line(box, ev, "observation", view.tag, span);
  },
  file(box, ev, view) {
    const where = ev.from_path ? `${ev.from_path} → ${ev.path}` : ev.path;
    const span = el("span");
    span.append(document.createTextNode(`${ev.kind} ${where}` + (ev.kind === "deleted" ? "" : ` (${ev.size} bytes)`)));
    if (ev.diff) {
      const details = el("details"), summary = el("summary", "", "diff");
      const pre = el("pre", "diff"); pre.textContent = ev.diff;
      details.append(summary, pre); span.append(details);
    }
    line(box, ev, "file_change", view.tag, span);
  },
  todos(box, ev, view) {
    // The session's whole todo list after the change: one checkbox line an item, in
    // the timeline and, for a live event, in the "Todo list" panel (the latest list).
    line(box, ev, "todos", view.tag, todoItems(el("ul", "todos"), ev.items));
    if (!box.classList.contains("past")) { state.todoEvents += 1; showPlan(ev.items); }
  },
  left_out(box, ev, view) {
    line(box, ev, "turns_left_out", view.tag, `left out the ${ev.turn_ids.length} oldest turns (messages ${ev.from_sequence}-${ev.up_to_sequence}): no summary, ${ev.reason}`);
  },
  tree(box, ev) { subagent(box, ev); },
  approval(box, ev, view) {
    setStatus(box, "awaiting_approval");
    for (const call of ev.calls) {
      const span = el("span", "approval");
      span.dataset.callId = call.call_id;
      span.append(document.createTextNode(call.tool + " "), code(JSON.stringify(call.arguments)), document.createTextNode(" "));
      const yes = el("button", "approve", "Approve"), no = el("button", "deny", "Deny");
      // Edit: the arguments in a box; approving then runs the call with what it holds.
      const edit = el("button", "edit", "Edit"), box2 = el("textarea", "edit-args");
      box2.value = JSON.stringify(call.arguments, null, 2);
      box2.hidden = true;
      edit.addEventListener("click", () => { box2.hidden = !box2.hidden; });
      yes.addEventListener("click", () =>
        decide(ev.turn_id, call.call_id, true, span, box2.hidden ? null : box2.value));
      no.addEventListener("click", () => decide(ev.turn_id, call.call_id, false, span));
      span.append(yes, no, edit, box2);
      line(box, ev, "approval", view.tag, span);
    }
  },
  progress(box, ev, view) {
    // One row per call, updated as its progress comes (not a line per report).
    const text = `${ev.tool}: ${ev.message}` + (ev.fraction === null || ev.fraction === undefined ? "" : ` (${Math.round(ev.fraction * 100)}%)`);
    const row = box.querySelector(`.ev.progress[data-call-id="${CSS.escape(ev.call_id)}"]`);
    if (row) {
      row.dataset.eventId = ev.id;
      row.lastChild.textContent = text;
      return;
    }
    line(box, ev, "progress", view.tag, text).dataset.callId = ev.call_id;
  },
  decision(box, ev) {
    const span = box.querySelector(`.approval[data-call-id="${CSS.escape(ev.call_id)}"]`);
    if (span) span.querySelectorAll("button, textarea").forEach((b) => b.remove());
    const verdict = ev.approved ? "approved" : "denied";
    const edited = ev.arguments ? ` with ${JSON.stringify(ev.arguments)}` : "";
    line(box, ev, "decided " + verdict, verdict, `${ev.call_id} by ${ev.by}${edited}` + (ev.reason ? `: ${ev.reason}` : ""));
  },
  answer(box, ev, view) {
    setStatus(box, ev.status);
    const row = line(box, ev, "final" + (ev.status === "completed" ? "" : " failed"), view.tag, ev.text);
    row.classList.add("answer");
  },
  gauge(box, ev, view) {
    // The context gauge: one row per turn, updated by each model call's usage.
    if (!ev.context_window) return;
    const text = `${ev.context_percent}% of ${ev.context_window.toLocaleString()} tokens`;
    const row = box.querySelector(".ev.gauge");
    if (row) row.lastChild.textContent = text; else line(box, ev, "gauge", view.tag, text);
  },
};

// ``box``: where a past turn's events go (showTurn); by default the live timeline's.
function render(ev, box) {
  box = box || turnBox(ev);
  const view = EVENT_VIEWS[ev.type] || { kind: "generic" };
  (VIEWS[view.kind] || VIEWS.generic)(box, ev, view);
}

// A child turn's progress, forwarded to its parent's session: one indented block per
// child session under the turn that delegated it (a grandchild's block nests in its
// parent child's block, whose turn id starts the grandchild's session id), one row per
// event, like `reactq watch`'s tree. The child's own session has the full stream.
function subagent(box, ev) {
  const sel = (attr, value) => `.subagent-tree[data-${attr}="${CSS.escape(value)}"]`;
  let tree = box.querySelector(sel("child-session-id", ev.child_session_id));
  if (!tree) {
    tree = el("div", "subagent-tree");
    tree.dataset.childSessionId = ev.child_session_id;
    tree.dataset.childTurnId = ev.child_turn_id;
    tree.dataset.depth = String(ev.depth);
    let parent = box;
    for (const other of box.querySelectorAll(".subagent-tree")) {
      if (ev.child_session_id.startsWith(other.dataset.childTurnId + ":")) parent = other;
    }
    const head = el("div", "subagent-head");
    head.append(el("span", "agent", `└ ${ev.agent}`), el("span", "child-session", ev.child_session_id),
      el("span", "status queued", "queued"));
    tree.append(head);
    parent.append(tree);
  }
  if (ev.event === "started") setStatus(tree, "running");
  if (ev.status) setStatus(tree, ev.status);
  // The child's event type as data, not a class: a child's "final" row is not the turn's.
  const row = el("div", "ev subagent");
  row.dataset.eventId = ev.id;
  row.dataset.event = ev.event;
  row.append(el("span", "tag", ev.event));
  row.append(document.createTextNode((ev.status ? `[${ev.status}] ` : "") + (ev.text || "")));
  tree.append(row);
}

// A decision on a waiting tool call (POST /v1/turns/{id}/decisions); a denial asks why;
// ``edited`` (the edit box's text) replaces an approved call's arguments.
async function decide(turnId, callId, approved, span, edited = null) {
  let value = approved;
  if (!approved) {
    const reason = window.prompt("Why deny it? (the model reads this)", "");
    if (reason === null) return;
    value = reason || false;
  }
  const body = { decisions: { [callId]: value }, by: "page" };
  if (edited !== null) {
    try {
      body.arguments = { [callId]: JSON.parse(edited) };
    } catch (err) {
      notice(`the edited arguments are not JSON: ${err.message}`);
      return;
    }
  }
  span.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  const r = await fetch(`/v1/turns/${encodeURIComponent(turnId)}/decisions`, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    notice(`decision refused: ${body.code || r.status}: ${body.message || ""}`);
    span.querySelectorAll("button").forEach((b) => { b.disabled = false; });
  }
}

function handleBlock(block) {
  let id = null, type = "message", data = "";
  for (const raw of block.split("\n")) {
    if (!raw || raw.startsWith(":")) continue;
    const i = raw.indexOf(":");
    const field = i < 0 ? raw : raw.slice(0, i);
    const value = i < 0 ? "" : raw.slice(i + 1).replace(/^ /, "");
    if (field === "id") id = value;
    else if (field === "event") type = value;
    else if (field === "data") data += (data ? "\n" : "") + value;
  }
  if (!data) return;
  if (id !== null) { state.lastId = id; if (debug) debug.ids.push(id); }
  try { render(JSON.parse(data)); } catch (err) { console.error("bad event", type, err); }
}

async function connect(session) {
  const controller = new AbortController();
  state.controller = controller;
  const h = headers({ Accept: "text/event-stream" });
  if (state.lastId) h["Last-Event-ID"] = state.lastId;
  const url = `/v1/sessions/${encodeURIComponent(session)}/events` + (state.lastId ? "" : "?after=0");
  setConn(state.lastId ? "resuming…" : "connecting…", "retry");
  try {
    const resp = await fetch(url, { headers: h, signal: controller.signal, cache: "no-store" });
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({}));
      notice(`${resp.status}: ${body.message || resp.statusText}`);
      if (resp.status === 401 || resp.status === 422) { setConn("stopped", "idle"); return; }
      throw new Error(String(resp.status));
    }
    if (debug) debug.connects += 1;
    setConn("live", "live"); notice("");
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) { handleBlock(buf.slice(0, cut)); buf = buf.slice(cut + 2); }
    }
  } catch (err) {
    if (state.session !== session) return;  // switched sessions: this stream is over
  }
  if (state.session !== session) return;
  setConn("reconnecting…", "retry");
  state.retryTimer = setTimeout(() => connect(session), 1000);
}

function watch() {
  const session = $("session").value.trim();
  if (!$("session").checkValidity() || !session) { notice("pick a session id: 1-128 of A-Z a-z 0-9 . _ : -"); return; }
  if (state.session === session && state.controller && !state.controller.signal.aborted) return;
  if (state.controller) state.controller.abort("switch");
  clearTimeout(state.retryTimer);
  state.session = session; state.lastId = null; state.turns.clear();
  if (debug) debug.ids = [];
  $("timeline").replaceChildren();
  $("todo-list").replaceChildren(); $("plan").hidden = true;  // another session's plan
  connect(session);
  loadTodos(session);
}

async function send(event) {
  event.preventDefault();
  const message = $("message").value;
  if (!message.trim()) { notice("type a message first"); return; }
  watch();
  const body = { message, agent: $("agent").value.trim() };
  const resp = await fetch(`/v1/sessions/${encodeURIComponent(state.session)}/turns`, {
    method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
  });
  const out = await resp.json().catch(() => ({}));
  if (resp.status !== 202) { notice(`${resp.status}: ${out.message || resp.statusText}`); return; }
  notice(""); $("message").value = "";
}

// Stored sessions and their turns (GET /v1/sessions, /v1/sessions/{id}/turns), and a
// finished turn's events (GET /v1/turns/{id}/events): the live stream's while it holds
// the turn, else the audit log's, so a turn is readable long after its stream expired.
async function getJSON(url) {
  const r = await fetch(url, { headers: headers(), cache: "no-store" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`${r.status}: ${body.message || r.statusText}`);
  return body;
}

function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : ""; }

function pick(list, item) {
  for (const other of list.children) other.classList.toggle("picked", other === item);
}

async function loadSessions() {
  let page;
  try { page = await getJSON("/v1/sessions?limit=50"); } catch (err) { notice(`sessions: ${err.message}`); return; }
  const list = $("sessions");
  list.replaceChildren();
  if (!page.sessions.length) list.append(el("li", "empty", "no stored sessions yet"));
  for (const s of page.sessions) {
    const item = el("li", "session");
    item.dataset.sessionId = s.session_id;
    const open = el("button", "link", s.session_id);
    open.type = "button";
    open.addEventListener("click", () => { pick(list, item); openSession(s.session_id); });
    item.append(open, el("span", "meta", `${s.agent} · ${when(s.updated_at)}`));
    list.append(item);
  }
}

async function openSession(sessionId) {
  $("session").value = sessionId;
  localStorage.setItem("reactq.session", sessionId);
  const list = $("turns");
  list.replaceChildren();
  $("past").replaceChildren();
  watch();
  let turns;
  try { turns = await getJSON(`/v1/sessions/${encodeURIComponent(sessionId)}/turns`); } catch (err) { notice(`turns: ${err.message}`); return; }
  if (!turns.length) list.append(el("li", "empty", "no turns"));
  for (const t of turns) {
    const item = el("li", "past-turn");
    item.dataset.turnId = t.turn_id;
    const open = el("button", "link", t.turn_id);
    open.type = "button";
    open.addEventListener("click", () => { pick(list, item); showTurn(t.turn_id); });
    item.append(open, el("span", "status " + t.status, t.status), el("span", "meta", (t.final_text || "").slice(0, 80)));
    list.append(item);
  }
}

async function showTurn(turnId) {
  let out;
  try { out = await getJSON(`/v1/turns/${encodeURIComponent(turnId)}/events`); } catch (err) { notice(`turn: ${err.message}`); return; }
  const box = el("article", "turn past");
  box.dataset.turnId = turnId;
  box.dataset.source = out.source;
  const head = el("div", "head");
  const from = out.source === "audit" ? "from the audit log (its stream expired)" : "from the live stream";
  head.append(el("span", "tid", turnId), el("span", "source", from), el("span", "status queued", "queued"));
  box.append(head);
  $("past").replaceChildren(box);
  for (const ev of out.events) render(ev, box);
}

$("load-sessions").addEventListener("click", loadSessions);
$("controls").addEventListener("submit", send);
$("watch").addEventListener("click", watch);
$("message").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(e); });
