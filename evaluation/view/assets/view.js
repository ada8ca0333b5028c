// vi view: draws the records of data/index.js, a page at a time, from data/chunk-*.js.
// Every string from a record goes into the page as text (textContent, attribute values), never
// as HTML: record content is untrusted.
"use strict";

const state = {meta: null, records: [], chunks: {}, waiting: {}, shown: [], page: 0, size: 20,
               q: "", status: "all", kind: "all", focus: null};
// index.js entries: [id, kind, ok, title, source, line, search text, chunk]
const ID = 0, KIND = 1, OK = 2, TITLE = 3, SOURCE = 4, LINE = 5, SEARCH = 6, CHUNK = 7;

function viewIndex(data) { state.meta = data.meta; state.records = data.records; }

function viewChunk(number, items) {
  state.chunks[number] = items;
  (state.waiting[number] || []).forEach((done) => done());
  delete state.waiting[number];
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === "") continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function loadChunk(number) {
  if (state.chunks[number]) return Promise.resolve();
  return new Promise((resolve, reject) => {
    if (state.waiting[number]) { state.waiting[number].push(resolve); return; }
    state.waiting[number] = [resolve];
    const tag = el("script", {src: "data/chunk-" + String(number).padStart(5, "0") + ".js"});
    tag.onerror = () => reject(new Error("data/chunk-" + number + ".js did not load"));
    document.head.append(tag);
  });
}

// --- blocks ----------------------------------------------------------------------------------

function picture(item) {
  if (!item.thumb) return el("div", {class: "missing"}, item.missing || "no image");
  // Not loading="lazy": a page holds at most 100 records of small local thumbnails, and lazy images
  // have no height until they load (Firefox's headless screenshot caught them empty).
  const img = el("img", {src: item.thumb, alt: item.head || "frame"});
  img.onerror = () => img.replaceWith(el("div", {class: "missing broken"}, "thumbnail did not load: " + item.thumb));
  return item.href ? el("a", {href: item.href, target: "_blank", rel: "noopener", title: "open the original"}, img) : img;
}

const draw = {
  kv(block) {
    return el("p", {class: "kv"}, ...block.items.map(([k, v]) => el("span", {}, el("b", {}, k + " "), v)));
  },
  text(block) {
    return el("div", {class: "text"}, el("h4", {}, block.label), el("p", {}, block.text));
  },
  table(block) {
    const head = el("tr", {}, ...block.head.map((h) => el("th", {}, h)));
    const rows = block.rows.map((row, i) => el("tr", {class: (block.classes || [])[i] || null},
                                                ...row.map((cell) => el("td", {}, cell))));
    return el("div", {class: "table"}, el("h4", {}, block.label),
              el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
  },
  frames(block) {
    const items = block.items.map((item) => el("figure", {class: item.mark ? "mark" : null},
      picture(item),
      el("figcaption", {},
         item.head ? el("div", {class: "head"}, item.head, item.mark ? el("span", {class: "badge"}, item.mark) : null) : null,
         ...item.lines.map(([who, text]) => el("div", {class: "line"}, who ? el("b", {}, who + ": ") : null, text)))));
    return el("div", {class: "frames" + (block.wide ? " wide" : "")}, el("h4", {}, block.label),
              el("div", {class: "row"}, ...items));
  },
  columns(block) {
    return el("div", {class: "columns"}, ...block.columns.map((col) => el("div", {class: "column"}, ...col.map(drawBlock))));
  },
  legend(block) {
    return el("details", {class: "legend"}, el("summary", {}, block.label),
              el("dl", {}, ...block.items.flatMap(([term, meaning]) => [el("dt", {}, term), el("dd", {}, meaning)])));
  },
  errors(block) {
    return el("ul", {class: "errors"}, ...block.items.map((e) => el("li", {},
      el("b", {}, e.stage || "?"), " ", el("code", {}, e.kind || "?"), " ", e.message)));
  },
  fields(block) {
    return el("details", {class: "fields"}, el("summary", {}, block.items.length + " fields"),
              el("table", {}, el("tbody", {}, ...block.items.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))))));
  },
};

function drawBlock(block) {
  const make = draw[block.t];
  return make ? make(block) : el("p", {class: "missing"}, "unknown block " + block.t);
}

function indented(raw) {
  try { return JSON.stringify(JSON.parse(raw), null, 1); } catch (error) { return raw; }  // a cut-off record as it is
}

function drawRecord(n) {
  const entry = state.records[n];
  const data = state.chunks[entry[CHUNK]][n % state.meta.chunk];
  const source = state.meta.sources[entry[SOURCE]];
  const where = source.href ? el("a", {href: source.href, title: "the JSONL file; the record is on line " + entry[LINE]},
                                  source.name) : source.name;
  const header = el("header", {},
    el("a", {class: "number", href: "#r=" + n, title: "link to this record"}, "#" + (n + 1)),
    el("span", {class: "badge kind"}, entry[KIND]),
    el("span", {class: "badge " + (entry[OK] ? "ok" : "error")}, entry[OK] ? "ok" : "error"),
    el("code", {class: "id"}, entry[ID]),
    entry[TITLE] ? el("span", {class: "title"}, entry[TITLE]) : null,
    el("span", {class: "where"}, where, ":" + entry[LINE]));
  return el("article", {class: "record " + entry[KIND] + (entry[OK] ? "" : " failed"), id: "r-" + n,
                        "data-kind": entry[KIND], "data-ok": String(entry[OK])},
    header, ...data.blocks.map(drawBlock),
    el("details", {class: "raw"}, el("summary", {}, "record (JSON, line " + entry[LINE] + ")"), el("pre", {}, indented(data.raw))));
}

// --- filter, pages, address ----------------------------------------------------------------

