// massgen eval runs on the live page: the runs the records database holds (GET /v1/evals)
// and, for one run (GET /v1/evals/{id}), its arms, an accuracy-vs-cost chart and its items
// as a grid (one row per item, one cell per arm, each linking to its session), paged by
// item on the server (page_by=item) and filtered there (filter=...). Loaded before app.js and only called by its router,
// so app.js's helpers (el, $, api, errorMessage, AuthNeeded, usd, clock) are there by then.
// As in app.js, every string reaches the page as text (textContent, text nodes, attributes).
"use strict";

const EVALS_POLL_MS = 5000;
/** Items (rows of the grid) per page; the server's largest is MAX_ITEM_GROUPS_PAGE (100). */
const EVAL_GRID_PAGE = 25;
const SVG_NS = "http://www.w3.org/2000/svg";
/** chart.svg's colours per arm kind (src/eval/chart.rs), and its legend's words. */
const KIND_COLOURS = [["panel", "#1f77b4", "panel"], ["agent", "#ff7f0e", "agent alone"], ["self_consistency", "#2ca02c", "self-consistency"]];

/**
 * `token` changes whenever the view does: an answer for an earlier view is dropped, as is
 * one for another page or filter than the one now asked (`offset`, `filter`). `open`: the
 * items whose rows are expanded (kept across polls).
 */
const evalsState = { run: null, timer: null, token: 0, offset: 0, filter: "all", open: new Set(), wired: false };

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
    $("e-prev").addEventListener("click", () => moveEvalPage(-1));
    $("e-next").addEventListener("click", () => moveEvalPage(1));
    $("e-filter").addEventListener("change", () => {
      evalsState.filter = $("e-filter").value;
      evalsState.offset = 0;
      evalsState.open.clear();
      if (evalsState.run !== null) refreshEvalRun(evalsState.run, evalsState.token);
    });
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
    refresh = () => refreshEvalRun(target.run, token);
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
  evalsState.offset = 0;
  evalsState.filter = "all";
  evalsState.open.clear();
  $("e-filter").value = "all";
  $("e-title").textContent = id;
  $("e-meta").textContent = "";
  $("e-arms").replaceChildren();
  $("e-chart").replaceChildren();
  $("e-grid").replaceChildren();
  $("e-items-note").textContent = "";
  $("e-prev").disabled = true;
  $("e-next").disabled = true;
}

