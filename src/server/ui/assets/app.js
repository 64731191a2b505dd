// massgen live coordination view. Plain script, no build step, no dependencies.
// Every piece of model or user text reaches the page through text nodes (textContent,
// append of strings): the page never turns a string into markup.
"use strict";

const KEY_STORE = "massgen.apiKey";
const LIST_POLL_MS = 3000;
const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- small helpers

/** Builds an element; string children become text nodes. */
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = String(v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

function seconds(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 10000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`;
}

function tokens(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString();
}

/** USD with enough digits for a cent's fractions; "–" where the price is unknown. */
function usd(n) {
  if (n === null || n === undefined) return "–";
  return `$${Number(n).toFixed(n < 0.01 ? 6 : 4)}`;
}

function clock(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString();
}

function notice(text) {
  const n = $("notice");
  n.textContent = text || "";
  n.hidden = !text;
}

// ---------------------------------------------------------------- API access

class AuthNeeded extends Error {}

function apiKey() {
  return sessionStorage.getItem(KEY_STORE) || "";
}

async function errorMessage(res) {
  try {
    const body = await res.json();
    return (body.error && body.error.message) || `HTTP ${res.status}`;
  } catch {
    return `HTTP ${res.status}`;
  }
}

/** fetch with the stored key; a 401 opens the key box and throws AuthNeeded. */
async function api(path, init) {
  const headers = new Headers((init && init.headers) || {});
  const key = apiKey();
  if (key) headers.set("authorization", `Bearer ${key}`);
  const res = await fetch(path, { ...init, headers });
  if (res.status === 401) {
    askForKey(key ? await errorMessage(res) : "");
    throw new AuthNeeded();
  }
  return res;
}

function askForKey(problem) {
  $("key-box").hidden = false;
  $("key-error").textContent = problem || "";
  $("key-input").focus();
}

$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const key = $("key-input").value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY_STORE, key);
  $("key-input").value = "";
  $("key-box").hidden = true;
  start();
});

/** Server-sent events from a fetch response body: yields {event, data}. */
async function* sse(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, at);
      buf = buf.slice(at + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line === "" || line.startsWith(":")) continue;
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        let v = i < 0 ? "" : line.slice(i + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "event") event = v;
        else if (field === "data") data.push(v);
      }
      if (data.length) yield { event, data: data.join("\n") };
    }
  }
}

// ---------------------------------------------------------------- models and the question box

async function loadModels() {
  const res = await api("/v1/models");
  if (!res.ok) throw new Error(await errorMessage(res));
  const body = await res.json();
  const select = $("ask-model");
  const previous = select.value;
  select.replaceChildren(...body.data.map((m) => el("option", { value: m.id, text: m.id })));
  if ([...select.options].some((o) => o.value === previous)) select.value = previous;
  $("ask-submit").disabled = body.data.length === 0;
  if (body.data.length === 0) notice("This server has no panel configured (no --config, --configs-dir or --demo).");
}

$("ask").addEventListener("submit", async (e) => {
  e.preventDefault();
  const question = $("ask-question").value.trim();
  if (!question) return;
  $("ask-submit").disabled = true;
  try {
    const id = await startSession($("ask-model").value || "massgen", question);
    $("ask-question").value = "";
    location.hash = `#/s/${encodeURIComponent(id)}`;
  } catch (err) {
    if (!(err instanceof AuthNeeded)) notice(`Could not start the session: ${err.message}`);
  } finally {
    $("ask-submit").disabled = false;
  }
});

/**
 * POSTs the question as a streamed chat completion and returns the session id from the
 * response header. The body is read to its end in the background: the session belongs to
 * this request, and leaving it unread would hold the session back (and closing it would
 * cancel the session).
 */
