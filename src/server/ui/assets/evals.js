// massgen eval runs on the live page: the runs the records database holds (GET /v1/evals)
// and, for one run (GET /v1/evals/{id}), its arms, an accuracy-vs-cost chart and its items,
// each linking to the sessions it ran. Loaded before app.js and only called by its router,
// so app.js's helpers (el, $, api, errorMessage, AuthNeeded, usd, clock) are there by then.
// As in app.js, every string reaches the page as text (textContent, text nodes, attributes).
"use strict";

const EVALS_POLL_MS = 5000;
const EVAL_ITEMS_PAGE = 1000;
/** The server's largest page of items (MAX_ITEMS_PAGE). */
const EVAL_ITEMS_MAX = 1000;
const SVG_NS = "http://www.w3.org/2000/svg";

/** `token` changes whenever the view does: an answer for an earlier view is dropped. */
const evalsState = { run: null, timer: null, token: 0, shown: 0, wired: false };

/** Where `hash` points in the evals view: null (elsewhere), {run: null} (the list) or {run: id}. */
function evalsTarget(hash) {
  if (hash === "#/evals" || hash === "#/evals/") return { run: null };
  const m = hash.match(/^#\/evals\/(.+)$/);
  if (!m) return null;
  try {
    return { run: decodeURIComponent(m[1]) };
  } catch {
    return { run: m[1] };
  }
}

/** Shows the evals view for `target` (see evalsTarget), or hides it (null). */
function showEvals(target) {
  clearInterval(evalsState.timer);
  evalsState.timer = null;
  const token = ++evalsState.token;
  if (!evalsState.wired) {
    $("e-more").addEventListener("click", loadMoreEvalItems);
    evalsState.wired = true;
  }
  $("evals-view").hidden = target === null;
  for (const [id, on] of [["nav-sessions", target === null], ["nav-evals", target !== null]]) {
    if (on) $(id).setAttribute("aria-current", "page");
    else $(id).removeAttribute("aria-current");
  }
  if (target === null) {
    evalsState.run = null;
    return;
  }
  $("evals-list").hidden = target.run !== null;
  $("eval-run").hidden = target.run === null;
  let refresh;
  if (target.run === null) {
    evalsState.run = null;
    refresh = () => refreshEvals(token);
  } else {
    if (evalsState.run !== target.run) clearEvalRun(target.run);
    evalsState.run = target.run;
    refresh = () => refreshEvalRun(target.run, token, false);
  }
  refresh();
  evalsState.timer = setInterval(() => {
    if (document.visibilityState === "visible") refresh();
  }, EVALS_POLL_MS);
}

function stopEvalsPolling(token) {
  if (token !== evalsState.token) return;
  clearInterval(evalsState.timer);
  evalsState.timer = null;
}

// ---------------------------------------------------------------- formatting

function pct(x) {
  return x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)}%`;
}

/** "80.0% [49.0–94.3]": the accuracy and its 95% interval. */
function accuracyText(a) {
  if (!a || a.accuracy === null || a.accuracy === undefined) return "–";
  const ci = Array.isArray(a.ci95) && a.ci95.length === 2 ? ` [${(100 * a.ci95[0]).toFixed(1)}–${(100 * a.ci95[1]).toFixed(1)}]` : "";
  return `${pct(a.accuracy)}${ci}`;
}

function secs(s) {
  return s === null || s === undefined ? "–" : `${Number(s).toFixed(s < 10 ? 2 : 1)} s`;
}

function cut(text, n) {
  if (text === null || text === undefined) return "";
  const s = String(text);
  return s.length > n ? `${s.slice(0, n)}…` : s;
}

/** "W/T/L 12/80/8 · p=0.503 (sign test)" for an arm compared with the panel. */
function vsPanelText(v) {
  if (!v) return "–";
  const p = v.p_value === null || v.p_value === undefined ? "" : ` · p=${Number(v.p_value).toPrecision(3)}`;
  const test = v.test ? ` (${v.test})` : "";
  return `${v.wins}/${v.ties}/${v.losses}${p}${test}`;
}

function sessionLinks(ids) {
  const links = [];
  for (const id of ids || []) {
    if (links.length) links.push(" ");
    links.push(el("a", { href: `#/s/${encodeURIComponent(id)}`, title: id, text: `…${id.slice(-8)}` }));
  }
  return links;
}

