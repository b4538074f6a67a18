// Drive the search page in headless Chromium: type a query, wait for result cards with token chips,
// click the first image for its heatmap, and save a screenshot.
//   node search.mjs --url http://127.0.0.1:PORT --query "a red dog" --out shot.png [--chromium /usr/bin/chromium]
//                   [--filter "caption~red"]   (then the same search through the page's metadata filter)
//                   [--note-query "the"]       (then a query the model notes something about: the page shows
//                                               its notes, and hides them again on the next search)
//                   [--heatmap no]             (no click on the first image: the screenshot shows it plain)
// Or, instead of --url, --index DIR: the driver serves DIR itself for the run (`tokenspace serve --index DIR`,
// with the model that built it, on a free loopback port; --tokenspace names the command, default
// .venv/bin/tokenspace). The README's screenshot is taken so, on make demo's index (make screenshot):
//   node tests/serve/e2e/search.mjs --index runs/demo/index --query "a red heart" --heatmap no --out docs/screenshot-search.png
// Prints one JSON line with what it saw; exits non-zero (with the reason) when a step fails.
import { spawn } from "node:child_process";
import net from "node:net";
import { chromium } from "playwright-core";

function args(argv) {
  const out = { query: "a red dog", chromium: "/usr/bin/chromium", width: 1280, height: 900, heatmap: "yes",
    tokenspace: ".venv/bin/tokenspace" };
  for (let i = 2; i < argv.length; i += 2) out[argv[i].replace(/^--/, "")] = argv[i + 1];
  if (!(out.url || out.index) || !out.out) {
    throw new Error("usage: node search.mjs (--url URL | --index DIR) --out PNG [--query TEXT]");
  }
  return out;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// `tokenspace serve --index DIR` on a free port, ready when /healthz answers (the model loads first)
async function serve(command, index) {
  const port = await freePort();
  const proc = spawn(command, ["serve", "--index", index, "--port", String(port)], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  proc.stderr.on("data", (d) => { err = (err + d).slice(-2000); });
  const exited = new Promise((resolve) => proc.on("exit", resolve));
  proc.on("error", (e) => { err += String(e); });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 180000;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null || proc.pid === undefined) {
      throw new Error(`${command} serve --index ${index} stopped: ${err.trim()}`);
    }
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) { proc.kill("SIGINT"); throw new Error(`${command} serve did not answer in 180 s: ${err.trim()}`); }
    await new Promise((r) => setTimeout(r, 250));
  }
  return { url, stop: async () => { proc.kill("SIGINT"); await exited; } };
}

const opt = args(process.argv);
const server = opt.url ? null : await serve(opt.tokenspace, opt.index);
const url = opt.url || server.url;
// the flags the machine needs: no sandbox as root, and no background connections (the network is closed)
const browser = await chromium.launch({
  executablePath: opt.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
}).catch(async (e) => { if (server) await server.stop(); throw e; });  // the server outlives no failed run
try {
  const page = await browser.newPage({ viewport: { width: Number(opt.width), height: Number(opt.height) } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "networkidle" });
  await page.fill("#q", opt.query);
  await page.click("#go");
  await page.waitForSelector("#results .card", { timeout: 30000 });
  const cards = await page.locator("#results .card").count();
  const chips = await page.locator("#results .card .chip").count();
  // every thumbnail must have loaded (naturalWidth > 0): /image/{id} serves the files
  await page.waitForFunction(() => [...document.querySelectorAll("#results .thumb img")].every((i) => i.complete && i.naturalWidth > 0), null, { timeout: 30000 });
  if (opt.heatmap !== "no") {
    await page.locator("#results .card .thumb").first().click();
    await page.waitForFunction(() => {
      const h = document.querySelector("#results .card .thumb img.heatmap");
      return h && h.complete && h.naturalWidth > 0;
    }, null, { timeout: 30000 });
  }
  await page.waitForFunction(() => document.querySelector("#stats").textContent.trim() !== "", null, { timeout: 30000 });
  const stats = await page.locator("#stats").textContent();
  const heatmaps = await page.locator("#results img.heatmap").count();
  const firstScore = await page.locator("#results .card .score").first().textContent();
  await page.screenshot({ path: opt.out, fullPage: false });
  let filtered = null;
  if (opt.filter) {  // the same query again through the page's metadata filter: the captions it shows
    await page.fill("#filter", opt.filter);
    await page.click("#go");
    await page.waitForFunction((n) => document.querySelectorAll("#results .card").length !== n
      || document.querySelector("#error:not([hidden])"), cards, { timeout: 30000 });
    const error = await page.locator("#error:not([hidden])").count() ? await page.locator("#error").textContent() : null;
    if (error) throw new Error(`the filtered search failed: ${error}`);
    filtered = await page.locator("#results .card .caption").allTextContents();
  }
  let noted = null;
  if (opt["note-query"]) {  // a query with a note: the page shows it (with the hits, if any); the next search clears it
    await page.fill("#filter", "");
    await page.fill("#q", opt["note-query"]);
    await page.click("#go");
    await page.waitForSelector("#notes:not([hidden]) li", { timeout: 30000 });
    noted = { notes: await page.locator("#notes li").allTextContents(), cards: await page.locator("#results .card").count(),
      results: (await page.locator("#results").textContent()).trim().slice(0, 80) };
    await page.fill("#q", opt.query);
    await page.click("#go");
    await page.waitForSelector("#results .card", { timeout: 30000 });
    noted.hiddenAfter = await page.locator("#notes").isHidden();
  }
  if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
  console.log(JSON.stringify({ cards, chips, heatmaps, firstScore, stats, filtered, noted }));
} finally {
  await browser.close();
  if (server) await server.stop();
}