async function startSession(model, question) {
  const res = await api("/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model,
      stream: true,
      messages: [{ role: "user", content: question }],
      massgen: { deliberation: "full" },
    }),
  });
  if (!res.ok) throw new Error(await errorMessage(res));
  const id = res.headers.get("x-massgen-session-id");
  if (!id) throw new Error("the response carries no x-massgen-session-id header");
  drain(res);
  return id;
}

async function drain(res) {
  try {
    for await (const m of sse(res)) {
      if (m.data === "[DONE]") continue;
      const chunk = JSON.parse(m.data);
      if (chunk.error) notice(`Session ended with an error: ${chunk.error.message}`);
    }
  } catch (err) {
    notice(`The session's response stream broke: ${err.message}`);
  }
  refreshList();
}

// ---------------------------------------------------------------- session list

let listTimer = null;

async function refreshList() {
  if ($("list-view").hidden) return;
  let body;
  try {
    // An eval run records thousands of sessions: hidden unless asked for.
    const filter = $("show-eval").checked ? "" : "&exclude_door=eval";
    const res = await api(`/v1/sessions?limit=100${filter}`);
    if (!res.ok) throw new Error(await errorMessage(res));
    body = await res.json();
  } catch (err) {
    if (!(err instanceof AuthNeeded)) notice(`Could not list sessions: ${err.message}`);
    return;
  }
  const rows = body.data.map((s) =>
    el(
      "tr",
      { "data-id": s.id, "data-status": s.status, onclick: () => (location.hash = `#/s/${encodeURIComponent(s.id)}`) },
      el("td", { text: clock(s.created_at_ms) }),
      el("td", { class: "q" }, el("a", { href: `#/s/${encodeURIComponent(s.id)}`, text: s.question || s.id })),
      el("td", { text: panelCell(s) }),
      el("td", {}, el("span", { class: "badge", "data-status": s.status, text: s.status })),
      el("td", { text: s.winner ? `${s.winner.label} (${s.winner.agent_id})` : "–" }),
      el("td", { class: "num", text: seconds(s.duration_ms) }),
      el("td", { class: "num", text: tokens(s.usage && s.usage.total_tokens) }),
    ),
  );
  $("sessions-body").replaceChildren(...rows);
  $("sessions-empty").hidden = rows.length > 0;
}

/** "model (panel) · door": the API the session came through (chat completions, responses, messages), or eval. */
function panelCell(s) {
  const model = s.panel && s.panel !== s.model ? `${s.model} (${s.panel})` : s.model;
  const door = { chat_completions: "chat", responses: "responses", messages: "messages", eval: "eval" }[s.door];
  return door ? `${model} · ${door}` : model;
}

$("show-eval").addEventListener("change", () => refreshList());

function pollList(on) {
  clearInterval(listTimer);
  listTimer = null;
  if (on) {
    refreshList();
    listTimer = setInterval(() => {
      if (document.visibilityState === "visible") refreshList();
    }, LIST_POLL_MS);
  }
}

// ---------------------------------------------------------------- one session, rendered from its events

class SessionView {
  constructor() {
    this.reset();
  }

  reset() {
    this.agents = new Map(); // agent_id → column state
    this.t0 = null;
    this.votes = []; // {li, target, cleared}
    this.finalNode = null;
    this.turnStart = new Map();
    $("agents").replaceChildren();
    $("vote-list").replaceChildren();
    $("tally").replaceChildren();
    $("winner").replaceChildren();
    $("final-text").replaceChildren();
    $("final-by").textContent = "";
    $("usage").replaceChildren();
    $("usage-panel").hidden = true;
    this.status("running", "Waiting for the first event…");
  }

  status(status, phase) {
    const badge = $("s-status");
    badge.dataset.status = status;
    badge.textContent = status;
    $("session-view").dataset.status = status;
    if (phase !== undefined) $("s-phase").textContent = phase;
  }

  at(ev) {
    return el("span", { class: "at", text: `+${seconds(ev.at_ms - this.t0)}` });
  }

