// Shared helpers, prepended to every agentlab widget module by agentlab.viz._base.load_esm
// (anywidget loads each module from a blob, so modules cannot import each other).
// Agent text is untrusted: everything here builds DOM with createElement + textContent.

/**
 * Create an element with an optional class and text (set via textContent, never HTML).
 * @param {string} tag
 * @param {string} [cls]
 * @param {unknown} [text]
 * @returns {HTMLElement}
 */
function h(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

/**
 * Decode a little-endian float64 buffer (a DataView from the widget state) into rows.
 * The copy avoids alignment errors when the buffer's byteOffset is not a multiple of 8.
 * @param {DataView | ArrayBuffer | null | undefined} dv
 * @param {number} ncols
 * @returns {Float64Array[]}
 */
function f64rows(dv, ncols) {
  if (!dv || !ncols) return [];
  /** @type {ArrayBuffer} */
  let buf;
  if (dv instanceof ArrayBuffer) buf = dv;
  else buf = dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength);
  const all = new Float64Array(buf);
  const out = [];
  for (let i = 0; i + ncols <= all.length; i += ncols) out.push(all.subarray(i, i + ncols));
  return out;
}

/**
 * Snapshot + delta merge: items of `delta` whose key is beyond the snapshot's last key.
 * @template T
 * @param {T[]} base
 * @param {T[]} delta
 * @param {(item: T) => number} key
 * @returns {T[]}
 */
function mergeJournal(base, delta, key) {
  const last = base.length ? key(base[base.length - 1]) : -1;
  const extra = (delta || []).filter((d) => key(d) > last);
  return extra.length ? base.concat(extra) : base;
}

/**
 * Human-friendly number.
 * @param {unknown} v
 * @param {number} [digits]
 * @returns {string}
 */
function fmt(v, digits = 1) {
  if (v === null || v === undefined || typeof v !== "number" || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(digits) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(digits) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(digits) + "k";
  if (Number.isInteger(v)) return String(v);
  if (a < 0.01) return v.toPrecision(2);
  return v.toFixed(a < 10 ? 2 : digits);
}

/**
 * A short axis label (``fmt_tick`` in agentlab/viz/_static.py, for the static snapshot):
 * from 10,000 on in k / M / G with at most three significant digits ("12.5k", "250k",
 * "1.5M"); below, the number itself with thousands separators. Every label stays distinct:
 * `fmt(v, 0)` rounded to a whole k / M and wrote the ticks 1M, 1.5M, 2M as "1M, 2M, 2M".
 * @param {number} v
 * @returns {string}
 */
function fmtTick(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "–";
  if (Math.abs(v) < 1e4) {
    return Number.isInteger(v) ? v.toLocaleString("en-US") : String(Number(v.toPrecision(3)));
  }
  /** @type {[number, string][]} */
  const units = [[1e3, "k"], [1e6, "M"], [1e9, "G"]];
  for (const [unit, suffix] of units) {
    const x = Number((v / unit).toPrecision(3)); // (999,999 rounds to 1000k: the next unit)
    if (Math.abs(x) < 1000 || suffix === "G") return String(x) + suffix;
  }
  return String(v);
}

/**
 * Subscribe to several traits; returns the unsubscribe function.
 * @param {any} model
 * @param {string[]} names
 * @param {() => void} cb
 * @returns {() => void}
 */
function onTraits(model, names, cb) {
  for (const n of names) model.on("change:" + n, cb);
  return () => { for (const n of names) model.off("change:" + n, cb); };
}

/**
 * A row of stat tiles: for each `[key, label]` a value cell ("–" until set, `data-stat` =
 * key) over its label. Returns the row and the value cells by key.
 * @param {ReadonlyArray<ReadonlyArray<unknown>>} specs
 * @returns {{row: HTMLElement, val: Record<string, HTMLElement>}}
 */
function statTiles(specs) {
  const row = h("div", "al-tiles");
  /** @type {Record<string, HTMLElement>} */
  const val = {};
  for (const [key, label] of specs) {
    const tile = h("div", "al-tile");
    const v = h("div", "al-value", "–");
    v.dataset.stat = String(key);
    val[String(key)] = v;
    tile.append(v, h("div", "al-label", label));
    row.append(tile);
  }
  return { row, val };
}

/** ms a press waits for the kernel's ack before the view says nothing answered */
const NO_ANSWER_MS = 4000;

/**
 * `send(content, what)`: `model.send(content)`, watched. Every message a live view sends is
 * acked by the kernel (`LiveWidget._dispatch_msg`); if no ack comes within NO_ANSWER_MS,
 * `note` says so and `root.dataset.noAnswer` names the press — a saved copy of the view in
 * a reopened notebook has no kernel object behind it, so its buttons would otherwise do
 * nothing, silently. A send that throws says so at once: after a kernel restart the old
 * comm throws ("Cannot send") before the timer started, and the press showed nothing. A
 * late ack (a busy kernel) clears the note.
 * @param {any} model
 * @param {HTMLElement} note
 * @param {HTMLElement} root
 * @returns {(content: Record<string, unknown>, what: string) => void}
 */
function sender(model, note, root) {
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  const clear = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    note.textContent = "";
    delete root.dataset.noAnswer;
  };
  model.on("msg:custom", (/** @type {any} */ m) => { if (m && m.type === "ack") clear(); });
  return (content, what) => {
    clear();
    const say = () => {
      timer = null;
      note.textContent = "No answer from the kernel to " + what + ": it is busy or gone, or "
        + "this view is a saved copy (a reopened notebook). Run the cell again to control a run.";
      root.dataset.noAnswer = what;
    };
    try {
      model.send(content);
    } catch (_e) {
      say();
      return;
    }
    timer = setTimeout(say, NO_ANSWER_MS);
  };
}