function applyFilter() {
  const words = state.q.toLowerCase().split(/\s+/).filter(Boolean);
  state.shown = [];
  state.records.forEach((entry, n) => {
    if (state.status === "ok" && !entry[OK]) return;
    if (state.status === "errors" && entry[OK]) return;
    if (state.kind !== "all" && entry[KIND] !== state.kind) return;
    if (words.length && !words.every((w) => entry[SEARCH].includes(w))) return;
    state.shown.push(n);
  });
}

function pages() { return Math.max(1, Math.ceil(state.shown.length / state.size)); }

function drawPager(nav) {
  nav.replaceChildren();
  const first = state.page * state.size;
  const last = Math.min(state.shown.length, first + state.size);
  const go = (page, label, disabled) => {
    const button = el("button", {type: "button", disabled: disabled}, label);
    button.onclick = () => { state.page = page; state.focus = null; update(true); };
    return button;
  };
  nav.append(go(0, "« first", state.page === 0), go(state.page - 1, "‹ previous", state.page === 0),
             el("span", {class: "count"}, state.shown.length ? `records ${first + 1}–${last} of ${state.shown.length}` +
                `, page ${state.page + 1} of ${pages()}` : "no record matches"),
             go(state.page + 1, "next ›", state.page >= pages() - 1), go(pages() - 1, "last »", state.page >= pages() - 1));
}

function writeAddress() {
  const parts = [];
  if (state.q) parts.push("q=" + encodeURIComponent(state.q));
  if (state.status !== "all") parts.push("status=" + state.status);
  if (state.kind !== "all") parts.push("kind=" + encodeURIComponent(state.kind));
  if (state.size !== 20) parts.push("size=" + state.size);
  if (state.page) parts.push("page=" + (state.page + 1));
  const hash = state.focus !== null ? "#r=" + state.focus : (parts.length ? "#" + parts.join("&") : "");
  if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname);
}

function readAddress() {
  const params = new URLSearchParams(location.hash.slice(1));
  state.q = params.get("q") || "";
  state.status = ["ok", "errors"].includes(params.get("status")) ? params.get("status") : "all";
  state.kind = params.get("kind") || "all";
  state.size = [10, 20, 50, 100].includes(Number(params.get("size"))) ? Number(params.get("size")) : 20;
  state.page = Math.max(0, (parseInt(params.get("page"), 10) || 1) - 1);
  const focus = parseInt(params.get("r"), 10);
  state.focus = Number.isInteger(focus) && focus >= 0 && focus < state.records.length ? focus : null;
  if (state.focus !== null) { state.q = ""; state.status = "all"; state.kind = "all"; }
  document.getElementById("q").value = state.q;
  document.getElementById("status").value = state.status;
  document.getElementById("kind").value = state.kind;
  document.getElementById("size").value = String(state.size);
}

let drawing = 0;
async function update(filtered) {
  if (!filtered) applyFilter();
  if (state.focus !== null) state.page = Math.floor(state.shown.indexOf(state.focus) / state.size);
  state.page = Math.min(Math.max(0, state.page), pages() - 1);
  writeAddress();
  const ticket = ++drawing;
  const numbers = state.shown.slice(state.page * state.size, (state.page + 1) * state.size);
  const main = document.getElementById("records");
  main.setAttribute("aria-busy", "true");
  try {
    await Promise.all([...new Set(numbers.map((n) => state.records[n][CHUNK]))].map(loadChunk));
  } catch (error) {
    main.replaceChildren(el("p", {class: "missing"}, String(error)));
    return;
  }
  if (ticket !== drawing) return;  // a newer filter or page came in while the chunks loaded
  main.replaceChildren(...numbers.map(drawRecord));
  main.setAttribute("aria-busy", "false");
  main.dataset.shown = String(numbers.length);
  document.querySelectorAll("nav.pager").forEach(drawPager);
  if (state.focus !== null) {
    const target = document.getElementById("r-" + state.focus);
    target.classList.add("focus");
    target.scrollIntoView();
  }
}

function start() {
  const meta = state.meta;
  if (!meta) {
    document.getElementById("records").append(el("p", {class: "missing"}, "data/index.js did not load"));
    return;
  }
  document.title = meta.title + " · vi view";
  document.getElementById("title").textContent = meta.title;
  const failed = state.records.filter((e) => !e[OK]).length;
  const kinds = Object.entries(meta.kinds).map(([k, v]) => `${v} ${k}`).join(", ");
  document.getElementById("summary").textContent =
    `${state.records.length} records (${failed} with errors): ${kinds}. Made ${meta.made}.`;
  const sources = document.getElementById("sources");
  meta.sources.forEach((s, i) => sources.append(i ? ", " : "from ", s.href ? el("a", {href: s.href}, s.name) : s.name));
  const kindSelect = document.getElementById("kind");
  Object.keys(meta.kinds).sort().forEach((k) => kindSelect.append(el("option", {value: k}, k)));
  readAddress();
  let timer = null;
  document.getElementById("q").addEventListener("input", (event) => {
    clearTimeout(timer);
    timer = setTimeout(() => { state.q = event.target.value; state.page = 0; state.focus = null; update(); }, 150);
  });
  for (const [id, key, cast] of [["status", "status", String], ["kind", "kind", String], ["size", "size", Number]]) {
    document.getElementById(id).addEventListener("change", (event) => {
      clearTimeout(timer);  // text typed just before counts too
      state.q = document.getElementById("q").value;
      state[key] = cast(event.target.value); state.page = 0; state.focus = null; update();
    });
  }
  document.getElementById("controls").addEventListener("submit", (event) => event.preventDefault());
  window.addEventListener("hashchange", () => { readAddress(); update(); });
  update();
}

document.addEventListener("DOMContentLoaded", start);
