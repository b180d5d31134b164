// agentlab view: sort, filter and follow. Rows hold text only (escaped by the templates);
// this script reads textContent and data-* attributes and never writes HTML it built.
(() => {
  "use strict";

  // --- sortable tables: click a header; numbers sort as numbers -----------------------
  const value = (td) => {
    const t = (td ? td.textContent : "").trim();
    const n = Number(t.replace(/,/g, ""));
    return t !== "" && !Number.isNaN(n) ? n : t.toLowerCase();
  };
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      const table = th.closest("table");
      const col = Number(th.dataset.sort);
      const asc = th.dataset.dir !== "asc";
      th.dataset.dir = asc ? "asc" : "desc";
      const body = table.tBodies[0];
      const rows = [...body.rows].sort((a, b) => {
        const x = value(a.cells[col]);
        const y = value(b.cells[col]);
        return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
      });
      for (const r of rows) body.appendChild(r);
      filter();
    });
  }

  // --- the runs list's filters ---------------------------------------------------------
  const $ = (id) => document.getElementById(id);
  const PAGE = 200;
  function wanted(tr) {
    const q = ($("q") || {}).value || "";
    if (q && !tr.textContent.toLowerCase().includes(q.toLowerCase())) return false;
    // a sweep's or paper's own runs are listed on its page; here only on request or when
    // a search, kind, status or parameter filter looks for them (two papers made 62 rows
    // of 64; filtered to "experiment", the papers' experiments must show)
    const nested = $("f-nested");
    const looking = q || ($("f-kind") || {}).value || ($("f-status") || {}).value ||
      (($("f-param") || {}).value || "").trim();
    if (nested && !nested.checked && tr.dataset.parent && !looking) return false;
    const kind = ($("f-kind") || {}).value;
    if (kind && tr.dataset.kind !== kind) return false;
    const status = ($("f-status") || {}).value;
    if (status && tr.dataset.status !== status) return false;
    const from = ($("f-from") || {}).value;
    const to = ($("f-to") || {}).value;
    const day = (tr.dataset.created || "").slice(0, 10);
    if (from && (!day || day < from)) return false;
    if (to && (!day || day > to)) return false;
    const wantParams = (($("f-param") || {}).value || "").split(",").map((s) => s.trim()).filter(Boolean);
    if (wantParams.length) {
      let params = {};
      try { params = JSON.parse(tr.dataset.params || "{}"); } catch (e) { params = {}; }
      for (const p of wantParams) {
        const i = p.indexOf("=");
        const k = (i < 0 ? p : p.slice(0, i)).trim();
        if (!(k in params)) return false;
        if (i >= 0) {
          const v = p.slice(i + 1).trim();
          const got = params[k];
          const text = typeof got === "string" ? got : JSON.stringify(got);
          if (text !== v) return false;
        }
      }
    }
    return true;
  }
  function filter() {
    const table = $("runs");
    if (!table || !$("filters")) return;
    let n = 0;
    let total = 0;
    for (const tr of table.tBodies[0].rows) {
      total += 1;
      const ok = wanted(tr);
      tr.hidden = !ok || n >= PAGE;
      if (ok) n += 1;
    }
    $("shown").textContent = `${n} of ${total} shown` + (n > PAGE ? ` (first ${PAGE}; narrow the filter)` : "");
    const state = ["q", "f-kind", "f-status", "f-param", "f-from", "f-to"]
      .map((id) => [id, ($(id) || {}).value || ""]).filter(([, v]) => v);
    if ($("f-nested") && $("f-nested").checked) state.push(["f-nested", "1"]);
    history.replaceState(null, "", state.length ? "#" + new URLSearchParams(state).toString() : location.pathname);
  }
  if ($("filters")) {
    const saved = new URLSearchParams(location.hash.slice(1));
    for (const [k, v] of saved) {
      if (k === "f-nested" && $(k)) $(k).checked = v === "1";
      else if ($(k)) $(k).value = v;
    }
    for (const id of ["q", "f-kind", "f-status", "f-param", "f-from", "f-to", "f-nested"]) {
      if ($(id)) $(id).addEventListener(id === "f-nested" ? "change" : "input", filter);
    }
    filter();
  }

  // --- any other table: a filter over the rows of this page -----------------------------
  for (const input of document.querySelectorAll("input.row-filter")) {
    input.addEventListener("input", () => {
      const q = input.value.toLowerCase();
      const table = document.getElementById(input.dataset.table);
      for (const tr of table.tBodies[0].rows) tr.hidden = q !== "" && !tr.textContent.toLowerCase().includes(q);
    });
  }

  // --- a call named in the URL (#c-<request id>) opens ---------------------------------
  const openTarget = () => {
    const id = decodeURIComponent(location.hash.slice(1));
    const el = id && document.getElementById(id);
    if (el) {
      const d = el.tagName === "DETAILS" ? el : el.querySelector("details");
      if (d) d.open = true;
      el.scrollIntoView();
    }
  };
  window.addEventListener("hashchange", openTarget);
  if (!$("filters")) openTarget();

  // --- charts take their cell's width (drawn while the page was still being laid out)
  if (window.Plotly && window.ResizeObserver) {
    const ro = new ResizeObserver((entries) => {
      for (const e of entries) window.Plotly.Plots.resize(e.target);
    });
    for (const g of document.querySelectorAll(".js-plotly-plot")) ro.observe(g.parentElement ? g : g);
  }

  // --- live follow: one server-sent event per change of the run's marker ---------------
  // No request while nothing changes: the server holds the stream open and writes only
  // when a run commits (a tick, a finished run, a status).
  const live = document.body.dataset.live;
  if (live && location.protocol !== "file:" && window.EventSource) {
    const es = new EventSource(live);
    es.addEventListener("change", async () => {
      const res = await fetch(location.pathname + location.search, { cache: "no-store" });
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      for (const id of ["tiles", "runs", "live-table"]) {
        const old = $(id);
        const fresh = doc.getElementById(id);
        if (!old || !fresh) continue;
        if (old.tBodies && fresh.tBodies) old.replaceChild(document.adoptNode(fresh.tBodies[0]), old.tBodies[0]);
        else old.replaceWith(document.adoptNode(fresh));
      }
      filter();
      document.body.dataset.updated = String(Date.now());
    });
  }
})();