/** what a view restored from a saved notebook says (no kernel object behind it) */
const SAVED_NOTE = "a saved view: it shows what it showed when the notebook was saved; no "
  + "kernel object is behind it (a reopened notebook, or a restarted kernel). Run the cell "
  + "again to follow or control a run.";

/** what a drawn view says once its kernel restarted under it (its model's comm is gone) */
const GONE_NOTE = "disconnected: the kernel restarted, so no kernel object is behind this "
  + "view; it shows what it showed then, and a run it drove ended with that kernel. Run the "
  + "cell again to follow or control a run.";

/**
 * `watchSaved(el, head, root, model, onChange)`: mark a view with no kernel object behind
 * it. A view that ipywidgets restored from a saved notebook has a model with no comm
 * (`comm_live` false), which ipywidgets shows by the class `jupyter-widgets-disconnected`
 * on the view's element — a red broken-link icon that widgets/agentlab.css hides on
 * agentlab's views (`.al-view`, four above a dashboard). Instead `head` gets a grey "saved
 * view" label (its title says what that means), `root.dataset.saved` is set, and
 * `onChange(saved, note, gone)` runs now and whenever the class comes or goes.
 *
 * A kernel restart disconnects a drawn view: the widget manager sets `comm_live` false on
 * every model, and ipywidgets' own listener on the model (`comm_live_update`) would add the
 * class. anywidget drops every model listener keyed to the view when it renders
 * (`model.off(null, null, view)`), that one included, so agentlab's views kept saying
 * "running" with pause and stop on. `comm_live` is set true only when a model is built,
 * before any view, so that event after render means the comm is gone: the class is set
 * here, the label says "disconnected", `root.dataset.disconnected` is set and `note` is
 * GONE_NOTE (`gone` true).
 * @param {HTMLElement} el
 * @param {HTMLElement} head
 * @param {HTMLElement} root
 * @param {any} model
 * @param {(saved: boolean, note: string, gone: boolean) => void} [onChange]
 * @returns {() => void} stops watching
 */
function watchSaved(el, head, root, model, onChange) {
  const label = h("span", "al-saved", "saved view");
  label.title = SAVED_NOTE;
  let was = /** @type {boolean | null} */ (null);
  let gone = false;  // disconnected after it was drawn (a kernel restart), not restored so
  const look = () => {
    const saved = el.classList.contains("jupyter-widgets-disconnected");
    if (saved === was) return;
    was = saved;
    label.textContent = gone ? "disconnected" : "saved view";
    label.title = gone ? GONE_NOTE : SAVED_NOTE;
    if (saved) { head.insertBefore(label, head.querySelector(".al-buttons")); root.dataset.saved = "1"; }
    else { label.remove(); delete root.dataset.saved; }
    if (saved && gone) root.dataset.disconnected = "1";
    else delete root.dataset.disconnected;
    if (onChange) onChange(saved, gone ? GONE_NOTE : SAVED_NOTE, gone);
  };
  const onGone = () => {
    if (el.classList.contains("jupyter-widgets-disconnected")) return;
    gone = true;
    el.classList.add("jupyter-widgets-disconnected");
  };
  if (model) model.on("comm_live_update", onGone);
  const obs = new MutationObserver(look);
  obs.observe(el, { attributes: true, attributeFilter: ["class"] });
  look();
  return () => { obs.disconnect(); if (model) model.off("comm_live_update", onGone); };
}

