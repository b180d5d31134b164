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

/** ms a press waits for the kernel's ack before the view says nothing answered */
const NO_ANSWER_MS = 4000;

/**
 * `send(content, what)`: `model.send(content)`, watched. Every message a live view sends is
 * acked by the kernel (`LiveWidget._dispatch_msg`); if no ack comes within NO_ANSWER_MS,
 * `note` says so and `root.dataset.noAnswer` names the press — a saved copy of the view in
 * a reopened notebook has no kernel object behind it, so its buttons would otherwise do
 * nothing, silently. A late ack (a busy kernel) clears the note.
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
    model.send(content);
    timer = setTimeout(() => {
      timer = null;
      note.textContent = "No answer from the kernel to " + what + ": it is busy or gone, or "
        + "this view is a saved copy (a reopened notebook). Run the cell again to control a run.";
      root.dataset.noAnswer = what;
    }, NO_ANSWER_MS);
  };
}

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/**
 * A uPlot line chart with axis titles (units included) and a legend that shows the
 * hovered values. `series` are [label, color] pairs; data is [xs, ...ys].
 * @param {HTMLElement} parent
 * With `empty`, the chart shows that sentence over the plot while it has fewer than
 * `minPoints` (default 2) finite points in every series: an empty state, not a blank box.
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
  const axis = { stroke: "#555", grid: { stroke: "#eee", width: 1 }, ticks: { stroke: "#ccc" } };
  const opts = {
    title: spec.title,
    width: spec.width || 420,
    height: spec.height || 190,
    scales: { x: { time: false } },
    axes: [
      { ...axis, label: spec.x,
        // whole ticks get whole steps only (no tick marks between 1 and 2)
        incrs: spec.xInt ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 1e4, 2e4, 5e4, 1e5] : undefined,
        values: spec.xInt
        ? (/** @type {any} */ _u, /** @type {number[]} */ vs) => vs.map((v) => Number.isInteger(v) ? String(v) : "")
        : undefined },
      // short tick values (180k, not 180,000) so they never run into the axis title
      { ...axis, label: spec.y, size: 60,
        values: (/** @type {any} */ _u, /** @type {number[]} */ vs) => vs.map((v) => fmt(v, 0)) },
    ],
    series: [{ label: spec.x }].concat(spec.series.map(([label, color]) => ({
      label, stroke: color, width: 1.5, spanGaps: false,
    }))),
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
  const empty = [[], ...spec.series.map(() => [])];
  const chart = new U(opts, empty, box);
  const note = h("div", "al-empty");
  note.style.display = "none";
  if (chart.over) chart.over.append(note);
  box.append(exportButton(() => chart.ctx.canvas, spec.title));
  return {
    set: (data) => {
      chart.setData(data);
      const most = Math.max(0, ...data.slice(1).map((ys) => ys.filter((v) => v !== null && Number.isFinite(v)).length));
      const msg = spec.empty ? spec.empty() : "";
      note.textContent = msg;
      note.style.display = msg && most < (spec.minPoints || 2) ? "" : "none";
      box.dataset.empty = note.style.display === "none" ? "" : msg;
    },
    destroy: () => chart.destroy(),
  };
}

/**
 * A small "PNG" button that downloads a chart's canvas (a transient link, removed at once:
 * the widget DOM never holds a link).
 * @param {() => HTMLCanvasElement} canvas
 * @param {string} name
 */
function exportButton(canvas, name) {
  const b = /** @type {HTMLButtonElement} */ (h("button", "al-btn al-export", "PNG"));
  b.title = "download this chart as PNG";
  b.addEventListener("click", () => {
    const a = document.createElement("a");
    a.href = canvas().toDataURL("image/png");
    a.download = "agentlab-" + name.toLowerCase().replace(/[^a-z0-9]+/g, "-") + ".png";
    document.body.append(a);
    a.click();
    a.remove();
  });
  return b;
}
