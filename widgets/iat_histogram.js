// IATHistogram front end: log-binned inter-arrival histogram per group (uPlot, log x axis),
// the stated burst threshold as a dashed line, optional fitted densities (dashed), and a
// legend with hovered values that toggles groups.

/**
 * The x range worth drawing: from the decade below the first non-empty bin to the decade
 * above the last one (the whole range when nothing is counted yet).
 * @param {number[]} edges
 * @param {Float64Array[]} counts
 * @returns {[number, number]}
 */
function dataRange(edges, counts) {
  let first = -1, last = -1;
  counts.forEach((row) => row.forEach((c, i) => {
    if (c > 0) { if (first < 0 || i < first) first = i; if (i > last) last = i; }
  }));
  if (first < 0) return [edges[0], edges[edges.length - 1]];
  const lo = Math.pow(10, Math.floor(Math.log10(edges[first]) + 1e-9));
  const hi = Math.pow(10, Math.ceil(Math.log10(edges[last + 1]) - 1e-9));
  return [Math.max(lo, edges[0]), Math.min(Math.max(hi, lo * 100), edges[edges.length - 1])];
}

/**
 * Lay the x tick labels out as DOM text under the plot (the decades and short labels come
 * from Python: agentlab.core.axes.log_time_ticks). A label that would come closer than
 * 6 px to the one kept before it is dropped, every k-th kept, so they never overlap at any
 * width.
 * @param {any} u  the uPlot chart
 * @param {HTMLElement} layer
 * @param {[number, string][]} ticks
 */
function layoutTicks(u, layer, ticks) {
  const [lo, hi] = [u.scales.x.min, u.scales.x.max];
  const shown = ticks.filter(([v]) => v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9));
  layer.replaceChildren();
  const spans = shown.map(([v, label]) => {
    const s = h("span", "al-xtick", label);
    s.style.left = u.valToPos(v, "x") + "px";
    layer.append(s);
    return s;
  });
  const boxes = spans.map((s) => s.getBoundingClientRect());
  // not laid out (a hidden output, a theme's styles being swapped): nothing to measure, so
  // nothing is dropped; the next draw thins them (it once kept only "100 µs")
  if (boxes.some((b) => !b.width)) return shown.map(([v]) => v);
  for (let k = 1; k <= spans.length; k++) {
    const keep = spans.map((_, i) => i % k === 0);
    let prev = -1, ok = true;
    keep.forEach((kp, i) => {
      if (!kp) return;
      if (prev >= 0 && boxes[i].left - boxes[prev].right < 6) ok = false;
      prev = i;
    });
    if (ok || k === spans.length) {
      spans.forEach((s, i) => { if (!keep[i]) s.remove(); });
      break;
    }
  }
  return shown.map(([v]) => v);
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
  /** @type {[number, number]} */
  let xRange = [1e-4, 1e3];
  const tickLayer = h("div", "al-xticks");
  const chartWidth = () => Math.max(260, Math.min(1200, (box.clientWidth || root.clientWidth || 640) - 4));
  /** @param {number} lo @param {number} hi */
  const decadesIn = (lo, hi) => (model.get("x_ticks") || [])
    .map((/** @type {[number, string]} */ t) => t[0])
    .filter((/** @type {number} */ v) => v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9));
  // follow the output's width (a narrow window, a side panel opened): redraw the ticks too
  const resize = new ResizeObserver(() => {
    if (chart && Math.abs(chart.width - chartWidth()) > 2) chart.setSize({ width: chartWidth(), height: 260 });
  });
  resize.observe(root);

  /** @param {string[]} names @param {string[]} fitNames */
  const build = (names, fitNames) => {
    if (chart) chart.destroy();
    const series = [{ label: "gap (s)", value: (/** @type {any} */ _u, /** @type {number} */ v) => v == null ? "–" : fmt(v, 3) + " s" }];
    names.forEach((g, gi) => {
      const color = PALETTE[gi % PALETTE.length];
      series.push({ label: g, stroke: color, fill: color + "22", width: 1.5,
                    paths: U.paths.stepped({ align: 0 }), points: { show: false } });
      fitNames.forEach((f, fi) => series.push({ label: g + " " + f + " fit", stroke: color,
                    width: 1, dash: fi ? [2, 3] : [6, 3], points: { show: false } }));
    });
    const axis = themedAxis();
    chart = new U({
      width: chartWidth(), height: 260,
      scales: { x: { time: false, distr: 3, range: () => xRange },
                y: { range: (/** @type {any} */ _u, /** @type {number} */ _lo, /** @type {number} */ hi) => [0, Math.max(1, hi * 1.05)] } },
      axes: [
        // grid and tick marks at the decades only; the labels are DOM text (layoutTicks)
        { ...axis, label: "gap between LLM call starts", size: 44,
          splits: (/** @type {any} */ u) => decadesIn(u.scales.x.min, u.scales.x.max),
          values: (/** @type {any} */ _u, /** @type {number[]} */ vs) => vs.map(() => "") },
        // counts: whole ticks, short labels (150k, not 150,000, which ran into the title)
        { ...axis, label: "gaps per bin", size: 56, incrs: WHOLE_STEPS,
          values: (/** @type {any} */ _u, /** @type {number[]} */ vs) => vs.map(fmtTick) },
      ],
      series,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      hooks: { draw: [(/** @type {any} */ u) => {
        if (u.over && !tickLayer.isConnected) u.over.append(tickLayer);
        root.dataset.xticks = layoutTicks(u, tickLayer, model.get("x_ticks") || []).join(",");
        const c = u.ctx;
        c.save(); c.setLineDash([4, 3]); c.lineWidth = 1;
        c.strokeStyle = themeColor(u.root, "--jp-ui-font-color2", "#555");
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
    box.append(exportButton(() => chart.ctx.canvas, "Inter-arrival times", () => ({
      texts: [...tickLayer.querySelectorAll(".al-xtick")],
      legend: names.map((g, gi) => [g, PALETTE[gi % PALETTE.length]]),
    })));
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
    // "by topology" / "by stage"; ungrouped ("all") says nothing ("71 calls by all" read oddly)
    const by = String(model.get("group_by") || "all");
    info.textContent = (model.get("calls") || 0) + " calls" + (by === "all" ? "" : " by " + by)
      + (typeof t0 === "number" ? " · burst threshold " + fmt(t0, 3) + " s (dashed)" : "");
    const key = groups.join("\u0000") + "|" + fitNames.join(",");
    if (key !== shape) { build(groups, fitNames); shape = key; }
    if (!nb) return;
    xRange = dataRange(edges, counts);
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
  const unwatch = onThemeChange(() => { if (chart) chart.redraw(false, true); });
  const unsaved = watchSaved(el, head, root, model);
  return () => { off(); unwatch(); unsaved(); resize.disconnect(); if (chart) chart.destroy(); root.remove(); };
}

export default { render };