  column(ref) {
    let a = this.agents.get(ref.agent_id);
    if (a) return a;
    const state = el("span", { class: "agent-state", text: "waiting" });
    const feed = el("div", { class: "feed" });
    const foot = el("footer", { text: "0 tokens" });
    const node = el(
      "article",
      { class: "agent-col", "data-agent": ref.agent_id, "data-label": ref.label },
      el("header", {}, el("span", { class: "agent-label", text: ref.label }), el("span", { class: "agent-id", text: ref.agent_id }), state),
      feed,
      foot,
    );
    a = { ref, node, state, feed, foot, stream: null, turns: 0, answers: 0, failed: false, busyMs: 0, firstAnswerMs: null, usage: null, cost: 0, turnAt: null };
    this.agents.set(ref.agent_id, a);
    $("agents").append(node);
    return a;
  }

  /** Appends to an agent's feed, keeping it scrolled to the bottom if it was there. */
  add(a, item) {
    const f = a.feed;
    const atBottom = f.scrollHeight - f.scrollTop - f.clientHeight < 40;
    f.append(item);
    if (atBottom) f.scrollTop = f.scrollHeight;
    return item;
  }

  setState(a, text, cls) {
    a.state.textContent = text;
    a.state.className = `agent-state ${cls || ""}`;
  }

  endTurn(a, ev) {
    if (a.stream) a.stream.classList.add("done");
    a.stream = null;
    if (a.turnAt !== null) a.busyMs += ev.at_ms - a.turnAt;
    a.turnAt = null;
  }

  apply(ev) {
    if (this.t0 === null) this.t0 = ev.at_ms;
    const h = this[`on_${ev.type}`];
    if (h) h.call(this, ev);
  }

  on_session_started(ev) {
    for (const ref of ev.agents) this.column(ref);
    this.status("running", `${ev.agents.length} agents deliberating`);
  }

  on_turn_started(ev) {
    const a = this.column(ev.agent);
    a.turns = ev.turn;
    a.turnAt = ev.at_ms;
    const seen = ev.answers_seen.length ? ` · sees ${ev.answers_seen.join(", ")}` : "";
    const label = ev.turn > 1 ? `restart: turn ${ev.turn}${seen}` : `turn 1${seen}`;
    this.add(a, el("p", { class: ev.turn > 1 ? "turn restart" : "turn" }, label, this.at(ev)));
    this.setState(a, "thinking", "thinking");
    this.foot(a);
  }

  on_agent_delta(ev) {
    const a = this.column(ev.agent);
    if (!a.stream) {
      a.stream = this.add(a, el("p", { class: "stream" }));
      a.stream.append(document.createTextNode(""));
    }
    a.stream.firstChild.appendData(ev.text);
    const f = a.feed;
    if (f.scrollHeight - f.scrollTop - f.clientHeight < 80) f.scrollTop = f.scrollHeight;
  }

  on_answer(ev) {
    const ans = ev.answer;
    const a = this.column(ans);
    this.endTurn(a, ev);
    if (a.firstAnswerMs === null) a.firstAnswerMs = ev.at_ms - this.t0;
    a.answers += 1;
    const content = ans.content.type === "tool_calls"
      ? ans.content.calls.map((c) => `${c.name}(${c.arguments})`).join("\n")
      : ans.content.text;
    const title = ans.content.type === "tool_calls" ? `${ans.answer_label} · proposes tool calls` : ans.answer_label;
    this.add(a, el("div", { class: "answer", "data-label": ans.answer_label },
      el("span", { class: "answer-label" }, title, this.at(ev)),
      el("div", { class: "answer-text", text: content })));
    this.setState(a, `answered ${ans.answer_label}`);
    // A new answer clears every vote cast so far.
    for (const v of this.votes) if (!v.cleared) {
      v.cleared = true;
      v.li.classList.add("cleared");
      v.li.title = `cleared by the new answer ${ans.answer_label}`;
    }
    this.renderTally();
  }

