// ConversationView front end: hub tabs, agent/role filters, search, compact blocks,
// span details. Every piece of message data goes through textContent (see _common.js).

const MAX_DOM = 400;

/**
 * @typedef {{k: number, msg_id: string, sender: string, receivers: string[], hub: string,
 *   run: string, role: string, content: string, blocks: {kind: string, name: string, text: string}[],
 *   tick: number|null, ts: number|null, span_id: string, trace_id: string}} Message
 */

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const root = h("div", "al-root al-conv");
  root.dataset.agentlab = "conversation";
  const head = h("div", "al-head");
  head.append(h("span", "al-title", "Conversation"));
  const count = h("span", "al-status");
  head.append(count);
  const hubs = h("div", "al-hubs");
  const bar = h("div", "al-toolbar");
  const sender = /** @type {HTMLSelectElement} */ (h("select", "al-filter-sender"));
  const role = /** @type {HTMLSelectElement} */ (h("select", "al-filter-role"));
  const search = /** @type {HTMLInputElement} */ (h("input", "al-search"));
  search.type = "search";
  search.placeholder = "search";
  bar.append(sender, role, search);
  const list = h("div", "al-msgs");
  const span = h("pre", "al-span");
  span.hidden = true;
  root.append(head, hubs, bar, list, span);
  el.append(root);

  /** @type {{hub: string, sender: string, role: string, q: string}} */
  const f = { hub: "", sender: "", role: "", q: "" };
  /** @type {Message[]} */
  let msgs = [];
  let lastShownK = -1;
  let shown = 0;

  /** @param {Message} m */
  const passes = (m) =>
    (!f.hub || m.hub === f.hub) &&
    (!f.sender || m.sender === f.sender || (m.receivers || []).includes(f.sender)) &&
    (!f.role || m.role === f.role) &&
    (!f.q || (m.content + " " + m.sender + " " + (m.run || "") + " " +
      m.blocks.map((b) => b.text).join(" ")).toLowerCase().includes(f.q));

  /** @param {Message} m */
  const card = (m) => {
    const c = h("div", "al-msg");
    c.dataset.k = String(m.k);
    c.dataset.role = m.role;
    const meta = h("div", "al-meta");
    // an experiment's runs (interleaved when several run at a time): whose message it is
    if (m.run && ((model.get("facets") || {}).runs || 0) > 1) meta.append(h("span", "al-run", m.run));
    meta.append(
      h("span", "al-tick", m.tick === null || m.tick === undefined ? "" : "t" + m.tick),
      h("span", "al-sender", m.sender),
      h("span", "al-arrow", m.receivers && m.receivers.length ? "→ " + m.receivers.join(", ") : ""),
      h("span", "al-role", m.role),
      h("span", "al-hub", m.hub),
    );
    if (m.span_id || m.msg_id) {
      const a = /** @type {HTMLButtonElement} */ (h("button", "al-link", "span"));
      a.addEventListener("click", () =>
        model.send({ type: "span", span_id: m.span_id, msg_id: m.msg_id }));
      meta.append(a);
    }
    c.append(meta, h("div", "al-content", m.content));
    for (const b of m.blocks || []) {
      const d = h("details", "al-block");
      d.append(h("summary", "", b.kind + (b.name ? " " + b.name : "")), h("pre", "", b.text));
      c.append(d);
    }
    return c;
  };

  const setOptions = (/** @type {HTMLSelectElement} */ sel, /** @type {string[]} */ values,
    /** @type {string} */ label) => {
    const cur = sel.value;
    const want = ["", ...values];
    if (sel.options.length === want.length &&
        want.every((v, i) => sel.options[i].value === v)) return;
    sel.replaceChildren();
    for (const v of want) {
      const o = /** @type {HTMLOptionElement} */ (h("option", "", v || label));
      o.value = v;
      sel.append(o);
    }
    sel.value = want.includes(cur) ? cur : "";
  };

  const renderHubs = () => {
    const fac = model.get("facets") || {};
    const counts = fac.hubs || {};
    hubs.replaceChildren();
    const names = ["", ...Object.keys(counts)];
    for (const name of names) {
      const n = name ? counts[name] : model.get("total");
      const b = h("button", "al-hub-btn" + (f.hub === name ? " al-on" : ""),
        (name || "all") + " (" + n + ")");
      b.dataset.hub = name;
      b.addEventListener("click", () => { f.hub = name; renderHubs(); rerender(); });
      hubs.append(b);
    }
    setOptions(sender, fac.senders || [], "all agents");
    setOptions(role, fac.roles || [], "all roles");
  };

  const append = (/** @type {Message[]} */ items) => {
    // follow the newest message only if the reader is already at the bottom
    const atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 30;
    for (const m of items) {
      lastShownK = Math.max(lastShownK, m.k);
      if (!passes(m)) continue;
      list.append(card(m));
      shown += 1;
    }
    while (list.childElementCount > MAX_DOM && list.firstChild) list.firstChild.remove();
    if (atEnd) list.scrollTop = list.scrollHeight;
    root.dataset.shown = String(shown);
  };

  const rerender = () => {
    list.replaceChildren();
    shown = 0;
    lastShownK = -1;
    append(msgs);
  };

  const update = () => {
    msgs = mergeJournal(model.get("msgs_base") || [], model.get("msgs_delta") || [],
      (m) => m.k);
    if (msgs.length > 2000) msgs = msgs.slice(-2000);
    root.dataset.total = String(model.get("total") || 0);
    root.dataset.loaded = String(msgs.length);
    count.textContent = String(model.get("total") || 0) + " messages";
    renderHubs();
    const first = msgs.length ? msgs[0].k : 0;
    if (lastShownK >= 0 && first > lastShownK + 1) rerender(); // history trimmed: redraw
    else append(msgs.filter((m) => m.k > lastShownK));
  };

  const showSpan = () => {
    const d = model.get("span_detail") || {};
    if (!d.query) return;
    span.hidden = false;
    span.textContent = d.found ? d.text : "no span found for " + d.query;
  };

  sender.addEventListener("change", () => { f.sender = sender.value; rerender(); });
  role.addEventListener("change", () => { f.role = role.value; rerender(); });
  search.addEventListener("input", () => { f.q = search.value.toLowerCase(); rerender(); });
  const off = onTraits(model, ["msgs_base", "msgs_delta", "facets", "total"], update);
  const offSpan = onTraits(model, ["span_detail"], showSpan);
  update();
  showSpan();
  const unwatch = watchSaved(el, head, root, model);
  return () => { off(); offSpan(); unwatch(); root.remove(); };
}

export default { render };
