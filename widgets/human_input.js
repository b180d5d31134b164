// HumanInput front end: one form per pending request, generated from its JSON schema.
// Typed-in values survive frames: a card is rebuilt only when its request appears.

/**
 * Build an input for a schema; returns the element and a getter for its value.
 * @param {any} schema
 * @param {string} name
 * @returns {{el: HTMLElement, get: () => unknown}}
 */
function field(schema, name) {
  schema = schema || {};
  const wrap = h("label", "al-field");
  if (name) wrap.append(h("span", "al-label", name));
  if (Array.isArray(schema.enum)) {
    const sel = /** @type {HTMLSelectElement} */ (h("select", "al-answer"));
    schema.enum.forEach((/** @type {unknown} */ v, /** @type {number} */ i) => {
      const o = /** @type {HTMLOptionElement} */ (h("option", "", String(v)));
      o.value = String(i);
      sel.append(o);
    });
    wrap.append(sel);
    return { el: wrap, get: () => schema.enum[Number(sel.value)] };
  }
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  if (type === "object" && schema.properties) {
    const fs = h("fieldset", "al-object");
    /** @type {[string, () => unknown][]} */
    const getters = [];
    for (const [k, sub] of Object.entries(schema.properties)) {
      const f = field(sub, k);
      getters.push([k, f.get]);
      fs.append(f.el);
    }
    wrap.append(fs);
    return { el: wrap, get: () => Object.fromEntries(getters.map(([k, g]) => [k, g()])) };
  }
  if (type === "boolean") {
    const cb = /** @type {HTMLInputElement} */ (h("input", "al-answer"));
    cb.type = "checkbox";
    wrap.append(cb);
    return { el: wrap, get: () => cb.checked };
  }
  if (type === "integer" || type === "number") {
    const inp = /** @type {HTMLInputElement} */ (h("input", "al-answer"));
    inp.type = "number";
    if (type === "integer") inp.step = "1";
    wrap.append(inp);
    return { el: wrap, get: () => (type === "integer" ? parseInt(inp.value, 10) : parseFloat(inp.value)) };
  }
  const ta = /** @type {HTMLTextAreaElement} */ (h("textarea", "al-answer"));
  ta.rows = 2;
  wrap.append(ta);
  return { el: wrap, get: () => ta.value };
}

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const root = h("div", "al-root al-human");
  root.dataset.agentlab = "human";
  const head = h("div", "al-head");
  const count = h("span", "al-status");
  head.append(h("span", "al-title", "Human input"), count);
  const list = h("div", "al-requests");
  const err = h("div", "al-error");
  const done = h("details", "al-answered");
  const doneList = h("div");
  done.append(h("summary", "", "answered"), doneList);
  const noAnswer = h("div", "al-error al-noanswer");
  const press = sender(model, noAnswer, root);
  root.append(head, noAnswer, err, list, done);
  el.append(root);
  /** @type {Map<string, HTMLElement>} */
  const cards = new Map();

  const update = () => {
    const pending = model.get("pending") || [];
    const ids = new Set(pending.map((/** @type {any} */ r) => r.request_id));
    for (const [id, c] of cards) if (!ids.has(id)) { c.remove(); cards.delete(id); }
    for (const r of pending) {
      if (cards.has(r.request_id)) continue;
      const c = h("form", "al-request");
      c.dataset.requestId = r.request_id;
      const meta = h("div", "al-meta");
      meta.append(h("span", "al-sender", r.agent_id || "agent"),
        h("span", "al-tick", r.tick === null || r.tick === undefined ? "" : "t" + r.tick));
      const f = field(r.schema, "");
      const submit = h("button", "al-btn al-submit", "answer");
      submit.setAttribute("type", "submit");
      c.append(meta, h("div", "al-question", r.question), f.el, submit);
      c.addEventListener("submit", (ev) => {
        ev.preventDefault();
        press({ type: "answer", request_id: r.request_id, answer: f.get() }, "answer");
      });
      cards.set(r.request_id, c);
      list.append(c);
    }
    root.dataset.pending = String(pending.length);
    count.textContent = pending.length + " pending";
    err.textContent = String(model.get("error") || "");
    doneList.replaceChildren();
    for (const a of model.get("answered") || []) {
      const row = h("div", "al-done");
      row.append(h("span", "al-sender", a.agent_id), h("span", "al-question", a.question),
        h("span", "al-answer-text", a.answer));
      doneList.append(row);
    }
    root.dataset.answered = String((model.get("answered") || []).length);
  };
  const off = onTraits(model, ["pending", "answered", "error"], update);
  update();
  const unwatch = watchSaved(el, head, root, model);
  return () => { off(); unwatch(); root.remove(); };
}

export default { render };