  on_vote(ev) {
    const v = ev.vote;
    const a = this.column(v.voter);
    this.endTurn(a, ev);
    this.add(a, el("p", { class: "vote-cast" }, `voted for ${v.target_label}: `, v.reason, this.at(ev)));
    this.setState(a, `voted ${v.target_label}`);
    const li = el("li", { class: "vote", "data-voter": v.voter.label, "data-target": v.target_label },
      el("b", { text: v.voter.label }), ` → ${v.target_label}: `, v.reason, this.at(ev));
    $("vote-list").append(li);
    this.votes.push({ li, target: v.target_label, cleared: false });
    this.renderTally();
  }

  on_vote_ignored(ev) {
    const v = ev.vote;
    const a = this.column(v.voter);
    this.endTurn(a, ev);
    this.add(a, el("p", { class: "ignored" }, `vote for ${v.target_label} ignored: ${ev.why}`, this.at(ev)));
    $("vote-list").append(el("li", { class: "ignored-vote" },
      el("b", { text: v.voter.label }), ` → ${v.target_label} ignored: `, ev.why, this.at(ev)));
  }

  on_turn_restarted(ev) {
    const a = this.column(ev.agent);
    this.endTurn(a, ev);
    this.add(a, el("p", { class: "ignored" }, `turn ${ev.turn} cancelled: ${ev.newest} arrived before it answered`, this.at(ev)));
    this.setState(a, "restarting");
  }

  on_turn_invalid(ev) {
    const a = this.column(ev.agent);
    this.add(a, el("p", { class: "invalid" }, `invalid turn (attempt ${ev.attempt}, ${ev.check}): `, ev.message, this.at(ev)));
  }

  on_agent_failed(ev) {
    const e = ev.error;
    const a = this.column(e);
    this.endTurn(a, ev);
    this.add(a, el("p", { class: "failed" }, `failed (${e.kind}): `, e.message, this.at(ev)));
    this.setState(a, "failed");
    a.failed = true;
    a.node.classList.add("failed-col");
  }

  on_tool_called(ev) {
    const a = this.column(ev.agent);
    const what = ev.error ? `${ev.tool}: failed after ${ev.duration_ms} ms: ${ev.error}` : `${ev.tool} (${ev.duration_ms} ms)`;
    this.add(a, el("p", { class: ev.error ? "tool error" : "tool" }, `used ${what}`, this.at(ev)));
  }

  renderTally(fixed) {
    const counts = new Map();
    if (fixed) {
      for (const t of fixed) if (t.votes > 0) counts.set(t.label, t.votes);
    } else {
      for (const v of this.votes) if (!v.cleared) counts.set(v.target, (counts.get(v.target) || 0) + 1);
    }
    const max = Math.max(1, ...counts.values());
    const rows = [];
    for (const [label, n] of [...counts].sort((x, y) => y[1] - x[1])) {
      // CSSOM, not a style attribute: the page's CSP allows no inline styles.
      const bar = el("div", { class: "bar" });
      bar.style.width = `${(100 * n) / max}%`;
      rows.push(el("span", { text: label }), bar, el("span", { class: "num", text: String(n) }));
    }
    $("tally").replaceChildren(...rows);
  }

  on_consensus(ev) {
    const w = ev.winner;
    const tally = ev.tally.filter((t) => t.votes > 0).map((t) => `${t.label}=${t.votes}`).join(", ");
    const why = {
      converged: "every agent voted", single_agent: "single agent", timeout: "session timed out",
      quorum: "voting quorum reached", budget: "cost budget reached", all_answered: "every agent answered (no voting)",
    }[ev.reason] || ev.reason;
    const cut = (ev.cut || []).map((c) => c.label).join(", ");
    $("winner").replaceChildren(`Winner: ${w.label} (${w.agent_id}) · ${why}${tally ? ` · ${tally}` : ""}${cut ? ` · cut: ${cut}` : ""}`);
    for (const c of ev.cut || []) {
      const a = this.column(c);
      this.endTurn(a, ev);
      this.add(a, el("p", { class: "ignored" }, `turn ${a.turns} cut: ${why}`, this.at(ev)));
      this.setState(a, "cut");
    }
    $("winner").dataset.label = w.label;
    this.renderTally(ev.tally);
    for (const a of this.agents.values()) if (a.stream) this.endTurn(a, ev);
    const col = this.column(w);
    col.node.classList.add("winner-col");
    this.setState(col, "winner");
    this.status("running", `Consensus: ${w.label} wins`);
  }

