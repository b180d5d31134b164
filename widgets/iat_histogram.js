// IATHistogram front end: log-binned inter-arrival histogram per group (uPlot, log x axis),
// the stated burst threshold as a dashed line, optional fitted densities (dashed), and a
// legend with hovered values that toggles groups.

/**
 * Label a log-axis tick only at powers of ten, with a unit ("10 ms", "1 s").
 * @param {number} v
 */
function decade(v) {
  const lg = Math.log10(v);
  if (Math.abs(lg - Math.round(lg)) > 1e-9) return "";
  if (v >= 1) return v + " s";
  if (v >= 1e-3) return Math.round(v * 1e3) + " ms";
  return Math.round(v * 1e6) + " µs";
}

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const root = h("div", "al-root al-iat");
  root.dataset.agentlab = "iat";
  const head = h("div", "al-head");
  const title = h("span", "al-title", "Inter-arrival times");
  const info = h("span", "al-status");
  head.append(title, info);
  const box = h("div", "al-chart");
  const legend = h("div", "al-legend");
  root.append(head, box, legend);
  el.append(root);
  // @ts-ignore uPlot is the vendored global (widgets/vendor)
  const U = uPlot;
  /** @type {any} */
  let chart = null;
  let shape = "";
  /** @type {(number | null)[]} */
  let thr = [];

  /** @param {string[]} names @param {string[]} fitNames */
  const build = (names, fitNames) => {
    if (chart) chart.destroy();
    const series = [{ label: "gap (s)", value: (/** @type {any} */ _u, /** @type {number} */ v) => v == null ? "–" : fmt(v, 3) + " s" }];
    names.forEach((g, gi) => {
      const color = PALETTE[gi % PALETTE.length];
      series.push({ label: g, stroke: color, fill: color + "22", width: 1.5,
                    paths: U.paths.stepped({ align: 0 }) });
      fitNames.forEach((f, fi) => series.push({ label: g + " " + f + " fit", stroke: color,
                    width: 1, dash: fi ? [2, 3] : [6, 3], points: { show: false } }));
    });
    const axis = { stroke: "#555", grid: { stroke: "#eee", width: 1 }, ticks: { stroke: "#ccc" } };
    chart = new U({
      width: 640, height: 260,
      scales: { x: { time: false, distr: 3 }, y: { range: (/** @type {any} */ _u, /** @type {number} */ _lo, /** @type {number} */ hi) => [0, Math.max(1, hi * 1.05)] } },
      axes: [
        { ...axis, label: "gap between LLM call starts (log scale)",
          values: (/** @type {any} */ _u, /** @type {number[]} */ vs) => vs.map(decade) },
        { ...axis, label: "gaps per bin", size: 56 },
      ],
      series,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      hooks: { draw: [(/** @type {any} */ u) => {
        const c = u.ctx;
        c.save(); c.setLineDash([4, 3]); c.strokeStyle = "#555"; c.lineWidth = 1;
        thr.forEach((t) => {
          if (typeof t !== "number") return;
          const x = u.valToPos(t, "x", true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
          c.beginPath(); c.moveTo(x, u.bbox.top); c.lineTo(x, u.bbox.top + u.bbox.height); c.stroke();
        });
        c.restore();
      }] },
    }, [[], ...series.slice(1).map(() => [])], box);
    box.querySelectorAll(".al-export").forEach((b) => b.remove());
    box.append(exportButton(() => chart.ctx.canvas, "inter-arrival times"));
  };

  const draw = () => {
    const edges = model.get("edges") || [];
    const nb = Math.max(edges.length - 1, 0);
    const groups = model.get("groups") || [];
    const counts = f64rows(model.get("counts"), nb);
    thr = model.get("thresholds") || [];
    const fitNames = model.get("fit_names") || [];
    const fits = f64rows(model.get("fit_counts"), nb);
    const totals = model.get("totals") || [];
    const total = totals.reduce((/** @type {number} */ a, /** @type {number} */ b) => a + b, 0);
    root.dataset.calls = String(model.get("calls") || 0);
    root.dataset.iats = String(total);
    root.dataset.groups = String(groups.length);
    const t0 = thr.find((t) => typeof t === "number");
    info.textContent = (model.get("calls") || 0) + " calls by " + (model.get("group_by") || "")
      + (typeof t0 === "number" ? " · burst threshold " + fmt(t0, 3) + " s (dashed)" : "");
    const key = groups.join("\u0000") + "|" + fitNames.join(",");
    if (key !== shape) { build(groups, fitNames); shape = key; }
    if (!nb) return;
    // a step per bin starting at its left edge, plus the last edge to close the step
    const xs = edges.slice();
    const data = [xs];
    groups.forEach((_, gi) => {
      const row = counts[gi] ? Array.from(counts[gi]) : [];
      data.push([...row, row.length ? row[row.length - 1] : null]);
      fitNames.forEach((_, fi) => {
        const fr = fits[gi * fitNames.length + fi];
        data.push(fr ? [...Array.from(fr), null] : xs.map(() => null));
      });
    });
    chart.setData(data);
    legend.replaceChildren();
    groups.forEach((g, gi) => {
      const t = thr[gi];
      legend.append(h("span", "al-label", g + ": " + (totals[gi] || 0) + " gaps"
        + (typeof t === "number" ? ", burst < " + fmt(t, 3) + " s" : "")));
    });
  };
  const off = onTraits(model, ["counts", "groups", "thresholds", "fit_counts", "edges", "calls"], draw);
  draw();
  return () => { off(); if (chart) chart.destroy(); root.remove(); };
}

export default { render };
