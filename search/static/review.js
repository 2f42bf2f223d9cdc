// The review page: one document at a time. Every text goes in with textContent (never
// innerHTML), so a document cannot inject markup or script.
"use strict";

// skipped: documents skipped or labelled on this page (the server reads the published
// snapshot, which shows page labels only after the next publish). session: this page's own
// random id; without tokens it is what makes this page the owner of the labels it can undo.
const state = { head: "", strategy: "uncertain", collection: "", doc: null, labels: [],
                skipped: [], history: [], busy: false, session: newSession() };

function newSession() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
const $ = (id) => document.getElementById(id);

function setStatus(text, error = false) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

async function call(method, path, body) {
  const options = { method, headers: bertindexToken.headers() };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = typeof answer.detail === "string" ? answer.detail : JSON.stringify(answer.detail);
    if (response.status === 401) bertindexToken.ask(() => loadHeads().then((ok) => { if (ok && $("head").value) start(); }));
    if (response.status === 401 || response.status === 403) {
      throw new Error(bertindexToken.explain(response.status, detail));
    }
    throw new Error(`${response.status}: ${detail}`);
  }
  return answer;
}

function renderButtons() {
  const box = $("buttons");
  box.replaceChildren();
  state.labels.forEach((name, i) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "label";
    b.dataset.label = name;
    b.textContent = i < 9 ? `${name} (${i + 1})` : name;
    b.disabled = !state.doc;
    b.addEventListener("click", () => label(name));
    box.append(b);
  });
}

function render() {
  const doc = state.doc;
  $("doc").hidden = !doc;
  if (doc) {
    $("doc-id").textContent = doc.id;
    $("doc-collection").textContent = doc.collection;
    $("doc-title").textContent = doc.title || "";
    $("doc-text").textContent = doc.text;
    $("predicted").textContent = doc.predicted === null ? "none" : doc.predicted;
    $("score").textContent = doc.score === null ? "" : doc.score.toFixed(3);
  }
  renderButtons();
  $("skip").disabled = !doc;
  $("undo").disabled = state.history.length === 0;
}

async function loadNext() {
  const params = new URLSearchParams({ head: state.head, strategy: state.strategy,
                                       skip: state.skipped.join(",") });
  if (state.collection) params.set("collection", state.collection);
  const answer = await call("GET", `/review/api/next?${params}`);
  state.labels = answer.labels;
  state.doc = answer.document;
  setStatus(state.doc ? `${answer.reviewed} reviewed for ${state.head}`
                      : `nothing left to review for ${state.head} (${answer.reviewed} reviewed)`);
  render();
}

async function act(work) {
  if (state.busy) return;
  state.busy = true;
  try {
    await work();
  } catch (err) {
    setStatus(err.message, true);
  } finally {
    state.busy = false;
  }
}

function label(name) {
  if (!state.doc) return;
  act(async () => {
    const doc = state.doc;
    const answer = await call("POST", "/review/api/label", {
      head: state.head, doc_id: doc.doc_id, label: name, reviewer: $("reviewer").value || null,
      session: state.session });
    state.history.push({ kind: "label", doc, review_id: answer.review_id, ticket: answer.undo });
    state.skipped.push(doc.doc_id);
    await loadNext();
  });
}

function skip() {
  if (!state.doc) return;
  act(async () => {
    state.history.push({ kind: "skip", doc: state.doc });
    state.skipped.push(state.doc.doc_id);
    await loadNext();
  });
}

function undo() {
  if (state.history.length === 0) return;
  act(async () => {
    const last = state.history.pop();
    if (last.kind === "label") {
      await call("POST", "/review/api/undo", { head: state.head, review_id: last.review_id,
                                               ticket: last.ticket, session: state.session });
    }
    state.skipped = state.skipped.filter((id) => id !== last.doc.doc_id);
    state.doc = last.doc;
    setStatus(`undone: ${last.kind} of ${last.doc.id}`);
    render();
  });
}

function start(event) {
  if (event) event.preventDefault();
  state.head = ($("head").value || "").trim();
  state.strategy = $("strategy").value;
  state.collection = $("collection").value.trim();
  state.skipped = [];
  state.history = [];
  if (!state.head) {
    setStatus("name a head", true);
    return;
  }
  const url = new URL(window.location);
  url.searchParams.set("head", state.head);
  url.searchParams.set("strategy", state.strategy);
  if (state.collection) url.searchParams.set("collection", state.collection);
  else url.searchParams.delete("collection");
  window.history.replaceState(null, "", url);
  act(loadNext);
}

document.addEventListener("keydown", (event) => {
  if (event.target instanceof HTMLInputElement || event.target instanceof HTMLSelectElement) return;
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === "s") skip();
  else if (event.key === "u") undo();
  else if (/^[1-9]$/.test(event.key)) {
    const name = state.labels[Number(event.key) - 1];
    if (name !== undefined) label(name);
  }
});

$("setup").addEventListener("submit", start);
$("skip").addEventListener("click", skip);
$("undo").addEventListener("click", undo);

// The store's heads in the select; a head named in the address but not recorded stays
// choosable, so the server can say why it has nothing to review.
async function loadHeads() {
  const wanted = new URLSearchParams(window.location.search).get("head") || state.head;
  let heads = [];
  try {
    heads = (await call("GET", "/review/api/heads")).heads;
  } catch (err) {
    setStatus(err.message, true);
    return false;
  }
  if (wanted && !heads.includes(wanted)) heads.push(wanted);
  const select = $("head");
  select.replaceChildren();
  for (const name of heads) {
    const option = document.createElement("option");
    option.value = name;
    option.textContent = name;
    select.append(option);
  }
  if (wanted) select.value = wanted;
  if (!heads.length) setStatus("no head has annotated this store yet: run bertindex annotate first", true);
  return true;
}

const query = new URLSearchParams(window.location.search);
$("strategy").value = query.get("strategy") || "uncertain";
$("collection").value = query.get("collection") || "";
loadHeads().then((ok) => { if (ok && query.get("head")) start(); });