  on_presentation_started(ev) {
    const a = this.column(ev.agent);
    this.add(a, el("p", { class: "presenting" }, "presenting the final answer", this.at(ev)));
    this.setState(a, "presenting", "thinking");
    $("final-by").textContent = `by ${ev.agent.label} (${ev.agent.agent_id})`;
    this.status("running", `${ev.agent.label} is presenting the final answer`);
  }

  on_final_delta(ev) {
    if (!this.finalNode) {
      this.finalNode = document.createTextNode("");
      $("final-text").append(this.finalNode);
    }
    this.finalNode.appendData(ev.text);
  }

  on_final_tool_calls(ev) {
    const text = ev.calls.map((c) => `${c.name}(${c.arguments})`).join("\n");
    $("final-text").append(el("div", { class: "answer-text" }, "Tool calls for the client:\n", text));
  }

  on_presentation_failed(ev) {
    const a = this.column(ev.agent);
    this.add(a, el("p", { class: "failed" }, "presentation failed: ", ev.message, this.at(ev)));
  }

  on_usage(ev) {
    const a = this.column(ev.agent);
    if (!a.usage) a.usage = { input_tokens: 0, output_tokens: 0, total_tokens: 0 };
    for (const k of ["input_tokens", "output_tokens", "total_tokens"]) a.usage[k] += ev.usage[k] || 0;
    // null: the model's price is unknown, and so is every sum it is part of.
    if (a.cost !== null) a.cost = ev.cost_usd == null ? null : (a.cost || 0) + ev.cost_usd;
    this.foot(a);
  }

  foot(a) {
    const used = a.usage ? a.usage.total_tokens : 0;
    a.foot.textContent = `${tokens(used)} tokens · ${a.turns} turn${a.turns === 1 ? "" : "s"}`;
  }

  on_session_completed(ev) {
    const s = ev.summary;
    for (const a of this.agents.values()) {
      if (a.stream) this.endTurn(a, ev);
      if (a.state.textContent === "presenting") this.setState(a, "winner");
    }
    // The summary's text is what the client got (a fallback may differ from the deltas).
    if (s.final_answer && $("final-text").textContent !== s.final_answer && !s.final_tool_calls) {
      this.finalNode = document.createTextNode(s.final_answer);
      $("final-text").replaceChildren(this.finalNode);
    }
    if (s.presentation !== "presented") $("final-by").append(` · ${s.presentation}`);
    this.status("completed", `Completed in ${seconds(s.duration_ms)} · ${s.winner.label} won`);
    this.renderUsage(s.agents, s.usage, s.cost_usd, s.duration_ms, ev);
  }

  on_session_failed(ev) {
    const e = ev.error;
    for (const a of this.agents.values()) if (a.stream) this.endTurn(a, ev);
    this.status("failed", `Failed (${e.kind}): ${e.message}`);
    const agents = [...this.agents.values()].map((a) => ({ ...a.ref, usage: a.usage || {}, cost_usd: a.cost, answers: a.answers, failed: a.failed }));
    this.renderUsage(agents, e.usage, e.cost_usd, ev.at_ms - this.t0, ev);
  }

