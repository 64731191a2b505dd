// What a web page may make a local massgen server do, in a real headless Chromium; run by
// tests/it/security_browsers.rs against a keyless `massgen serve` on the simulator.
//
//   node tests/ui/browsers.mjs <server url>
//   env: MASSGEN_CHROMIUM (default /usr/bin/chromium)
//
// 1. A page of another origin (served here, on another port) POSTs a question with
//    `fetch(..., {mode: "no-cors", headers: {"content-type": "text/plain"}})`, which needs
//    no preflight. The script only reports that the page sent it; the Rust test checks
//    that no session started and no upstream call was made.
// 2. DNS rebinding: Chromium resolves attacker.example to 127.0.0.1 (--host-resolver-rules),
//    so a page of http://attacker.example:<port> is same-origin with the server. Its reads
//    of /v1/sessions, by navigation and by fetch, must be refused (403).
import http from "node:http";
import { chromium } from "playwright-core";

const target = process.argv[2];
if (!target) {
  console.error("usage: node tests/ui/browsers.mjs <server url>");
  process.exit(2);
}
const executablePath = process.env.MASSGEN_CHROMIUM || "/usr/bin/chromium";
const port = new URL(target).port;

let browser;
let site;
const watchdog = setTimeout(async () => {
  console.error("browsers: FAILED: over the 40 s limit");
  await browser?.close().catch(() => {});
  site?.close();
  process.exit(1);
}, 40_000);

function check(ok, what) {
  if (!ok) throw new Error(`assertion failed: ${what}`);
  console.log(`browsers: ok: ${what}`);
}

const question = JSON.stringify({
  model: "massgen",
  messages: [{ role: "user", content: "Sent by a page of another site" }],
});
const attack = `<!doctype html><html><body><script>
fetch(${JSON.stringify(target)} + "/v1/chat/completions", {
  method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"},
  body: ${JSON.stringify(question)},
}).then(() => { document.title = "sent"; }, (e) => { document.title = "failed: " + e; });
</script></body></html>`;

try {
  site = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(attack);
  });
  await new Promise((ready) => site.listen(0, "127.0.0.1", ready));
  browser = await chromium.launch({
    executablePath,
    headless: true,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--host-resolver-rules=MAP attacker.example 127.0.0.1",
    ],
  });
  const page = await (await browser.newContext()).newPage();

  await page.goto(`http://127.0.0.1:${site.address().port}/`);
  await page.waitForFunction(() => document.title !== "", null, { timeout: 15_000 });
  // An opaque response either way: the page cannot tell, the server's effects can.
  check((await page.title()) === "sent", "the foreign page sent its no-cors text/plain POST");

  const rebound = await page.goto(`http://attacker.example:${port}/v1/sessions`);
  check(rebound.status() === 403, `a rebound name's navigation is refused (${rebound.status()})`);
  const read = await page.evaluate(() =>
    fetch("/v1/sessions").then((r) => r.status, (e) => `failed: ${e}`),
  );
  check(read === 403, `a rebound name's fetch is refused (${read})`);
  console.log("browsers: done");
} catch (e) {
  console.error(`browsers: FAILED: ${e.message}`);
  process.exitCode = 1;
} finally {
  clearTimeout(watchdog);
  await browser?.close().catch(() => {});
  site?.close();
}
