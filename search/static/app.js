// The bertindex search page: talks to POST /search and POST /facets of the server that
// served it, and reads GET /health once for what the server offers (a reranker). Every piece
// of text from the store or the user reaches the page through textContent or createTextNode,
// never as HTML.
"use strict";

const PAGE = 10;
const MAX_QUERY = 4000; // search.server.MAX_QUERY_CHARS
const state = { query: "", mode: "hybrid", collection: "", where: [], labels: [], entities: [], offset: 0,
                rerank: true };
// what GET /health says the server offers; `reranker`: a pair head is configured (search.rerank)
const server = { reranker: false, rerankDepth: null };
let ready = null; // the promise of loadServer(): a search waits for it

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function clearResults() {
  $("hits").replaceChildren();
  $("summary").textContent = "";
  $("prev").disabled = $("next").disabled = true;
}

function say(text, kind) {
  const box = $("message");
  box.textContent = text;
  box.className = kind || "";
  box.hidden = !text;
}

function filters() {
  return {
    collection: state.collection || null,
    where: Object.fromEntries(state.where),
    labels: state.labels,
    entities: state.entities,
  };
}

async function post(path, body) {
  let response;
  try {
    response = await fetch(path, {
      method: "POST",
      headers: bertindexToken.headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body),
    });
  } catch (err) {
    throw new Error(`The server did not answer (${err.message}). Is bertindex serve still running?`);
  }
  let answer = null;
  try {
    answer = await response.json();
  } catch (err) {
    answer = null;
  }
  if (!response.ok) {
    let detail = answer && answer.detail !== undefined ? answer.detail : response.statusText;
    detail = typeof detail === "string" ? detail : JSON.stringify(detail);
    if (response.status === 401) bertindexToken.ask(() => run());
    throw new Error(bertindexToken.explain(response.status, detail));
  }
  return answer;
}

// The search in the address bar (?q=&mode=&collection=&where=F=V&label=H=L&entity=T&offset=
// &rerank=off), so a search can be bookmarked or shared; the token is never part of it. Like
// the mode, the Rerank switch is written only when off its default (on, as the server's config).
function saveToUrl() {
  const params = new URLSearchParams();
  if (state.query) params.set("q", state.query);
  if (state.mode !== "hybrid") params.set("mode", state.mode);
  if (state.collection) params.set("collection", state.collection);
  for (const [field, value] of state.where) params.append("where", `${field}=${value}`);
  for (const label of state.labels) params.append("label", label);
  for (const entity of state.entities) params.append("entity", entity);
  if (state.offset) params.set("offset", String(state.offset));
  if (server.reranker && !state.rerank) params.set("rerank", "off");
  const url = new URL(window.location);
  url.search = params.toString();
  window.history.replaceState(null, "", url);
}

function loadFromUrl() {
  const params = new URLSearchParams(window.location.search);
  state.query = (params.get("q") || "").slice(0, MAX_QUERY * 2);
  const mode = params.get("mode");
  state.mode = ["hybrid", "dense", "keyword"].includes(mode) ? mode : "hybrid";
  state.collection = params.get("collection") || "";
  state.where = params.getAll("where").filter((w) => w.includes("="))
    .map((w) => [w.slice(0, w.indexOf("=")), w.slice(w.indexOf("=") + 1)]);
  state.labels = params.getAll("label");
  state.entities = params.getAll("entity");
  state.offset = Math.max(0, Number.parseInt(params.get("offset") || "0", 10) || 0);
  state.rerank = params.get("rerank") !== "off";
  $("query").value = state.query;
  $("mode").value = state.mode;
  if (state.collection) {
    $("collection").append(el("option", { value: state.collection }, state.collection));
    $("collection").value = state.collection;
  }
  return Boolean(state.query);
}

function describeFilters() {
  const parts = [];
  if (state.collection) parts.push(`collection = ${state.collection}`);
  for (const [field, value] of state.where) parts.push(`${field} = ${value}`);
  for (const label of state.labels) parts.push(`label ${label}`);
  for (const entity of state.entities) parts.push(`entity ${entity}`);
  return parts.join(", ");
}

