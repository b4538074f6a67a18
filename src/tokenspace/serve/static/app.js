// The search page: a small dependency-free client of the JSON API (POST /search, POST /heatmap).
"use strict";

const $ = (id) => document.getElementById(id);
// the ranking inputs and the request fields they set (explain/ranking.py)
const RANKING = [["idf", "idf"], ["prior-weight", "prior_weight"], ["expansion", "expansion"],
  ["expansion-floor", "expansion_floor"]];
// every input and its name in the page's address (?q=a+red+heart&must_not=red&idf=1): the URL holds the
// whole search, so a link or a bookmark opens the same search; the names are the API's fields
const URL_FIELDS = [["q", "q"], ["k", "k"], ["must", "must"], ["must-not", "must_not"], ["where", "where"],
  ["steer", "steer"], ["filter", "filter"], ...RANKING];

// "a, b c" -> ["a", "b", "c"]: filters are typed as token lists
function tokenList(s) {
  return s.split(/[\s,]+/).map((t) => t.trim()).filter(Boolean);
}

// "dog=2, cat=0" -> {dog: 2, cat: 0}; a malformed entry is reported, not silently dropped
function steerMap(s) {
  const out = {};
  for (const part of s.split(",").map((p) => p.trim()).filter(Boolean)) {
    const m = part.match(/^(\S+?)\s*[=:]\s*([0-9.eE+-]+)$/);
    if (!m) throw new Error(`steer: "${part}" is not token=factor`);
    out[m[1]] = Number(m[2]);
  }
  return out;
}

// "source=emoji-noto, caption~heart, year=2020|2021" -> the API's metadata filter, read as the CLI's --filter:
// field=value (equality; true/false and numbers as such), field=a|b (any of them), field~word (text holds the word)
function filterMap(s) {
  const out = {};
  for (const part of s.split(",").map((p) => p.trim()).filter(Boolean)) {
    const m = part.match(/^([^=~]+?)\s*([=~])\s*(.+)$/);
    if (!m) throw new Error(`filter: "${part}" is not field=value, field=a|b or field~word`);
    const [, field, op, value] = m;
    if (field in out) throw new Error(`filter: ${field} is filtered twice (use ${field}=a|b for any of several values)`);
    if (op === "~") out[field] = {word: value};
    else if (value.includes("|")) out[field] = {in: value.split("|").map(scalar)};
    else out[field] = scalar(value);
  }
  return out;
}

function scalar(v) {
  if (v === "true" || v === "false") return v === "true";
  return /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(v) ? Number(v) : v;
}

// FastAPI errors: {detail: "message"} from the service, {detail: [{loc, msg}]} from validation
function errorText(body, status) {
  if (body && typeof body.detail === "string") return body.detail;
  if (body && Array.isArray(body.detail)) {
    return body.detail.map((e) => `${(e.loc || []).slice(1).join(".") || "request"}: ${e.msg}`).join("\n");
  }
  return `request failed (HTTP ${status})`;
}

function showError(msg) {
  const el = $("error");
  el.textContent = msg || "";
  el.hidden = !msg;
}

// the search's notes (how the query text was read: cut to the text encoder's length, or nothing in it to
// search for), one line each above the results; none: hidden
function showNotes(notes) {
  const el = $("notes");
  el.replaceChildren(...(notes || []).map((n) => {
    const li = document.createElement("li");
    li.textContent = `Note: ${n}`;
    return li;
  }));
  el.hidden = !el.children.length;
}

function chip(text, title, strength) {
  const c = document.createElement("span");
  c.className = "chip";
  c.textContent = text;
  if (title) c.title = title;
  if (strength !== undefined) c.style.setProperty("--w", (0.1 + 0.6 * strength).toFixed(2));
  return c;
}

function renderQuery(tokens) {
  const box = $("query-tokens");
  box.replaceChildren(...tokens.slice(0, 24).map((t) => chip(`${t.token} ${t.weight.toFixed(2)}`, "query token weight")));
}

async function toggleHeatmap(thumb, hit, text) {
  const old = thumb.querySelector("img.heatmap");
  if (old) { old.remove(); return; }
  const res = await fetch("/heatmap", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({id: hit.id, text}),
  });
  if (!res.ok) { showError(errorText(await res.json().catch(() => null), res.status)); return; }
  const img = document.createElement("img");
  img.className = "heatmap";
  img.alt = `heatmap of "${text}" on ${hit.id}`;
  img.src = URL.createObjectURL(await res.blob());
  thumb.appendChild(img);
}