// ---------------------------------------------------------------- the list of runs

async function refreshEvals(token) {
  let body;
  try {
    const res = await api("/v1/evals?limit=100");
    if (!res.ok) {
      // 404: this server has no records database (the message says how to give it one).
      if (res.status === 404) stopEvalsPolling(token);
      throw new Error(await errorMessage(res));
    }
    body = await res.json();
  } catch (err) {
    if (token !== evalsState.token || err instanceof AuthNeeded) return;
    $("evals-body").replaceChildren();
    $("evals-empty").textContent = `Could not list eval runs: ${err.message}`;
    $("evals-empty").hidden = false;
    return;
  }
  if (token !== evalsState.token) return;
  const rows = body.data.map((r) => {
    const href = `#/evals/${encodeURIComponent(r.id)}`;
    const arms = r.summary.length
      ? r.summary.map((a) => el("span", { class: "arm-acc" }, el("b", { text: a.name }), ` ${accuracyText(a)}`))
      : r.arms.map((a) => el("span", { class: "arm-acc" }, el("b", { text: a.name })));
    return el(
      "tr",
      { "data-id": r.id, "data-status": r.status, onclick: () => (location.hash = href) },
      el("td", { text: clock(r.created * 1000) }),
      el("td", { class: "q" }, el("a", { href, text: r.data || r.id })),
      el("td", { text: r.grader }),
      el("td", {}, el("span", { class: "badge", "data-status": r.status, text: r.status })),
      el("td", { class: "arms" }, ...arms),
    );
  });
  $("evals-body").replaceChildren(...rows);
  $("evals-empty").textContent = "No eval runs yet: massgen eval --records-db URL, with this server's records database, keeps them here.";
  $("evals-empty").hidden = rows.length > 0;
}

// ---------------------------------------------------------------- one run

function clearEvalRun(id) {
  evalsState.shown = 0;
  $("e-title").textContent = id;
  $("e-meta").textContent = "";
  $("e-arms").replaceChildren();
  $("e-chart").replaceChildren();
  $("e-items").replaceChildren();
  $("e-items-note").textContent = "";
  $("e-more").hidden = true;
}

async function refreshEvalRun(id, token, more) {
  const offset = more ? evalsState.shown : 0;
  // A poll keeps as many items as were shown (up to one page of the server's).
  const limit = more ? EVAL_ITEMS_PAGE : Math.min(EVAL_ITEMS_MAX, Math.max(EVAL_ITEMS_PAGE, evalsState.shown));
  let run;
  try {
    const res = await api(`/v1/evals/${encodeURIComponent(id)}?offset=${offset}&limit=${limit}`);
    if (!res.ok) {
      if (res.status === 404) stopEvalsPolling(token);
      throw new Error(await errorMessage(res));
    }
    run = await res.json();
  } catch (err) {
    if (token !== evalsState.token || err instanceof AuthNeeded) return;
    $("e-meta").textContent = `Could not load the eval run: ${err.message}`;
    return;
  }
  if (token !== evalsState.token) return;
  $("e-title").textContent = run.data || run.id;
  $("e-meta").replaceChildren(
    el("span", { class: "badge", "data-status": run.status, text: run.status }),
    ` grader ${run.grader} · started ${clock(run.created * 1000)} · updated ${clock(run.updated * 1000)} · ${run.id}`,
  );
  const arms = reportArms(run);
  renderEvalArms(arms, !run.report);
  renderEvalChart(arms);
  renderEvalItems(run, more);
  if (run.status !== "running") stopEvalsPolling(token);
}

/**
 * The report's arms; while the run has no report, each arm's count and accuracy from the
 * items shown so far.
 */