function renderActiveFilters() {
  const list = $("active-filters");
  list.replaceChildren();
  const chip = (text, remove) => {
    const button = el("button", { type: "button", "aria-label": `remove ${text}`, title: "remove" }, "×");
    button.addEventListener("click", () => { remove(); state.offset = 0; run(); });
    list.append(el("li", { class: "active-filter" }, text, button));
  };
  state.where.forEach(([field, value], i) =>
    chip(`${field} = ${value}`, () => state.where.splice(i, 1)));
  state.labels.forEach((label, i) => chip(`label ${label}`, () => state.labels.splice(i, 1)));
  state.entities.forEach((entity, i) => chip(`entity ${entity}`, () => state.entities.splice(i, 1)));
}

const EXCERPT = 600; // characters of the matching window shown, from just before its first match

function highlighted(text, spans) {
  const out = el("p", { class: "window" });
  spans = spans || [];
  if (text.length > EXCERPT) {
    let from = spans.length ? Math.max(0, spans[0][0] - 120) : 0;
    from = Math.min(from, text.length - EXCERPT);
    const cut = text.lastIndexOf(" ", from) > from - 20 ? Math.max(0, text.lastIndexOf(" ", from)) : from;
    const to = cut + EXCERPT;
    spans = spans.filter(([a, b]) => a >= cut && b <= to).map(([a, b]) => [a - cut, b - cut]);
    text = (cut > 0 ? "… " : "") + text.slice(cut, to) + (to < text.length ? " …" : "");
    if (cut > 0) spans = spans.map(([a, b]) => [a + 2, b + 2]);
  }
  let at = 0;
  for (const [start, end] of spans) {
    if (start < at) continue;
    out.append(document.createTextNode(text.slice(at, start)));
    out.append(el("mark", {}, text.slice(start, end)));
    at = end;
  }
  out.append(document.createTextNode(text.slice(at)));
  return out;
}

function fmt(value) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(3);
}

function renderHit(hit, reranked) {
  const title = (hit.title || "").trim() || hit.id;
  const window = hit.window !== undefined ? hit.window : hit.text.slice(hit.chunk_start, hit.chunk_end);
  const item = el("li", { class: "hit", "data-id": hit.id },
    el("div", { class: "title" }, title),
    el("div", { class: "meta" },
      `${hit.id} · ${hit.collection} · score ${fmt(hit.score)} (dense ${fmt(hit.dense)}, keyword ${fmt(hit.keyword)}` +
      (reranked ? `, rerank ${fmt(hit.rerank)})` : ")")),
    highlighted(window, hit.highlights));
  const chips = el("div", { class: "chips" });
  for (const label of hit.labels || []) {
    chips.append(el("span", { class: "chip label" }, `${label.head}: ${label.label}`));
  }
  const seen = new Set();
  for (const entity of hit.entities || []) {
    const text = `${entity.type} ${entity.text}`;
    if (seen.has(text) || seen.size >= 8) continue;
    seen.add(text);
    chips.append(el("span", { class: "chip entity" }, text));
  }
  if (chips.childElementCount) item.append(chips);
  return item;
}

function facetButton(text, count, active, onClick) {
  const button = el("button", { type: "button", class: active ? "facet on" : "facet" },
    text, el("span", { class: "count" }, String(count)));
  button.addEventListener("click", () => { onClick(); state.offset = 0; run(); });
  return button;
}

function toggle(list, value) {
  const i = list.indexOf(value);
  if (i >= 0) list.splice(i, 1);
  else list.push(value);
}

function renderFacets(counts) {
  const collections = $("collection");
  const keep = state.collection;
  collections.replaceChildren(el("option", { value: "" }, "all collections"));
  for (const [name, count] of Object.entries(counts.collections || {})) {
    collections.append(el("option", { value: name }, `${name} (${count})`));
  }
  collections.value = keep;

  const labels = $("label-facets");
  labels.replaceChildren();
  for (const [head, byLabel] of Object.entries(counts.labels || {})) {
    labels.append(el("h3", {}, head));
    for (const [label, count] of Object.entries(byLabel)) {
      const value = `${head}=${label}`;
      labels.append(facetButton(label, count, state.labels.includes(value), () => toggle(state.labels, value)));
    }
  }
  if (!labels.childElementCount) labels.append(el("p", { class: "muted" }, "none annotated"));

  const entities = $("entity-facets");
  entities.replaceChildren();
  for (const [type, count] of Object.entries(counts.entities || {})) {
    entities.append(facetButton(type, count, state.entities.includes(type), () => toggle(state.entities, type)));
  }
  if (!entities.childElementCount) entities.append(el("p", { class: "muted" }, "none annotated"));
}