  renderUsage(agents, total, totalCost, durationMs, ev) {
    const head = el("tr", {}, ...["agent", "provider · model", "turns", "answers", "first answer", "busy", "input", "output", "total tokens", "cost"]
      .map((h, i) => el("th", { class: i >= 2 ? "num" : null, text: h })));
    const rows = agents.map((s) => {
      const a = this.agents.get(s.agent_id);
      const u = s.usage || {};
      return el("tr", { "data-agent": s.agent_id },
        el("td", {}, el("b", { text: s.label }), ` ${s.agent_id}${s.failed ? " (failed)" : ""}`),
        el("td", { text: [s.provider, s.model].filter(Boolean).join(" · ") || "–" }),
        el("td", { class: "num", text: String(a ? a.turns : "–") }),
        el("td", { class: "num", text: String(s.answers ?? "–") }),
        el("td", { class: "num", text: seconds(a ? a.firstAnswerMs : null) }),
        el("td", { class: "num", text: seconds(a ? a.busyMs : null) }),
        el("td", { class: "num", text: tokens(u.input_tokens) }),
        el("td", { class: "num", text: tokens(u.output_tokens) }),
        el("td", { class: "num", text: tokens(u.total_tokens) }),
        el("td", { class: "num", text: usd(s.cost_usd) }));
    });
    const t = total || {};
    rows.push(el("tr", { class: "total" },
      el("td", { text: "total" }), el("td", { text: `session ${seconds(durationMs)}` }), el("td"), el("td"), el("td"), el("td"),
      el("td", { class: "num", text: tokens(t.input_tokens) }),
      el("td", { class: "num", text: tokens(t.output_tokens) }),
      el("td", { class: "num", text: tokens(t.total_tokens) }),
      el("td", { class: "num", text: usd(totalCost) })));
    $("usage").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
    $("usage-panel").hidden = false;
    void ev;
  }
}

// ---------------------------------------------------------------- opening, following and replaying

const view = new SessionView();
let current = null; // {id, abort, events, done, timer}

function closeSession() {
  if (!current) return;
  current.abort.abort();
  clearTimeout(current.timer);
  current = null;
}

const TERMINAL = new Set(["session_completed", "session_failed"]);
const RECONNECTS = 5;

async function openSession(id) {
  closeSession();
  const ctl = { id, abort: new AbortController(), events: [], done: false, timer: null, replaying: false, live: null, interrupted: false };
  current = ctl;
  view.reset();
  $("s-question").textContent = "";
  $("s-meta").textContent = id;
  setReplayButtons(false);
  $("replay-progress").textContent = "";
  loadHeader(ctl);
  for (let attempt = 1; ; attempt++) {
    const outcome = await follow(ctl);
    if (outcome === "stop" || current !== ctl) return;
    if (outcome === "ended") break;
    if (attempt > RECONNECTS) {
      view.status("failed", "The event stream kept breaking off: reload the page to try again.");
      return;
    }
    $("replay-progress").textContent = "event stream broke off: reconnecting…";
    await new Promise((resolve) => setTimeout(resolve, 1000));
    if (current !== ctl) return;
  }
  ctl.done = true;
  $("replay-progress").textContent = ctl.live ? "finished live" : "from the record";
  setReplayButtons(true);
}

/**
 * Reads the session's event stream once. The server replays every stored event first, so
 * after a reconnect the events already shown (by seq) are skipped. Returns "ended" after
 * the session's last event, "broken" when the stream stopped before it, "stop" otherwise.
 */