function card(hit, text) {
  const el = document.createElement("article");
  el.className = "card";
  el.dataset.id = hit.id;
  const thumb = document.createElement("div");
  thumb.className = "thumb";
  if (hit.image_url) {
    const img = document.createElement("img");
    img.src = hit.image_url;
    img.alt = hit.text || hit.id;
    img.loading = "lazy";
    thumb.appendChild(img);
  }
  thumb.addEventListener("click", () => toggleHeatmap(thumb, hit, text));
  const meta = document.createElement("div");
  meta.className = "meta";
  const id = document.createElement("span");
  id.className = "id";
  id.textContent = hit.id;
  const score = document.createElement("strong");
  score.className = "score";
  score.textContent = hit.score.toFixed(3);
  meta.append(id, score);
  const caption = document.createElement("div");
  caption.className = "caption";
  caption.textContent = hit.text || "";
  const chips = document.createElement("div");
  chips.className = "chips";
  const top = hit.tokens.length ? hit.tokens[0].contribution : 1;
  for (const t of hit.tokens.slice(0, 8)) {
    chips.appendChild(chip(`${t.token} +${t.contribution.toFixed(3)}`,
      `query ${t.query_weight.toFixed(3)} x image ${t.doc_weight.toFixed(3)}`, top > 0 ? t.contribution / top : 0));
  }
  if (hit.hub_penalty) {
    const hub = chip(`hub penalty −${hit.hub_penalty.toFixed(3)}`,
      "this image matches many queries (its hubness x the prior's weight), so it is ranked lower", 0);
    hub.classList.add("penalty");
    chips.appendChild(hub);
  }
  el.append(thumb, meta, caption, chips);
  return el;
}

// the inputs from an address's query string (absent fields keep their defaults); the query text or null
function fromUrl(search) {
  const p = new URLSearchParams(search);
  for (const [id, name] of URL_FIELDS) $(id).value = p.get(name) ?? $(id).defaultValue;
  return p.get("q");
}

// the address in step with the inputs, without a new history entry per search (replaceState): only the
// fields that differ from the page's defaults, so a plain search is a short link (?q=a+red+heart)
function toUrl() {
  const p = new URLSearchParams();
  for (const [id, name] of URL_FIELDS) {
    const v = $(id).value.trim();
    if (v !== "" && v !== $(id).defaultValue) p.set(name, v);
  }
  const qs = p.toString();
  history.replaceState(null, "", qs ? `?${qs}` : location.pathname);
}

// the example searches show on an empty page only
function showExamples(show) {
  $("examples").hidden = !show;
}

async function search(ev) {
  ev.preventDefault();
  showError("");
  showNotes([]);
  toUrl();
  const text = $("q").value;
  let body;
  try {
    body = {
      text, k: Number($("k").value) || 12, must: tokenList($("must").value), must_not: tokenList($("must-not").value),
      where: $("where").value.trim() || null, steer: steerMap($("steer").value),
    };
    const filter = filterMap($("filter").value);
    if (Object.keys(filter).length) body.filter = filter;
    for (const [id, field] of RANKING) {  // empty: the index's default
      const v = $(id).value.trim();
      if (v !== "") body[field] = Number(v);
    }
  } catch (e) { showError(e.message); return; }
  const res = await fetch("/search", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await res.json().catch(() => null);
  if (!res.ok) { showError(errorText(data, res.status)); return; }
  renderQuery(data.query);
  showNotes(data.notes);
  const results = $("results");
  results.replaceChildren(...data.hits.map((h) => card(h, text)));
  if (!data.hits.length) results.textContent = "No image matches.";
  showExamples(false);
}

async function loadStats() {
  const res = await fetch("/stats");
  if (!res.ok) return;
  const s = await res.json();
  $("stats").textContent = `${s.size} images · ${s.nnz} weights · model ${s.model}`;
  const r = s.ranking || {};  // the server's resolved ranking: every lever a number (0: off)
  for (const [id, field] of RANKING) {
    const v = r[field];
    if (v !== undefined && v !== null) $(id).placeholder = String(v);
  }
}

$("search-form").addEventListener("submit", search);
// an example is a link (?q=...): followed in place, without reloading the page
for (const a of document.querySelectorAll("#examples a.example")) {
  a.addEventListener("click", (ev) => {
    ev.preventDefault();
    fromUrl(new URL(a.href).search);
    $("search-form").requestSubmit();
  });
}
loadStats();
// a link with ?q= opens on its search; without one the page opens empty, on the examples
if (fromUrl(location.search)) $("search-form").requestSubmit();
else showExamples(true);