async function refreshFacets() {
  try {
    renderFacets(await post("/facets", filters()));
  } catch (err) {
    say(err.message);
  }
}

// Ask the server once what it offers; without an answer (an older server) the page has no
// Rerank switch and searches as before.
async function loadServer() {
  try {
    const response = await fetch("/health", { headers: bertindexToken.headers({}) });
    const health = response.ok ? await response.json() : {};
    server.reranker = health.rerank === true;
    server.rerankDepth = health.rerank_depth || null;
  } catch (err) {
    server.reranker = false;
  }
  $("rerank-switch").hidden = !server.reranker;
  $("rerank").checked = server.reranker && state.rerank;
  if (server.rerankDepth) {
    $("rerank-switch").title = `reorder the top ${server.rerankDepth} hits with the server's pair head`;
  }
}

async function run() {
  document.body.dataset.busy = "1"; // tests wait for it to go
  try {
    await search();
  } finally {
    delete document.body.dataset.busy;
  }
}

async function search() {
  await ready;
  renderActiveFilters();
  saveToUrl();
  const query = state.query;
  if (!query.trim()) {
    clearResults();
    say("Type a query first: the search box is empty.");
    await refreshFacets();
    return;
  }
  if (query.length > MAX_QUERY) {
    clearResults();
    say(`The query is ${query.length.toLocaleString("en")} characters long; at most ${MAX_QUERY.toLocaleString("en")} are searched. Shorten it.`);
    return;
  }
  say("");
  $("summary").textContent = "searching…";
  const body = { query, k: PAGE, offset: state.offset, mode: state.mode, ...filters(),
                 annotations: true, highlight: true };
  const reranked = server.reranker && state.rerank;
  if (server.reranker) body.rerank = state.rerank; // without a reranker: the request of before
  let answer;
  try {
    [answer] = await Promise.all([
      post("/search", body),
      refreshFacets(),
    ]);
  } catch (err) {
    clearResults();
    say(err.message);
    return;
  }
  const hits = answer.hits;
  $("hits").replaceChildren(...hits.map((hit) => renderHit(hit, reranked)));
  $("hits").setAttribute("start", String(state.offset + 1));
  $("prev").disabled = state.offset === 0;
  $("next").disabled = hits.length < PAGE;
  const scope = describeFilters();
  if (!hits.length) {
    $("summary").textContent = "";
    say(state.offset ? "No more results." : `No results for “${query}”${scope ? ` with ${scope}` : ""}.`, "info");
    return;
  }
  $("summary").textContent = `results ${state.offset + 1}–${state.offset + hits.length} ` +
    `(${answer.mode}${reranked ? ", reranked" : ""}, ${answer.took_ms} ms)`;
}

function init() {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.query = $("query").value;
    state.mode = $("mode").value;
    state.collection = $("collection").value;
    state.offset = 0;
    run();
  });
  $("where-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = $("where-field").value.trim();
    const value = $("where-value").value;
    if (!field) {
      say("Name the metadata field before its value (e.g. lang = en).");
      return;
    }
    state.where = state.where.filter(([f]) => f !== field);
    state.where.push([field, value]);
    $("where-field").value = "";
    $("where-value").value = "";
    state.query = $("query").value;
    state.offset = 0;
    run();
  });
  $("rerank").addEventListener("change", () => {
    state.rerank = $("rerank").checked;
    if ($("query").value.trim()) $("search-form").requestSubmit(); // the search again, from page 1
    else saveToUrl();
  });
  $("next").addEventListener("click", () => { state.offset += PAGE; run(); });
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); run(); });
  const fromUrl = loadFromUrl();
  ready = loadServer();
  if (fromUrl) run();
  else refreshFacets();
}

document.addEventListener("DOMContentLoaded", init);