async function follow(ctl) {
  let res;
  try {
    res = await api(`/v1/sessions/${encodeURIComponent(ctl.id)}/events`, { signal: ctl.abort.signal });
  } catch (err) {
    return err instanceof AuthNeeded || ctl.abort.signal.aborted ? "stop" : "broken";
  }
  if (!res.ok) {
    const why = res.status === 404 ? "No such session here: records are kept per API key, for the server's retention period." : await errorMessage(res);
    if (current === ctl) view.status("failed", why);
    return "stop";
  }
  const status = res.headers.get("x-massgen-session-status");
  if (ctl.live === null) ctl.live = status === "running";
  $("replay-progress").textContent = ctl.live ? "live" : "from the record";
  try {
    for await (const m of sse(res)) {
      if (current !== ctl) return "stop";
      const ev = JSON.parse(m.data);
      const last = ctl.events[ctl.events.length - 1];
      if (last && ev.seq <= last.seq) continue;
      ctl.events.push(ev);
      if (!ctl.replaying) view.apply(ev);
      if (TERMINAL.has(ev.type)) return "ended";
    }
  } catch {
    return ctl.abort.signal.aborted ? "stop" : "broken";
  }
  if (status === "interrupted") {
    ctl.interrupted = true;
    showInterrupted(ctl);
    return "ended";
  }
  return "broken";
}

/** The record ends without the session's last event: its replica went away. */
function showInterrupted(ctl) {
  if (current === ctl && ctl.interrupted) {
    view.status("interrupted", "Interrupted: the server running this session stopped before it ended; these are the events it stored.");
  }
}

async function loadHeader(ctl) {
  try {
    const res = await api(`/v1/sessions/${encodeURIComponent(ctl.id)}`, { signal: ctl.abort.signal });
    if (!res.ok || current !== ctl) return;
    const r = await res.json();
    $("s-question").textContent = r.question || "";
    $("s-meta").textContent = [r.model || r.panel, clock(r.created_at_ms), r.id].filter(Boolean).join(" · ");
  } catch {
    // The event stream reports what matters; the header is decoration.
  }
}

function setReplayButtons(on) {
  $("replay-pace").disabled = !on;
  $("replay-now").disabled = !on;
}

/** Rebuilds the view from the stored events: at the pace they happened, or all at once. */
function replay(paced) {
  const ctl = current;
  if (!ctl || !ctl.done) return;
  clearTimeout(ctl.timer);
  view.reset();
  const events = ctl.events;
  if (!paced || events.length === 0) {
    ctl.replaying = false;
    for (const ev of events) view.apply(ev);
    showInterrupted(ctl);
    $("replay-progress").textContent = "from the record";
    return;
  }
  ctl.replaying = true;
  const t0 = events[0].at_ms;
  const total = events[events.length - 1].at_ms - t0;
  const began = performance.now();
  let i = 0;
  const step = () => {
    if (current !== ctl) return;
    const now = performance.now() - began;
    while (i < events.length && events[i].at_ms - t0 <= now) view.apply(events[i++]);
    $("replay-progress").textContent = `replaying ${seconds(Math.min(now, total))} / ${seconds(total)}`;
    if (i < events.length) {
      const wait = events[i].at_ms - t0 - (performance.now() - began);
      ctl.timer = setTimeout(step, Math.max(0, Math.min(250, wait)));
    } else {
      ctl.replaying = false;
      showInterrupted(ctl);
      $("replay-progress").textContent = "replayed";
    }
  };
  step();
}

$("replay-pace").addEventListener("click", () => replay(true));
$("replay-now").addEventListener("click", () => replay(false));

// ---------------------------------------------------------------- routing

function route() {
  const m = location.hash.match(/^#\/s\/(.+)$/);
  const sessionId = m ? decodeURIComponent(m[1]) : null;
  // The eval runs (evals.js): #/evals and #/evals/<id>.
  const evals = sessionId === null ? evalsTarget(location.hash) : null;
  $("list-view").hidden = sessionId !== null || evals !== null;
  $("session-view").hidden = sessionId === null;
  showEvals(evals);
  if (sessionId === null) {
    closeSession();
    view.reset();
    pollList(evals === null);
  } else {
    pollList(false);
    if (!current || current.id !== sessionId) openSession(sessionId);
  }
}

async function start() {
  notice("");
  try {
    await loadModels();
  } catch (err) {
    if (err instanceof AuthNeeded) return;
    notice(`Could not load the panels: ${err.message}`);
  }
  if (current) closeSession();
  route();
}

window.addEventListener("hashchange", route);
start();
