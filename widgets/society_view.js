// SocietyView front end: stat tiles, charts, start/pause/resume/stop, the tick in progress.

// the rates are whole-run means (ticks' work over their clock seconds), as the static
// snapshot's tiles: the last tick's rate here made an export read other numbers under the
// same label (that rate is the Rates chart's last point)
const STATS = [
  ["tick", "tick", 0],
  ["agents", "agents", 0],
  ["mean_steps_per_s", "agent-steps/s (clock)", 1],
  ["mean_calls_per_s", "LLM calls/s (clock)", 1],
  ["total_tokens", "tokens", 1],
  ["total_errors", "step errors", 0],
  ["aimd_limit", "AIMD limit", 0],
  ["in_flight", "in flight", 0],
];
// charts: [title, y-axis title with unit, [[series column, legend label], ...]], in the
// order of STATIC_CHARTS (agentlab/viz/_society_model.py), whose empty states the
// `chart_empty` trait carries
/** @type {[string, string, [string, string][]][]} */
const CHARTS = [
  ["Rates", "per clock second", [["calls_per_s", "LLM calls/s"], ["steps_per_s", "agent-steps/s"]]],
  ["Concurrency", "LLM calls", [["aimd_limit", "AIMD limit"], ["in_flight", "in flight at commit"]]],
  ["Tokens", "tokens per tick", [["tokens", "tokens"]]],
  ["Latency", "seconds", [["latency_mean_s", "mean LLM call latency"]]],
];

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const root = h("div", "al-root al-society");
  root.dataset.agentlab = "society";
  const head = h("div", "al-head");
  const title = h("span", "al-title", "Society");
  const status = h("span", "al-status");
  const buttons = h("span", "al-buttons");
  head.append(title, status, buttons);
  const noAnswer = h("div", "al-error al-noanswer");
  const press = sender(model, noAnswer, root);
  /** @type {Record<string, HTMLButtonElement>} */
  const btn = {};
  for (const action of ["start", "pause", "resume", "stop"]) {
    const b = /** @type {HTMLButtonElement} */ (h("button", "al-btn", action));
    b.dataset.action = action;
    b.addEventListener("click", () => press({ type: "control", action }, action));
    btn[action] = b;
    buttons.append(b);
  }
  const { row: tiles, val } = statTiles(STATS);
  const sparks = h("div", "al-sparks");
  const state = h("div", "al-state");
  const errline = h("div", "al-errline");
  const prog = h("div", "al-progress");
  const err = h("div", "al-error");
  const savedNote = h("div", "al-note al-savednote");
  root.append(head, noAnswer, savedNote, state, prog, tiles, errline, sparks, err);
  el.append(root);
  let saved = false;  // no kernel object behind it: a saved copy, a restart (watchSaved below)
  let gone = false;  // the kernel restarted under the drawn view
  // one tick is a point (drawn as a dot): a chart is empty only with none, and says why
  // (the Python snapshot's words: "no ticks yet" over the tick-1 point was wrong)
  const charts = CHARTS.map(([title, y, series], ci) => lineChart(sparks, {
    title, x: "tick", y, xInt: true, minPoints: 1,
    empty: () => String((model.get("chart_empty") || [])[ci] || "no ticks yet"),
    series: series.map(([, label], i) => /** @type {[string, string]} */ ([label, PALETTE[i]])),
  }));

  const update = () => {
    const cols = model.get("series_columns") || [];
    const ncol = cols.length;
    const kIdx = cols.indexOf("k");
    const rows = mergeJournal(
      f64rows(model.get("series_base"), ncol),
      f64rows(model.get("series_delta"), ncol),
      (r) => r[kIdx],
    );
    const s = model.get("summary") || {};
    for (const [key, , digits] of STATS) val[key].textContent = fmt(s[key], Number(digits));
    // (the status the kernel last sent is stale once it is gone: "running" with no run)
    status.textContent = gone ? "disconnected" : String(model.get("status") || "");
    status.dataset.status = String(model.get("status") || "");
    const controls = !!model.get("controls");
    const enabled = new Set(model.get("enabled") || []);
    buttons.style.display = controls ? "" : "none";
    for (const [action, b] of Object.entries(btn)) b.disabled = saved || !enabled.has(action);
    root.dataset.status = String(model.get("status") || "");
    root.dataset.enabled = [...enabled].join(",");
    const p = model.get("progress") || {};
    if (p.tick !== undefined && !saved) {
      prog.textContent = "tick " + p.tick + " in progress: " + fmt(p.llm_calls ?? null, 0)
        + " LLM calls done, " + fmt(p.in_flight ?? null, 0) + " in flight, "
        + fmt(p.elapsed_s ?? null, 1) + " s";
      root.dataset.progressCalls = String(p.llm_calls ?? "");
    } else {
      prog.textContent = "";
    }
    err.textContent = String(model.get("error") || "");
    const line = String(model.get("state_line") || "");
    state.textContent = gone && line ? "last heard from the kernel: " + line : line;
    const errs = String(model.get("errors_line") || "");
    errline.textContent = errs ? "errors: " + errs : "";
    root.dataset.points = String(rows.length);
    root.dataset.tick = String(s.tick ?? "");
    const tick = cols.indexOf("tick");
    CHARTS.forEach(([, , series], ci) => {
      const xs = rows.map((r) => r[tick]);
      const ys = series.map(([key]) => {
        const k = cols.indexOf(key);
        return rows.map((r) => (Number.isFinite(r[k]) ? r[k] : null));
      });
      charts[ci].set([xs, ...ys]);
    });
  };
  const off = onTraits(
    model,
    ["summary", "series_base", "series_delta", "status", "controls", "enabled", "progress",
     "error", "state_line", "errors_line"],
    update,
  );
  // a saved copy's buttons have no kernel object behind them: say so before any press
  // (a press would only time out: sender's "No answer" note)
  const unwatch = watchSaved(el, head, root, model, (now, note, lost) => {
    saved = now;
    gone = now && lost;
    savedNote.textContent = now ? note : "";
    update();
  });
  update();
  return () => { off(); unwatch(); charts.forEach((c) => c.destroy()); root.remove(); };
}

export default { render };