async function refreshEvalRun(id, token) {
  const { offset, filter } = evalsState;
  let run;
  try {
    const q = `page_by=item&offset=${offset}&limit=${EVAL_GRID_PAGE}&filter=${encodeURIComponent(filter)}`;
    const res = await api(`/v1/evals/${encodeURIComponent(id)}?${q}`);
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
  if (token !== evalsState.token || offset !== evalsState.offset || filter !== evalsState.filter) return;
  $("e-title").textContent = run.data || run.id;
  $("e-meta").replaceChildren(
    el("span", { class: "badge", "data-status": run.status, text: run.status }),
    ` grader ${run.grader} · started ${clock(run.created * 1000)} · updated ${clock(run.updated * 1000)} · ${run.id}`,
  );
  const arms = reportArms(run);
  renderEvalArms(arms, !run.report);
  renderEvalChart(arms);
  renderEvalGrid(run);
  if (run.status !== "running") stopEvalsPolling(token);
}

/**
 * The report's arms; while the run has no report, each arm's count and accuracy from the
 * page's items.
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
  $("e-arms-note").textContent = partial ? "Running: counts from this page's items; the report comes when the run ends." : "";
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
    g.append(svg("circle", { cx, cy, r: 5, fill: kindColour(a.kind) }));
    const [tx, ty, anchor] = place(cx, cy, a.name);
    g.append(svg("text", { class: "name", x: tx, y: ty, "text-anchor": anchor }, a.name));
    chart.append(g);
  }
  const note = unpriced.length ? el("p", { class: "hint", text: `Not drawn (no price): ${unpriced.join(", ")}` }) : null;
  $("e-chart").replaceChildren(chartLegend(), chart, ...(note ? [note] : []));
}

function kindColour(kind) {
  const found = KIND_COLOURS.find(([k]) => k === kind);
  return found ? found[1] : "#7f7f7f";
}

/** What each colour of the chart means, as chart.svg's legend says it. */
function chartLegend() {
  return el("div", { class: "legend chart-legend" }, ...KIND_COLOURS.map(([kind, colour, words]) =>
    el("span", { class: "legend-entry", "data-kind": kind },
      svg("svg", { width: 12, height: 12, viewBox: "0 0 12 12", "aria-hidden": "true" }, svg("rect", { x: 1, y: 1, width: 10, height: 10, fill: colour })),
      ` ${words}`)));
}

/** right, wrong or failed: a failure is wrong, told apart. */
function verdict(line) {
  if (!line) return "none";
  return line.failed ? "failed" : line.correct ? "right" : "wrong";
}

const VERDICT_MARK = { right: "✓", wrong: "✗", failed: "!", none: "·" };

/**
 * The page's items as a grid: one row per item (its lines arrive together, by item), one
 * cell per arm in the run's arm order (then any arm the run does not list); a click on a
 * row opens its details below it.
 */
function renderEvalGrid(run) {
  const arms = run.arms.map((a) => a.name);
  const groups = [];
  for (const line of run.items) {
    const last = groups[groups.length - 1];
    if (last && last.item === line.item) last.lines.push(line);
    else groups.push({ item: line.item, lines: [line] });
    if (!arms.includes(line.arm)) arms.push(line.arm);
  }
  const head = el("tr", {}, el("th", { text: "item" }), el("th", { text: "question" }), ...arms.map((a) => el("th", { class: "arm-head", text: a })));
  const rows = [];
  for (const g of groups) {
    const byArm = new Map(g.lines.map((l) => [l.arm, l]));
    const question = (g.lines.find((l) => l.question) || {}).question;
    const cells = arms.map((a) => {
      const line = byArm.get(a);
      const v = verdict(line);
      const session = line && line.session_ids && line.session_ids[0];
      const title = `${a}: ${v}${line && line.failed ? ` (${line.failed})` : ""}`;
      const mark = session
        ? el("a", { href: `#/s/${encodeURIComponent(session)}`, title: `${title} · session ${session}`, text: VERDICT_MARK[v] })
        : el("span", { title, text: VERDICT_MARK[v] });
      return el("td", { class: `cell cell-${v}`, "data-arm": a, "data-verdict": v }, mark);
    });
    const open = evalsState.open.has(g.item);
    const row = el("tr", { class: "item-row", "data-item": g.item, "aria-expanded": open ? "true" : "false" },
      el("td", { class: "item-id", text: g.item }),
      el("td", { class: "q", title: question || null, text: cut(question, 80) }),
      ...cells);
    const detail = el("tr", { class: "item-detail", "data-item": g.item, hidden: !open },
      el("td", { colspan: 2 + arms.length }, ...(open ? itemDetail(g, arms) : [])));
    row.addEventListener("click", (ev) => {
      if (ev.target.closest("a")) return;
      const now = !evalsState.open.has(g.item);
      if (now) evalsState.open.add(g.item);
      else evalsState.open.delete(g.item);
      row.setAttribute("aria-expanded", now ? "true" : "false");
      detail.hidden = !now;
      detail.firstChild.replaceChildren(...(now ? itemDetail(g, arms) : []));
    });
    rows.push(row, detail);
  }
  $("e-grid").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  const first = run.items_offset + (groups.length ? 1 : 0);
  const last = run.items_offset + groups.length;
  const which = { all: "", disagree: " where the arms disagree", panel_wrong_member_right: " where the panel is wrong and a member right" }[run.items_filter] || "";
  $("e-items-note").textContent = groups.length
    ? `items ${first}–${last} of ${run.items_total}${which}`
    : `no items${which}${run.items_offset ? " on this page" : ""}`;
  $("e-prev").disabled = run.items_offset === 0;
  $("e-next").disabled = !run.items_has_more;
}

/** An item's question, reference and, per arm, its key, whole answer and members. */
function itemDetail(g, arms) {
  const first = g.lines.find((l) => l.question !== undefined && l.question !== null) || g.lines[0];
  const reference = first.reference === undefined || first.reference === null
    ? "–"
    : typeof first.reference === "string" ? first.reference : JSON.stringify(first.reference);
  const parts = [
    el("div", { class: "detail-q" }, el("b", { text: "Question " }), el("span", { class: "pre", text: first.question || "–" })),
    el("div", { class: "detail-ref" }, el("b", { text: "Reference " }), el("span", { class: "pre", text: reference })),
  ];
  const byArm = new Map(g.lines.map((l) => [l.arm, l]));
  for (const a of arms) {
    const line = byArm.get(a);
    if (!line) continue;
    const v = verdict(line);
    const members = (line.members || []).length
      ? el("table", { class: "usage members" },
        el("thead", {}, el("tr", {}, ...["member", "model", "key", "vote"].map((h) => el("th", { text: h })))),
        el("tbody", {}, ...line.members.map((m) => el("tr", {},
          el("td", { text: m.agent }), el("td", { class: "models", text: m.model }),
          el("td", { text: m.key ?? "–" }), el("td", { text: m.vote ?? "–" })))))
      : null;
    parts.push(el("div", { class: "arm-detail", "data-arm": a },
      el("div", {}, el("b", { text: a }), " ", el("span", { class: `verdict cell-${v}`, text: `${VERDICT_MARK[v]} ${v}${line.failed ? `: ${line.failed}` : ""}` }),
        ` · key ${line.extracted ?? "–"} · ${usd(line.cost_usd)} · ${secs(line.latency_s)} · `, ...sessionLinks(line.session_ids)),
      el("pre", { class: "answer-box", text: line.answer || "(no answer)" }),
      members));
  }
  return parts;
}

function moveEvalPage(step) {
  if (evalsState.run === null) return;
  evalsState.offset = Math.max(0, evalsState.offset + step * EVAL_GRID_PAGE);
  evalsState.open.clear();
  refreshEvalRun(evalsState.run, evalsState.token);
}