function reportArms(run) {
  if (run.report && Array.isArray(run.report.arms)) return run.report.arms;
  return run.arms.map((a) => {
    const items = run.items.filter((i) => i.arm === a.name);
    const correct = items.filter((i) => i.correct).length;
    return { ...a, n: items.length, correct, accuracy: items.length ? correct / items.length : null, failures: items.filter((i) => i.failed).length };
  });
}

function renderEvalArms(arms, partial) {
  const heads = ["arm", "kind", "models", "n", "accuracy [95% CI]", "cost", "cost / item", "latency p50", "p95", "failures", "vs panel W/T/L"];
  const head = el("tr", {}, ...heads.map((h, i) => el("th", { class: i >= 3 && i !== 4 ? "num" : null, text: h })));
  const rows = arms.map((a) =>
    el("tr", { "data-arm": a.name, "data-kind": a.kind },
      el("td", {}, el("b", { text: a.name })),
      el("td", { text: a.samples > 1 ? `${a.kind} ×${a.samples}` : a.kind }),
      el("td", { class: "models", text: (a.models || []).join(", ") }),
      el("td", { class: "num", text: a.n ?? "–" }),
      el("td", { text: accuracyText(a) }),
      el("td", { class: "num", text: usd(a.cost_usd) }),
      el("td", { class: "num", text: usd(a.cost_per_item_usd) }),
      el("td", { class: "num", text: secs(a.latency_p50_s) }),
      el("td", { class: "num", text: secs(a.latency_p95_s) }),
      el("td", { class: "num", text: a.failures ?? "–" }),
      el("td", { class: "num", title: a.vs_panel && a.vs_panel.against ? `against ${a.vs_panel.against}, ${a.vs_panel.pairs} pairs` : null, text: vsPanelText(a.vs_panel) })));
  $("e-arms").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  $("e-arms-note").textContent = partial ? "Running: counts from the items shown so far; the report comes when the run ends." : "";
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

/** Accuracy (with its interval) against cost per item, one point per priced arm. */
function renderEvalChart(arms) {
  const perItem = (a) => a.cost_per_item_usd ?? (a.cost_usd != null && a.n ? a.cost_usd / a.n : null);
  const points = arms.filter((a) => a.accuracy != null && perItem(a) != null);
  const unpriced = arms.filter((a) => a.accuracy != null && perItem(a) == null).map((a) => a.name);
  if (points.length === 0) {
    $("e-chart").replaceChildren(el("p", { class: "hint", text: "No arm has both an accuracy and a price yet." }));
    return;
  }
  const W = 560, H = 280, L = 56, R = 48, T = 14, B = 40;
  const maxCost = Math.max(...points.map(perItem)) * 1.15 || 1;
  const x = (c) => L + ((W - L - R) * c) / maxCost;
  const y = (p) => T + (H - T - B) * (1 - p);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart", role: "img", "aria-label": "Accuracy against cost per item" });
  for (const p of [0, 0.25, 0.5, 0.75, 1]) {
    chart.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(p), y2: y(p) }));
    chart.append(svg("text", { class: "tick", x: L - 6, y: y(p) + 4, "text-anchor": "end" }, `${p * 100}%`));
  }
  for (let i = 0; i <= 4; i++) {
    const c = (maxCost * i) / 4;
    chart.append(svg("text", { class: "tick", x: x(c), y: H - B + 16, "text-anchor": "middle" }, c === 0 ? "$0" : `$${c.toPrecision(2)}`));
  }
  chart.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: y(0), y2: y(0) }));
  chart.append(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: y(0) }));
  chart.append(svg("text", { class: "label", x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, "cost per item (USD)"));
  chart.append(svg("text", { class: "label", x: 12, y: (T + H - B) / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, "accuracy"));
  // Labels go beside their point where they overlap no point, no earlier label and no
  // axis (right, then left; above, then below); a label is about 7 px per character by
  // 14 px.
  const placed = points.map((a) => {
    const cx = x(perItem(a)), cy = y(a.accuracy);
    return { left: cx - 6, right: cx + 6, top: cy - 6, bottom: cy + 6 };
  });
  const place = (cx, cy, name) => {
    const w = 7 * name.length + 4, h = 14;
    const tries = [[cx + 8, cy - 6, "start"], [cx + 8, cy + 16, "start"], [cx - 8, cy - 6, "end"], [cx - 8, cy + 16, "end"],
      [cx + 8, cy - 20, "start"], [cx + 8, cy + 30, "start"], [cx + 8, cy - 34, "start"], [cx + 8, cy + 44, "start"]];
    for (const [tx, ty, anchor] of tries) {
      const left = anchor === "start" ? tx : tx - w;
      const box = { left, right: left + w, top: ty - h, bottom: ty };
      const inside = box.left >= L + 2 && box.right <= W;
      if (inside && !placed.some((b) => box.left < b.right && b.left < box.right && box.top < b.bottom && b.top < box.bottom)) {
        placed.push(box);
        return [tx, ty, anchor];
      }
    }
    return tries[0];
  };
  for (const a of points) {
    const cx = x(perItem(a)), cy = y(a.accuracy);
    const g = svg("g", { class: `point kind-${a.kind}`, "data-arm": a.name });
    g.append(svg("title", {}, `${a.name}: ${accuracyText(a)} at ${usd(perItem(a))} per item`));
    if (Array.isArray(a.ci95) && a.ci95.length === 2) {
      g.append(svg("line", { class: "ci", x1: cx, x2: cx, y1: y(a.ci95[0]), y2: y(a.ci95[1]) }));
    }
    g.append(svg("circle", { cx, cy, r: 5 }));
    const [tx, ty, anchor] = place(cx, cy, a.name);
    g.append(svg("text", { class: "name", x: tx, y: ty, "text-anchor": anchor }, a.name));
    chart.append(g);
  }
  const note = unpriced.length ? el("p", { class: "hint", text: `Not drawn (no price): ${unpriced.join(", ")}` }) : null;
  $("e-chart").replaceChildren(chart, ...(note ? [note] : []));
}

function renderEvalItems(run, more) {
  const heads = ["item", "arm", "result", "extracted", "answer", "cost", "latency", "tokens in / out", "sessions"];
  const rows = run.items.map((i) => {
    const result = i.failed ? `failed: ${i.failed}` : i.correct ? "✓ correct" : "✗ wrong";
    const samples = i.samples && i.samples.length ? ` (samples: ${i.samples.map((s) => (s === null ? "–" : s)).join(", ")})` : "";
    const judge = i.judge_session_ids && i.judge_session_ids.length ? [" judge: ", ...sessionLinks(i.judge_session_ids)] : [];
    return el("tr", { "data-item": i.item, "data-arm": i.arm, class: i.failed ? "failed-row" : i.correct ? "correct-row" : "wrong-row" },
      el("td", { text: i.item }),
      el("td", { text: i.arm }),
      el("td", { class: "result", text: result }),
      el("td", { text: `${cut(i.extracted, 80)}${samples}` }),
      el("td", { class: "q", title: i.answer || null, text: cut(i.answer, 160) }),
      el("td", { class: "num", text: usd(i.cost_usd) }),
      el("td", { class: "num", text: secs(i.latency_s) }),
      el("td", { class: "num", text: `${i.input_tokens} / ${i.output_tokens}` }),
      el("td", { class: "sessions-cell" }, ...sessionLinks(i.session_ids), ...judge));
  });
  if (!more || !$("e-items").tBodies.length) {
    const head = el("tr", {}, ...heads.map((h, n) => el("th", { class: n >= 5 && n <= 7 ? "num" : null, text: h })));
    $("e-items").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
    evalsState.shown = run.items_offset + rows.length;
  } else {
    $("e-items").tBodies[0].append(...rows);
    evalsState.shown += rows.length;
  }
  $("e-items-note").textContent = `${evalsState.shown} of ${run.items_total} items (item × arm)`;
  $("e-more").hidden = !run.items_has_more;
}

function loadMoreEvalItems() {
  if (evalsState.run === null) return;
  refreshEvalRun(evalsState.run, evalsState.token, true);
}