/**
 * A color of the notebook's theme (a JupyterLab CSS variable) as seen from `el`, or `dflt`
 * outside JupyterLab. Canvas strokes cannot use CSS variables, so the charts ask at each
 * draw: a dark theme gets light axes (fixed #555 text was near-invisible on it), and a
 * theme switch shows at the next frame.
 * @param {Element | null | undefined} el
 * @param {string} name
 * @param {string} dflt
 * @returns {string}
 */
function themeColor(el, name, dflt) {
  const v = el && el.isConnected ? getComputedStyle(el).getPropertyValue(name).trim() : "";
  return v || dflt;
}

/** uPlot axis options in the theme's colors: labels and tick values, grid, tick marks. */
function themedAxis() {
  return {
    stroke: (/** @type {any} */ u) => themeColor(u.root, "--jp-ui-font-color1", "#555"),
    grid: { stroke: (/** @type {any} */ u) => themeColor(u.root, "--jp-border-color2", "#eee"), width: 1 },
    ticks: { stroke: (/** @type {any} */ u) => themeColor(u.root, "--jp-border-color1", "#ccc") },
  };
}

/**
 * Call `redraw` whenever JupyterLab switches its theme (it sets `data-jp-theme-name` on
 * the body): a chart's canvas keeps the colors it was drawn with until it draws again.
 * @param {() => void} redraw
 * @returns {() => void} stop watching
 */
function onThemeChange(redraw) {
  if (typeof MutationObserver === "undefined" || !document.body) return () => {};
  // after the new theme's styles apply (two frames), not while they are being swapped
  const later = () => requestAnimationFrame(() => requestAnimationFrame(redraw));
  const obs = new MutationObserver(later);
  obs.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light"] });
  return () => obs.disconnect();
}

/** Tick steps of an axis of counts: whole numbers only (no "2.5 gaps" or "1.5 ticks"). */
const WHOLE_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/**
 * A uPlot line chart with axis titles (units included) and a legend that shows the
 * hovered values. `series` are [label, color] pairs; data is [xs, ...ys].
 * @param {HTMLElement} parent
 * With `empty`, the chart shows that sentence over the plot while it has fewer than
 * `minPoints` (default 1: one point is drawn) finite points in every series: an empty
 * state, not a blank box.
 * @param {{title: string, x: string, y: string, series: [string, string][], width?: number,
 *          height?: number, xInt?: boolean, empty?: () => string, minPoints?: number}} spec
 * @returns {{set: (data: number[][]) => void, destroy: () => void}}
 */
