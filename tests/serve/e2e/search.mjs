// Drive the search page in headless Chromium: type a query, wait for result cards with token chips,
// click the first image for its heatmap, and save a screenshot.
//   node search.mjs --url http://127.0.0.1:PORT --query "a red dog" --out shot.png [--chromium /usr/bin/chromium]
//                   [--filter "caption~red"]   (then the same search through the page's metadata filter)
// Prints one JSON line with what it saw; exits non-zero (with the reason) when a step fails.
import { chromium } from "playwright-core";

function args(argv) {
  const out = { query: "a red dog", chromium: "/usr/bin/chromium", width: 1280, height: 900 };
  for (let i = 2; i < argv.length; i += 2) out[argv[i].replace(/^--/, "")] = argv[i + 1];
  if (!out.url || !out.out) throw new Error("usage: node search.mjs --url URL --out PNG [--query TEXT]");
  return out;
}

const opt = args(process.argv);
// the flags the machine needs: no sandbox as root, and no background connections (the network is closed)
const browser = await chromium.launch({
  executablePath: opt.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: Number(opt.width), height: Number(opt.height) } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(opt.url, { waitUntil: "networkidle" });
  await page.fill("#q", opt.query);
  await page.click("#go");
  await page.waitForSelector("#results .card", { timeout: 30000 });
  const cards = await page.locator("#results .card").count();
  const chips = await page.locator("#results .card .chip").count();
  // every thumbnail must have loaded (naturalWidth > 0): /image/{id} serves the files
  await page.waitForFunction(() => [...document.querySelectorAll("#results .thumb img")].every((i) => i.complete && i.naturalWidth > 0), null, { timeout: 30000 });
  await page.locator("#results .card .thumb").first().click();
  await page.waitForFunction(() => {
    const h = document.querySelector("#results .card .thumb img.heatmap");
    return h && h.complete && h.naturalWidth > 0;
  }, null, { timeout: 30000 });
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
  if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
  console.log(JSON.stringify({ cards, chips, heatmaps, firstScore, filtered }));
} finally {
  await browser.close();
}
