// ExperimentView front end: runs done of planned, failed runs, calls, tokens; stop.

const TILES = [
  ["runs", "runs done / planned"],
  ["runs_failed", "failed runs"],
  ["llm_calls", "LLM calls"],
  ["tokens", "tokens"],
  ["failed_calls", "failed calls"],
];

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const root = h("div", "al-root al-experiment");
  root.dataset.agentlab = "experiment";
  const head = h("div", "al-head");
  const status = h("span", "al-status");
  const buttons = h("span", "al-buttons");
  head.append(h("span", "al-title", "Experiment"), status, buttons);
  const noAnswer = h("div", "al-error al-noanswer");
  const press = sender(model, noAnswer, root);
  const stop = /** @type {HTMLButtonElement} */ (h("button", "al-btn", "stop"));
  stop.dataset.action = "stop";
  stop.addEventListener("click", () => press({ type: "control", action: "stop" }, "stop"));
  buttons.append(stop);
  const savedNote = h("div", "al-note al-savednote");
  const state = h("div", "al-state");
  const { row: tiles, val } = statTiles(TILES);
  const err = h("div", "al-error");
  root.append(head, noAnswer, savedNote, state, tiles, err);
  el.append(root);
  let saved = false;  // no kernel object behind it: a saved copy, a restart (watchSaved below)

  const update = () => {
    const s = model.get("summary") || {};
    const planned = s.runs_planned === null || s.runs_planned === undefined
      ? "–" : fmt(s.runs_planned, 0);
    val.runs.textContent = fmt(s.runs_done, 0) + " / " + planned;
    for (const key of ["runs_failed", "llm_calls", "tokens", "failed_calls"]) {
      val[key].textContent = fmt(s[key], 1);
    }
    const st = String(model.get("status") || "");
    status.textContent = st;
    root.dataset.status = st;
    root.dataset.runsDone = String(s.runs_done ?? "");
    const enabled = new Set(model.get("enabled") || []);
    buttons.style.display = model.get("controls") ? "" : "none";
    stop.disabled = saved || !enabled.has("stop");
    state.textContent = String(model.get("state_line") || "");
    err.textContent = String(model.get("error") || "");
  };
  const off = onTraits(model, ["summary", "status", "controls", "enabled", "state_line", "error"],
    update);
  // a saved copy's button has no kernel object behind it: say so before any press
  const unwatch = watchSaved(el, head, root, model, (now, note) => {
    saved = now;
    savedNote.textContent = now ? note : "";
    update();
  });
  update();
  return () => { off(); unwatch(); root.remove(); };
}

export default { render };
