// IATHistogram front end: log-binned inter-arrival histogram per group on a canvas,
// burst-threshold lines, optional fitted densities, a legend that toggles groups.

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const root = h("div", "al-root al-iat");
  root.dataset.agentlab = "iat";
  const head = h("div", "al-head");
  const title = h("span", "al-title", "Inter-arrival times");
  const info = h("span", "al-status");
  head.append(title, info);
  const canvas = /** @type {HTMLCanvasElement} */ (h("canvas", "al-iat-canvas"));
  canvas.width = 640; canvas.height = 240;
  const legend = h("div", "al-legend");
  root.append(head, canvas, legend);
  el.append(root);
  /** @type {Set<string>} */
  const hidden = new Set();

  const draw = () => {
    const edges = model.get("edges") || [];
    const nb = Math.max(edges.length - 1, 0);
    const groups = model.get("groups") || [];
    const counts = f64rows(model.get("counts"), nb);
    const thr = model.get("thresholds") || [];
    const fitNames = model.get("fit_names") || [];
    const fits = f64rows(model.get("fit_counts"), nb);
    const totals = model.get("totals") || [];
    const total = totals.reduce((a, b) => a + b, 0);
    root.dataset.calls = String(model.get("calls") || 0);
    root.dataset.iats = String(total);
    root.dataset.groups = String(groups.length);
    info.textContent = (model.get("calls") || 0) + " calls by " + (model.get("group_by") || "");
    const ctx = canvas.getContext("2d");
    if (!ctx || !nb) return;
    const W = canvas.width, H = canvas.height, L = 40, B = 22;
    ctx.clearRect(0, 0, W, H);
    let ymax = 1;
    counts.forEach((row, gi) => {
      if (!hidden.has(groups[gi])) for (const v of row) ymax = Math.max(ymax, v);
    });
    const x = (/** @type {number} */ i) => L + (i / nb) * (W - L - 5);
    const y = (/** @type {number} */ v) => H - B - (v / ymax) * (H - B - 8);
    ctx.strokeStyle = "#999"; ctx.fillStyle = "#555"; ctx.font = "10px sans-serif";
    ctx.beginPath(); ctx.moveTo(L, H - B); ctx.lineTo(W - 5, H - B); ctx.stroke();
    for (let i = 0; i <= nb; i++) {
      const lg = Math.log10(edges[i]);
      if (Math.abs(lg - Math.round(lg)) < 1e-9) ctx.fillText("1e" + Math.round(lg) + "s", x(i) - 10, H - 6);
    }
    ctx.fillText(fmt(ymax, 0), 2, 12);
    counts.forEach((row, gi) => {
      if (hidden.has(groups[gi])) return;
      const color = PALETTE[gi % PALETTE.length];
      ctx.strokeStyle = color; ctx.lineWidth = 1.5;
      ctx.beginPath(); ctx.moveTo(x(0), y(0));
      row.forEach((v, i) => { ctx.lineTo(x(i), y(v)); ctx.lineTo(x(i + 1), y(v)); });
      ctx.lineTo(x(nb), y(0)); ctx.stroke();
      ctx.globalAlpha = 0.15; ctx.fillStyle = color; ctx.fill(); ctx.globalAlpha = 1;
      const t = thr[gi];
      if (typeof t === "number") {
        const ti = (Math.log10(t) - Math.log10(edges[0])) / (Math.log10(edges[nb]) - Math.log10(edges[0])) * nb;
        ctx.setLineDash([4, 3]); ctx.beginPath();
        ctx.moveTo(x(ti), 4); ctx.lineTo(x(ti), H - B); ctx.stroke(); ctx.setLineDash([]);
      }
      fitNames.forEach((_, fi) => {
        const fr = fits[gi * fitNames.length + fi];
        if (!fr) return;
        ctx.setLineDash(fi ? [1, 2] : [6, 2]); ctx.beginPath();
        fr.forEach((v, i) => { const xc = (x(i) + x(i + 1)) / 2; if (i) ctx.lineTo(xc, y(v)); else ctx.moveTo(xc, y(v)); });
        ctx.stroke(); ctx.setLineDash([]);
      });
    });
    legend.replaceChildren();
    groups.forEach((g, gi) => {
      const item = h("button", "al-legend-item" + (hidden.has(g) ? " al-off" : ""));
      const sw = h("span", "al-swatch");
      sw.style.background = PALETTE[gi % PALETTE.length];
      const t = thr[gi];
      item.append(sw, h("span", "", g), h("span", "al-label",
        " " + (totals[gi] || 0) + " gaps" + (typeof t === "number" ? ", burst < " + fmt(t, 3) + "s" : "")));
      item.dataset.group = g;
      item.addEventListener("click", () => { if (hidden.has(g)) hidden.delete(g); else hidden.add(g); draw(); });
      legend.append(item);
    });
  };
  const off = onTraits(model, ["counts", "groups", "thresholds", "fit_counts", "edges", "calls"], draw);
  draw();
  return () => { off(); root.remove(); };
}

export default { render };
