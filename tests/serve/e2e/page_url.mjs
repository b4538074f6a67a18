// The search page's address and start page in headless Chromium:
//   1. the empty page shows example searches; clicking one searches it and puts it in the address;
//   2. an address with ?q=&k=&filter= opens on that search (fields filled, results shown);
//   3. a search typed on the page is written to the address (replaceState) and survives a reload;
//   4. no placeholder is cut off: each fits its box at the page's width.
//   node page_url.mjs --url http://127.0.0.1:PORT [--chromium /usr/bin/chromium] [--width 1280]
// Prints one JSON line with what it saw; exits non-zero (with the reason) when a step fails.
import { chromium } from "playwright-core";

function args(argv) {
  const out = { chromium: "/usr/bin/chromium", width: 1280, height: 900 };
  for (let i = 2; i < argv.length; i += 2) out[argv[i].replace(/^--/, "")] = argv[i + 1];
  if (!out.url) throw new Error("usage: node page_url.mjs --url URL");
  return out;
}

const opt = args(process.argv);
const browser = await chromium.launch({
  executablePath: opt.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
// a search has run when cards or "No image matches." replaced the results
const searched = () => document.querySelector("#results .card") || /No image matches/.test(document.querySelector("#results").textContent);
try {
  const page = await browser.newPage({ viewport: { width: Number(opt.width), height: Number(opt.height) } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const out = {};

  // 1. the empty page: examples, clickable
  await page.goto(opt.url, { waitUntil: "networkidle" });
  out.examples = await page.locator("#examples a.example:visible").allTextContents();
  out.emptyResults = await page.locator("#results .card").count();
  const first = page.locator("#examples a.example").first();
  const exampleText = await first.textContent();
  await first.click();
  await page.waitForFunction(searched, null, { timeout: 30000 });
  out.afterExample = { q: await page.inputValue("#q"), search: new URL(page.url()).search,
    examplesVisible: await page.locator("#examples").isVisible(), exampleText };

  // 2. a shared link opens on its search
  await page.goto(`${opt.url}/?q=a+red+dog&k=5&filter=caption~blue`, { waitUntil: "networkidle" });
  await page.waitForFunction(searched, null, { timeout: 30000 });
  out.fromLink = { q: await page.inputValue("#q"), k: await page.inputValue("#k"), filter: await page.inputValue("#filter"),
    cards: await page.locator("#results .card").count(),
    captions: await page.locator("#results .card .caption").allTextContents(),
    examplesVisible: await page.locator("#examples").isVisible() };

  // 3. a typed search goes into the address and survives a reload
  await page.fill("#q", "a green cat");
  await page.fill("#filter", "");
  await page.fill("#must-not", "dog");
  await page.click("#go");
  await page.waitForFunction(() => new URLSearchParams(location.search).get("q") === "a green cat", null, { timeout: 30000 });
  out.typed = new URL(page.url()).search;
  await page.reload({ waitUntil: "networkidle" });
  await page.waitForFunction(searched, null, { timeout: 30000 });
  out.reloaded = { q: await page.inputValue("#q"), mustNot: await page.inputValue("#must-not"),
    k: await page.inputValue("#k"), cards: await page.locator("#results .card").count() };

  // 4. every placeholder fits its box (measured with the box's own font)
  out.cutPlaceholders = await page.evaluate(() => {
    const ctx = document.createElement("canvas").getContext("2d");
    return [...document.querySelectorAll("input[placeholder]")].filter((i) => i.placeholder && i.offsetParent).map((i) => {
      const cs = getComputedStyle(i);
      ctx.font = cs.font;
      const room = i.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      return { id: i.id, placeholder: i.placeholder, text: Math.ceil(ctx.measureText(i.placeholder).width), room };
    }).filter((r) => r.text > r.room);
  });
  if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
