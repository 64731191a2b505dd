// Browser end-to-end test of the massgen web page, run by tests/it/ui_e2e.rs against
// `massgen serve --demo` (three simulated agents) with one API key.
//
//   node tests/ui/e2e.mjs <server url>
//   env: MASSGEN_UI_KEY (the server's key), MASSGEN_CHROMIUM (default /usr/bin/chromium),
//        MASSGEN_UI_SCREENSHOTS (a folder: write the README screenshots there)
//
// Expects the panels `massgen` (the demo) and `massgen/six` (six simulated agents, the
// sixth answering in plain text so that it streams, breaks the protocol and fails).
// Asserts, in a real headless Chromium: the key prompt; a session started from the question
// box shows agent columns, then answers, votes, the winner and a final answer that grows
// while it streams, in that order; the session list shows it (eval sessions left out unless
// the box is ticked); a finished session replays at its pace and at once; model text
// containing <script> renders as text; an eval run (seeded by ui_e2e.rs) shows its items as
// a grid of items × arms, paged by item, with a legend, filters and cells linking sessions,
// and its chart has a legend in chart.svg's colours.
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const url = process.argv[2];
if (!url) {
  console.error("usage: node tests/ui/e2e.mjs <server url>");
  process.exit(2);
}
const key = process.env.MASSGEN_UI_KEY || "";
// SSE frames of a session the simulator cannot produce (tests/it/ui_e2e.rs writes them).
const fixture = process.env.MASSGEN_UI_FIXTURE || "";
const shots = process.env.MASSGEN_UI_SCREENSHOTS || "";
const executablePath = process.env.MASSGEN_CHROMIUM || "/usr/bin/chromium";
const STEP_MS = 20_000;

let browser;
const watchdog = setTimeout(async () => {
  console.error("e2e: FAILED: over the 55 s limit");
  await browser?.close().catch(() => {});
  process.exit(1);
}, 55_000);

function check(ok, what) {
  if (!ok) throw new Error(`assertion failed: ${what}`);
  console.log(`e2e: ok: ${what}`);
}

// Records when each stage first shows on the page and every length the final answer had.
function installRecorder() {
  window.__marks = {};
  window.__finalLengths = [];
  const mark = (k) => {
    if (!(k in window.__marks)) window.__marks[k] = performance.now();
  };
  const look = () => {
    const view = document.getElementById("session-view");
    if (view.hidden) return;
    if (view.querySelector(".agent-col")) mark("columns");
    if (view.querySelector(".answer")) mark("answer");
    if (view.querySelector("#vote-list .vote")) mark("vote");
    if (document.getElementById("winner").textContent) mark("winner");
    const n = document.getElementById("final-text").textContent.length;
    const seen = window.__finalLengths;
    if (n > 0 && seen[seen.length - 1] !== n) {
      mark("final");
      seen.push(n);
    }
    if (view.dataset.status === "completed") mark("completed");
  };
  window.__observer?.disconnect();
  window.__observer = new MutationObserver(look);
  window.__observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
}

async function enterKey(page) {
  if (!key) return;
  await page.locator("#key-box").waitFor({ state: "visible", timeout: STEP_MS });
  await page.fill("#key-input", key);
  await page.press("#key-input", "Enter");
  await page.locator("#key-box").waitFor({ state: "hidden", timeout: STEP_MS });
}

async function ask(page, question) {
  await page.evaluate(installRecorder);
  const before = page.url();
  await page.fill("#ask-question", question);
  await page.click("#ask-submit");
  await page.waitForFunction((b) => location.href !== b && location.hash.startsWith("#/s/"), before, { timeout: STEP_MS });
  return decodeURIComponent(new URL(page.url()).hash.slice("#/s/".length));
}

const completed = (page) =>
  page.waitForFunction(() => document.getElementById("session-view").dataset.status === "completed", null, { timeout: STEP_MS });

function inOrder(marks, stages, what) {
  for (const s of stages) check(typeof marks[s] === "number", `${what}: ${s} shown`);
  for (let i = 1; i < stages.length; i++) {
    check(marks[stages[i - 1]] <= marks[stages[i]], `${what}: ${stages[i - 1]} before ${stages[i]}`);
  }
}