function lineChart(parent, spec) {
  const box = h("div", "al-chart");
  box.dataset.chart = spec.title;
  parent.append(box);
  // @ts-ignore uPlot is the vendored global (widgets/vendor)
  const U = uPlot;
  const axis = themedAxis();
  const opts = {
    title: spec.title,
    width: spec.width || 420,
    height: spec.height || 190,
    scales: { x: { time: false } },
    axes: [
      { ...axis, label: spec.x,
        // whole ticks get whole steps only (no tick marks between 1 and 2)
        incrs: spec.xInt ? WHOLE_STEPS : undefined,
        values: spec.xInt
        ? (/** @type {any} */ _u, /** @type {number[]} */ vs) => vs.map((v) => Number.isInteger(v) ? String(v) : "")
        : undefined },
      // short tick values (180k, not 180,000) so they never run into the axis title
      { ...axis, label: spec.y, size: 60,
        values: (/** @type {any} */ _u, /** @type {number[]} */ vs) => vs.map(fmtTick) },
    ],
    series: [{ label: spec.x }].concat(spec.series.map(([label, color]) => ({
      label, stroke: color, width: 1.5, spanGaps: false,
    }))),
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
  const empty = [[], ...spec.series.map(() => [])];
  const chart = new U(opts, empty, box);
  const unwatch = onThemeChange(() => chart.redraw(false, true));
  const note = h("div", "al-empty");
  note.style.display = "none";
  if (chart.over) chart.over.append(note);
  box.append(exportButton(() => chart.ctx.canvas, spec.title, () => ({ legend: spec.series })));
  return {
    set: (data) => {
      chart.setData(data);
      const most = Math.max(0, ...data.slice(1).map((ys) => ys.filter((v) => v !== null && Number.isFinite(v)).length));
      const msg = spec.empty ? spec.empty() : "";
      note.textContent = msg;
      note.style.display = msg && most < (spec.minPoints || 1) ? "" : "none";
      box.dataset.empty = note.style.display === "none" ? "" : msg;
    },
    destroy: () => { unwatch(); chart.destroy(); },
  };
}

/**
 * A small "PNG" button that downloads a chart (a transient link, removed at once: the
 * widget DOM never holds a link) as :func:`chartPng` draws it.
 * @param {() => HTMLCanvasElement} canvas
 * @param {string} title the chart's title (also the file name)
 * @param {() => PngExtras} [extras] what the page shows around the canvas
 */
function exportButton(canvas, title, extras) {
  const b = /** @type {HTMLButtonElement} */ (h("button", "al-btn al-export", "PNG"));
  b.title = "download this chart as PNG";
  b.addEventListener("click", () => {
    const a = document.createElement("a");
    a.href = chartPng(canvas(), title, extras ? extras() : {});
    a.download = "agentlab-" + title.toLowerCase().replace(/[^a-z0-9]+/g, "-") + ".png";
    document.body.append(a);
    a.click();
    a.remove();
  });
  return b;
}

/**
 * @typedef {{texts?: Element[], legend?: [string, string][]}} PngExtras
 * `texts`: DOM text shown over the canvas (the IAT axis's decade labels); `legend`: the
 * series as [label, color] pairs.
 */

/**
 * The chart as a PNG data URL that stands alone in a paper: its title above, the canvas on
 * the theme's background (a bare canvas is transparent: a dark theme's light text vanished
 * on a white page), the DOM text drawn over it where the page shows it (the IAT chart's PNG
 * had no x labels) and a legend strip below (the series' names are DOM, so a two-line
 * chart's PNG did not say which line was which).
 * @param {HTMLCanvasElement} src
 * @param {string} title
 * @param {PngExtras} extras
 * @returns {string}
 */
function chartPng(src, title, extras) {
  const box = src.getBoundingClientRect();
  const k = box.width ? src.width / box.width : 1;
  const legend = extras.legend || [];
  const head = Math.round(24 * k), foot = legend.length ? Math.round(22 * k) : 0;
  const out = document.createElement("canvas");
  out.width = src.width;
  out.height = src.height + head + foot;
  const ctx = out.getContext("2d");
  if (!ctx) return src.toDataURL("image/png");
  const ink = themeColor(src, "--jp-ui-font-color1", "#222");
  const font = (/** @type {number} */ px, bold = false) =>
    `${bold ? "600 " : ""}${px * k}px ${getComputedStyle(src).fontFamily || "sans-serif"}`;
  ctx.fillStyle = themeColor(src, "--jp-layout-color0", "#fff");
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.drawImage(src, 0, head);
  ctx.textBaseline = "middle";
  ctx.textAlign = "center";
  ctx.fillStyle = ink;
  ctx.font = font(14, true);
  ctx.fillText(title, out.width / 2, head / 2);
  (extras.texts || []).forEach((el) => {
    const r = el.getBoundingClientRect();
    const css = getComputedStyle(el);
    ctx.font = `${parseFloat(css.fontSize || "11") * k}px ${css.fontFamily || "sans-serif"}`;
    ctx.fillStyle = css.color || ink;
    ctx.fillText(el.textContent || "", (r.left + r.width / 2 - box.left) * k,
                 head + (r.top + r.height / 2 - box.top) * k);
  });
  if (legend.length) {  // swatch + label per series, centred as one row
    ctx.font = font(12);
    ctx.textAlign = "left";
    const gap = 16 * k, sw = 10 * k;
    const widths = legend.map(([label]) => sw + 4 * k + ctx.measureText(label).width);
    let x = Math.max(4 * k, (out.width - widths.reduce((a, w) => a + w + gap, -gap)) / 2);
    const y = src.height + head + foot / 2;
    legend.forEach(([label, color], i) => {
      ctx.fillStyle = color;
      ctx.fillRect(x, y - sw / 2, sw, sw);
      ctx.fillStyle = ink;
      ctx.fillText(label, x + sw + 4 * k, y);
      x += widths[i] + gap;
    });
  }
  return out.toDataURL("image/png");
}