async function main() {
  browser = await chromium.launch({
    executablePath,
    headless: true,
    // Playwright gives every launch a fresh, empty profile (--user-data-dir).
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 }, colorScheme: "light" });
  const page = await context.newPage();
  const dialogs = [];
  const problems = [];
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    d.dismiss().catch(() => {});
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !/401/.test(m.text())) problems.push(`console: ${m.text()}`);
  });

  // The page loads without a key and asks for one when the API answers 401.
  await page.goto(url, { timeout: STEP_MS });
  await enterKey(page);
  if (key) {
    check(await page.evaluate((k) => sessionStorage.getItem("massgen.apiKey") === k && localStorage.length === 0, key),
      "the key is kept in sessionStorage only");
  }
  await page.waitForFunction(() => document.querySelectorAll("#ask-model option").length > 0, null, { timeout: STEP_MS });
  check(await page.$eval("#ask-model", (s) => [...s.options].map((o) => o.value).includes("massgen")), "the panel list offers massgen");

  // A live session, started from the question box.
  const question = "How do panels of language models reach a consensus?";
  const id = await ask(page, question);
  check(id.startsWith("sess_"), `the page follows the new session ${id}`);
  if (shots) {
    // Mid-presentation: answers, votes, the winner and a final answer still streaming.
    await page.waitForFunction(() => window.__finalLengths.length >= 8 || window.__marks.completed, null,
      { timeout: STEP_MS, polling: "raf" });
    await page.screenshot({ path: `${shots}/live-session.png` });
  }
  await completed(page);
  const live = await page.evaluate(() => ({
    marks: window.__marks,
    lengths: window.__finalLengths,
    columns: [...document.querySelectorAll(".agent-col")].map((c) => c.dataset.label),
    answers: [...document.querySelectorAll(".answer")].map((a) => a.dataset.label),
    votes: document.querySelectorAll("#vote-list .vote").length,
    winner: document.getElementById("winner").dataset.label,
    tally: [...document.getElementById("tally").children].map((c) => c.textContent).join(" "),
    final: document.getElementById("final-text").textContent,
    usageRows: document.querySelectorAll("#usage tbody tr").length,
    question: document.getElementById("s-question").textContent,
  }));
  inOrder(live.marks, ["columns", "answer", "vote", "winner", "final", "completed"], "live");
  check(live.columns.join() === "agent1,agent2,agent3", `one column per agent (${live.columns})`);
  check(live.answers.length >= 3 && live.answers.every((l) => /^agent\d+\.\d+$/.test(l)), `labelled answers (${live.answers})`);
  check(live.votes >= 3, `votes listed (${live.votes})`);
  check(live.winner === "agent2", "the demo's winner agent2 is shown");
  check(live.tally === "agent2  3", `the tally at consensus: every agent for agent2 (${live.tally})`);
  check(live.final.startsWith("[simulated final answer]"), "the final answer is shown");
  check(live.lengths.length >= 3 && live.lengths.every((n, i) => i === 0 || n > live.lengths[i - 1]),
    `the final answer grew while streaming (${live.lengths.length} lengths)`);
  check(live.usageRows === 4, "usage per agent and in total at the end");
  check(live.question === question, "the question heads the session");
  if (shots) await page.screenshot({ path: `${shots}/finished-session.png`, fullPage: true });

  // The session list shows it; opening it shows the record at once.
  await page.click(".back");
  const row = page.locator(`#sessions-body tr[data-id="${id}"][data-status="completed"]`);
  await row.waitFor({ timeout: STEP_MS });
  check((await row.textContent()).includes("agent2 (sim-critic)"), "the session list shows the session and its winner");
  if (shots) await page.screenshot({ path: `${shots}/sessions.png` });
  await row.click();
  await completed(page);
  check(await page.$eval("#final-text", (n, f) => n.textContent === f, live.final), "a finished session opens from its record");
  await page.waitForFunction(() => !document.getElementById("replay-pace").disabled, null, { timeout: STEP_MS });

  // Replay at the pace it happened: the view starts over and fills in stage by stage.
  await page.evaluate(installRecorder);
  await page.click("#replay-pace");
  const early = await page.evaluate(() => ({
    answers: document.querySelectorAll(".answer").length,
    final: document.getElementById("final-text").textContent,
  }));
  check(early.answers < live.answers.length && early.final === "", "paced replay starts from the beginning");
  await completed(page);
  const paced = await page.evaluate(() => ({
    marks: window.__marks,
    lengths: window.__finalLengths,
    answers: document.querySelectorAll(".answer").length,
    final: document.getElementById("final-text").textContent,
  }));
  inOrder(paced.marks, ["answer", "vote", "winner", "final", "completed"], "paced replay");
  check(paced.lengths.length >= 3, "paced replay streams the final answer");
  check(paced.answers === live.answers.length && paced.final === live.final, "paced replay ends where the session ended");
  await page.click("#replay-now");
  check(await page.evaluate((f) => document.getElementById("final-text").textContent === f
    && document.getElementById("session-view").dataset.status === "completed", live.final),
    "replay at once shows the whole session immediately");

  // An event stream that breaks off is picked up again: the page reconnects and skips
  // the events it already showed.
  let cut = 0;
  await page.route("**/v1/sessions/*/events", async (route) => {
    if (cut++ > 0) return route.continue();
    const response = await route.fetch();
    const body = await response.text();
    const blocks = body.split("\n\n");
    await route.fulfill({ response, body: blocks.slice(0, Math.floor(blocks.length / 2)).join("\n\n") + "\n\n" });
  });
  await page.click(".back");
  await page.locator(`#sessions-body tr[data-id="${id}"]`).click();
  await completed(page);
  const resumed = await page.evaluate(() => ({
    answers: document.querySelectorAll(".answer").length,
    votes: document.querySelectorAll("#vote-list li").length,
    final: document.getElementById("final-text").textContent,
  }));
  await page.unroute("**/v1/sessions/*/events");
  check(cut === 2, `the page reconnected once after the stream broke off (${cut} requests)`);
  check(resumed.answers === live.answers.length && resumed.final === live.final && resumed.votes >= live.votes,
    "after reconnecting nothing is missing or shown twice");

  // The list shows sessions that other clients start, while it is open.
  await page.click(".back");
  const rowsBefore = await page.locator("#sessions-body tr").count();
  const other = fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: "massgen", messages: [{ role: "user", content: "Started by another client" }] }),
  });
  await page.waitForFunction((n) => document.querySelectorAll("#sessions-body tr").length > n, rowsBefore, { timeout: STEP_MS });
  check((await page.locator("#sessions-body tr").first().textContent()).includes("Started by another client"),
    "a session started elsewhere shows up in the open list");

  // `massgen eval`'s sessions stay out of the list unless the box is ticked.
  const listRequest = (wanted) => page.waitForRequest((r) => {
    const u = new URL(r.url());
    return u.pathname === "/v1/sessions" && wanted(u.searchParams);
  }, { timeout: STEP_MS });
  const plain = await listRequest(() => true);
  check(new URL(plain.url()).searchParams.get("exclude_door") === "eval"
    && (await plain.response()).status() === 200, "the list leaves eval sessions out by default");
  const all = listRequest((q) => !q.has("exclude_door"));
  await page.check("#show-eval");
  check((await (await all).response()).status() === 200, "ticking the box lists eval sessions too");
  await page.uncheck("#show-eval");

  // Model text is text: the simulator quotes the question in its answers. Asked of the
  // six-agent panel, which the question box offers as massgen/six.
  await page.selectOption("#ask-model", "massgen/six", { timeout: STEP_MS });
  const hostile = "<script>alert(1)</script> <img src=x onerror=alert(2)> is this text?";
  await ask(page, hostile);
  await completed(page);
  check(await page.$$eval(".agent-col", (c) => c.length) === 6, "six agents, six columns");
  const sixth = await page.evaluate(() => {
    const col = document.querySelector('.agent-col[data-label="agent6"]');
    return {
      stream: [...col.querySelectorAll(".stream")].map((s) => s.textContent),
      invalid: col.querySelectorAll(".invalid").length,
      failed: col.querySelector(".failed")?.textContent || "",
      restarts: col.querySelectorAll(".turn.restart").length,
    };
  });
  check(sixth.stream.length > 0 && sixth.stream.every((t) => t.includes("<script>alert(1)</script>")),
    "an agent's streamed text shows in its column, as text");
  check(sixth.invalid >= 2 && sixth.failed.includes("invalid_turns"), "invalid turns and the agent's failure show in its column");
  if (shots) await page.screenshot({ path: `${shots}/six-agents.png` });
  const escaped = await page.evaluate(() => ({
    answer: document.querySelector(".answer-text").textContent,
    visible: document.querySelector(".answer-text").innerText,
    final: document.getElementById("final-text").textContent,
    scripts: document.querySelectorAll("main script, main img").length,
    heading: document.getElementById("s-question").textContent,
  }));
  check(escaped.visible.includes("<script>alert(1)</script>") && escaped.visible.includes("<img src=x onerror=alert(2)>"),
    "an answer containing <script> renders as literal text");
  check(escaped.final.includes("<script>alert(1)</script>"), "the final answer's <script> renders as text");
  check(escaped.heading === hostile, "the question renders as text");
  check(escaped.scripts === 0, "no script or img element came from model text");
  check(dialogs.length === 0, `no dialog fired (${dialogs.length})`);
  check(problems.length === 0, `no page errors or CSP violations (${problems.join(" | ")})`);
  await other;

  // Tool uses, an upstream failure, a proposal of tool calls and a failed session, from
  // events serialized by the engine's own types.
  if (fixture) {
    const frames = readFileSync(fixture, "utf8");
    await page.route("**/v1/sessions/sess_fixture/events", (route) =>
      route.fulfill({ status: 200, headers: { "content-type": "text/event-stream", "x-massgen-session-status": "finished" }, body: frames }));
    await page.goto(`${url}/#/s/sess_fixture`, { timeout: STEP_MS });
    await page.waitForFunction(() => document.getElementById("session-view").dataset.status === "failed", null, { timeout: STEP_MS });
    const f = await page.evaluate(() => {
      const col = (l) => document.querySelector(`.agent-col[data-label="${l}"]`);
      return {
        tools: [...col("agent1").querySelectorAll(".tool")].map((t) => `${t.className}|${t.textContent}`),
        stream: col("agent1").querySelector(".stream")?.textContent,
        proposal: col("agent1").querySelector(".answer")?.textContent || "",
        failed: col("agent2").querySelector(".failed")?.textContent || "",
        failedCol: col("agent2").classList.contains("failed-col"),
        phase: document.getElementById("s-phase").textContent,
        usage: [...document.querySelectorAll("#usage tbody tr")].map((r) => r.textContent),
      };
    });
    check(f.tools.length === 2 && f.tools[0].startsWith("tool|used mcp__search__query (12 ms)")
      && f.tools[1].startsWith("tool error|used mcp__files__read: failed after 60000 ms: timed out"), "MCP tool uses show in the agent's column");
    check(f.stream === "Let me look that up.", "streamed agent text shows");
    check(f.proposal.includes("agent1.1 · proposes tool calls") && f.proposal.includes('get_weather({"city":"Paris"})'),
      "a proposal of client tool calls shows as the answer");
    check(f.failedCol && f.failed.includes("failed (upstream): rate limited by groq (429)"), "an upstream failure shows in its column");
    check(f.phase.includes("Failed (cancelled): the client went away"), "a failed session shows why");
    check(f.usage.length === 3 && !f.usage[0].includes("(failed)") && f.usage[1].includes("flaky (failed)") && f.usage[2].includes("120"),
      `a failed session shows usage, marking only the agent that failed (${f.usage.join(" | ")})`);
    check(f.usage[0].includes("$0.000400") && f.usage[2].includes("$0.000400"),
      `the usage table shows the cost in USD per agent and in total (${f.usage.join(" | ")})`);
    if (shots) await page.screenshot({ path: `${shots}/tools-and-failures.png` });
  } else {
    console.log("e2e: MASSGEN_UI_FIXTURE not set: the fixture session is not checked");
  }

  // An eval run's items as a grid: 30 items seeded, 25 a page, three arms.
  await page.goto(`${url}/#/evals/eval_ui`, { timeout: STEP_MS });
  const grid = () => page.evaluate(() => ({
    rows: [...document.querySelectorAll("#e-grid tr.item-row")].map((r) => r.dataset.item),
    cells: [...document.querySelectorAll("#e-grid tr.item-row")].map((r) => r.querySelectorAll("td.cell").length),
    note: document.getElementById("e-items-note").textContent,
  }));
  await page.waitForFunction(() => document.querySelectorAll("#e-grid tr.item-row").length === 25, null, { timeout: STEP_MS });
  let g = await grid();
  check(g.rows[0] === "1" && g.rows[24] === "25" && g.cells.every((n) => n === 3) && g.note.includes("1–25 of 30"),
    `the grid shows one row per item of the first page, one cell per arm (${g.note})`);
  const legend = await page.evaluate(() => ({
    grid: [...document.querySelectorAll("#e-legend .legend-entry")].map((e) => e.textContent.trim()),
    cell: (() => {
      const c = document.querySelector('#e-grid tr.item-row[data-item="2"] td.cell[data-arm="agent:a"]');
      return { verdict: c.dataset.verdict, href: c.querySelector("a")?.getAttribute("href"), bg: getComputedStyle(c).backgroundColor };
    })(),
    failed: document.querySelector('#e-grid tr.item-row[data-item="7"] td.cell[data-arm="panel"]').dataset.verdict,
  }));
  check(legend.grid.join("|") === "✓ right|✗ wrong|! failed", `the grid's legend names its three colours (${legend.grid.join("|")})`);
  check(legend.cell.verdict === "right" && legend.cell.href === "#/s/sess_2_agent_a" && legend.cell.bg === "rgb(26, 127, 85)"
    && legend.failed === "failed", `a cell is coloured by its verdict and links to its session (${JSON.stringify(legend.cell)})`);
  await page.click('#e-grid tr.item-row[data-item="3"] td.q');
  const detail = await page.evaluate(() => {
    const d = document.querySelector('#e-grid tr.item-detail[data-item="3"]');
    return { hidden: d.hidden, text: d.textContent, boxes: d.querySelectorAll("pre.answer-box").length, members: d.querySelectorAll("table.members tbody tr").length };
  });
  check(!detail.hidden && detail.boxes === 3 && detail.members === 1 && detail.text.includes("Item 3, sc3:a: the answer is 3.")
    && detail.text.includes("Reference 3"), "a row opens to the question, the reference, each arm's answer and the panel's members");
  await page.click("#e-next");
  await page.waitForFunction(() => document.getElementById("e-items-note").textContent.includes("26–30 of 30"), null, { timeout: STEP_MS });
  g = await grid();
  check(g.rows.join(",") === "26,27,28,29,30" && !(await page.isEnabled("#e-next")), "next shows the last page, whole items");
  await page.selectOption("#e-filter", "disagree");
  await page.waitForFunction(() => document.getElementById("e-items-note").textContent.includes("disagree"), null, { timeout: STEP_MS });
  g = await grid();
  check(g.rows.join(",") === "4,5,15,25", `the filter 'arms disagree' narrows the rows (${g.rows.join(",")})`);
  await page.selectOption("#e-filter", "panel_wrong_member_right");
  await page.waitForFunction(() => document.getElementById("e-items-note").textContent.includes("panel is wrong"), null, { timeout: STEP_MS });
  g = await grid();
  check(g.rows.join(",") === "5,15,25", `the filter 'panel wrong, a member right' narrows the rows (${g.rows.join(",")})`);
  const chart = await page.evaluate(() => ({
    legend: [...document.querySelectorAll("#e-chart .chart-legend .legend-entry")]
      .map((e) => `${e.dataset.kind}=${e.querySelector("rect").getAttribute("fill")}`).join(","),
    points: [...document.querySelectorAll("#e-chart .point")]
      .map((p) => `${p.dataset.arm}=${getComputedStyle(p.querySelector("circle")).fill}`).join(","),
  }));
  check(chart.legend === "panel=#1f77b4,agent=#ff7f0e,self_consistency=#2ca02c"
    && chart.points === "panel=rgb(31, 119, 180),agent:a=rgb(255, 127, 14),sc3:a=rgb(44, 160, 44)",
    `the chart has a legend and chart.svg's colours per kind (${JSON.stringify(chart)})`);

  if (shots) {
    // The same finished session in the dark scheme.
    const dark = await browser.newContext({ viewport: { width: 1366, height: 860 }, colorScheme: "dark" });
    const p = await dark.newPage();
    await p.goto(`${url}/#/s/${encodeURIComponent(id)}`, { timeout: STEP_MS });
    await enterKey(p);
    await completed(p);
    await p.screenshot({ path: `${shots}/finished-session-dark.png` });
  }
}

try {
  await main();
  console.log("e2e: PASSED");
  process.exitCode = 0;
} catch (err) {
  console.error(`e2e: FAILED: ${err.stack || err}`);
  process.exitCode = 1;
} finally {
  clearTimeout(watchdog);
  await browser?.close().catch(() => {});
}
