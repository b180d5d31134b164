"""The widgets in a real JupyterLab in headless Chromium (marker ``browser``).

Each test writes a notebook, runs all its cells in the page, and reads what the page saw
from the in-page sampler (``window.__agentlab_history``, see conftest).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Lab, history, open_notebook, screenshot, wait_for

pytestmark = pytest.mark.browser


def _run(lab: Lab, name: str) -> str:
    d = lab.root / "runs" / name
    d.mkdir(parents=True)
    return str(d)


def test_society_streams_ticks_and_reload_shows_full_history(lab: Lab, lab_page: Any) -> None:
    run = _run(lab, "society")
    cells = [
        f"RUN = {run!r}",
        "from agentlab.runtime import Society\n"
        "from agentlab.viz import live\n"
        # 50 ms of real time per tick: the page must see the ticks one by one, however
        # fast sim/instant is on the machine at hand
        "soc = Society.create(RUN, agents=20, llm='sim/instant', seed=0, progress=False,\n"
        "                     tick_seconds=0.05)\n"
        "dash = live(soc, ticks=400)\n"
        "dash",
    ]
    open_notebook(lab_page, lab, "society.ipynb", cells)
    wait_for(lab_page, "society", "Number(d.tick) >= 15", timeout=90)
    ticks = {int(h["tick"]) for h in history(lab_page, "society") if h.get("tick")}
    assert len(ticks) >= 8, f"page saw only ticks {sorted(ticks)}"
    # one histogram: its header counts the calls ("71 calls by all" read oddly)
    head = lab_page.inner_text("[data-agentlab=iat] .al-status")
    assert " calls" in head and " by " not in head, head
    screenshot(lab_page, "society_live")

    # reload mid-run: the saved output re-renders from the kernel's live widget state
    lab_page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    time.sleep(1.0)
    before = max(ticks)
    lab_page.reload(wait_until="domcontentloaded")
    first = wait_for(lab_page, "society", "Number(d.tick) > 0", timeout=90)
    # the first frame after the reload already holds every tick so far
    assert int(first["points"]) >= before, first
    assert int(first["points"]) == int(first["tick"]), first
    wait_for(lab_page, "society", f"Number(d.tick) > {int(first['tick']) + 3}", timeout=60)
    last = history(lab_page, "society")[-1]
    assert int(last["points"]) == int(last["tick"])  # still complete while live
    screenshot(lab_page, "society_after_reload")


def test_topology_experiment_streams_messages_and_iat(lab: Lab, lab_page: Any) -> None:
    run = _run(lab, "topology")
    cells = [
        f"RUN = {run!r}",
        "import asyncio\n"
        "from agentlab.topology import Experiment\n"
        "from agentlab.viz import show\n"
        "dash = show(RUN, group_by='topology')\n"
        "from agentlab.llm import LLMClient\n"
        "llm = LLMClient('sim/instant', overhead_s=0.01)  # 10 ms a call: seconds in all\n"
        "exp = Experiment(topologies=['sequential', 'star'], agents=3, runs=25,\n"
        "                 llm=llm, clock='real', out=RUN, progress=False)\n"
        "task = asyncio.ensure_future(exp.run())\n"
        "dash",
    ]
    open_notebook(lab_page, lab, "topology.ipynb", cells)
    wait_for(lab_page, "iat", "Number(d.groups) >= 2 && Number(d.iats) > 100", timeout=120)
    wait_for(lab_page, "conversation", "Number(d.shown) > 20", timeout=30)
    iats = sorted({int(h["iats"]) for h in history(lab_page, "iat")})
    totals = sorted({int(h["total"]) for h in history(lab_page, "conversation")})
    assert len(iats) >= 4, f"IAT histogram did not grow live: {iats}"
    assert len(totals) >= 4, f"messages did not stream: {totals}"
    text = lab_page.inner_text("[data-agentlab=conversation]")
    assert "expert_1" in text and "discussion" in text
    assert " calls by topology" in lab_page.inner_text("[data-agentlab=iat] .al-status")
    screenshot(lab_page, "topology_live")


def test_human_input_answer_reaches_the_asking_coroutine(lab: Lab, lab_page: Any) -> None:
    run = _run(lab, "human")
    cells = [
        f"RUN = {run!r}",
        "import asyncio, json\n"
        "from agentlab.store.human import ask_user\n"
        "from agentlab.viz import HumanInput\n"
        "SCHEMA = {'type': 'object', 'required': ['vote'], 'properties': {\n"
        "    'vote': {'enum': ['yes', 'no']}, 'reason': {'type': 'string'}}}\n"
        "async def agent():\n"
        "    ans = await ask_user(RUN, 'Adopt the policy?', SCHEMA, agent_id='alice',\n"
        "                         timeout=300)\n"
        "    open(RUN + '/got.json', 'w').write(json.dumps(ans))\n"
        "task = asyncio.ensure_future(agent())\n"
        "w = HumanInput(RUN)\n"
        "w",
    ]
    open_notebook(lab_page, lab, "human.ipynb", cells)
    wait_for(lab_page, "human", "d.pending === '1'", timeout=90)
    # the pending request survives a browser reload (it lives in the log)
    lab_page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    time.sleep(1.0)
    lab_page.reload(wait_until="domcontentloaded")
    wait_for(lab_page, "human", "d.pending === '1'", timeout=90)
    form = lab_page.locator("[data-agentlab=human] form.al-request")
    assert "Adopt the policy?" in form.inner_text()
    form.locator("select").select_option(label="no")
    form.locator("textarea").fill("too costly")
    form.locator("button.al-submit").click()
    wait_for(lab_page, "human", "d.pending === '0' && d.answered === '1'", timeout=30)
    got = Path(run) / "got.json"
    deadline = time.monotonic() + 20
    while not got.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads(got.read_text()) == {"vote": "no", "reason": "too costly"}
    screenshot(lab_page, "human_answered")


PAYLOADS = [
    "<script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    '<svg onload="window.__pwned = 3"></svg>',
    '<a href="javascript:window.__pwned = 4" id="al-bad-link">click</a>',
    '<iframe src="javascript:parent.__pwned = 5"></iframe>',
    '"><img src=x onerror=window.__pwned=6>',
    '<details open ontoggle="window.__pwned = 7">x</details>',
    '<input autofocus onfocus="window.__pwned = 8">',
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__pwned=9>",
    "javascript:window.__pwned = 10",
    '<object data="javascript:window.__pwned = 11"></object>',
    '<video><source onerror="window.__pwned = 12"></video>',
    "{{constructor.constructor('window.__pwned = 13')()}}",
    '<style>@import "javascript:window.__pwned=14";</style>',
]

INERT_CHECK = """() => {
  const LINKY = ['href', 'src', 'srcdoc', 'action', 'formaction', 'xlink:href', 'data'];
  const roots = [...document.querySelectorAll('[data-agentlab]')];
  const bad = [];
  for (const r of roots) {
    r.querySelectorAll('script,img,svg,iframe,object,embed,video,audio,source,math,a,style,'
                       + 'input[autofocus],body').forEach((e) => bad.push(e.tagName));
    r.querySelectorAll('*').forEach((e) => {
      for (const a of e.attributes) {
        if (a.name.startsWith('on') || LINKY.includes(a.name)) bad.push(a.name);
      }
    });
  }
  return {pwned: window.__pwned, bad, text: roots.map((r) => r.textContent).join('\\n')};
}"""


def test_injection_payloads_stay_inert(lab: Lab, lab_page: Any) -> None:
    run = _run(lab, "inject")
    cells = [
        f"RUN = {run!r}\nPAYLOADS = {PAYLOADS!r}",
        "from agentlab.store import get_replay_sink\n"
        "from agentlab.store.human import post_request\n"
        "from agentlab.viz import show\n"
        "sink = get_replay_sink(RUN)\n"
        "rows = [{'msg_id': f'm{i}', 'sender': p, 'receivers': [p], 'hub': p, 'role': p,\n"
        "         'content': p, 'span_id': p, 'tick': i,\n"
        "         'blocks': [{'type': 'tool_use', 'name': p, 'input': {'x': p}}]}\n"
        "        for i, p in enumerate(PAYLOADS)]\n"
        "sink.extend('messages', rows)\n"
        "sink.extend('llm_calls', [{'start': float(i), 'topology': p}\n"
        "                          for i, p in enumerate(PAYLOADS * 2)])\n"
        "sink.flush()\n"
        "for p in PAYLOADS[:4]:\n"
        "    post_request(RUN, p, {'enum': [p, 'ok']}, agent_id='agent')\n"
        "dash = show(RUN)\n"
        "dash",
    ]
    open_notebook(lab_page, lab, "inject.ipynb", cells)
    wait_for(lab_page, "conversation", f"d.shown === '{len(PAYLOADS)}'", timeout=90)
    wait_for(lab_page, "human", "d.pending === '4'", timeout=30)
    # open every collapsed block and click every span link: still nothing may run
    lab_page.evaluate(
        "() => document.querySelectorAll('[data-agentlab] details').forEach(d => d.open = true)"
    )
    lab_page.locator("[data-agentlab=conversation] button.al-link").first.click()
    time.sleep(1.5)
    res = lab_page.evaluate(INERT_CHECK)
    screenshot(lab_page, "injection_inert")
    assert res["pwned"] is None, f"a payload executed: __pwned={res['pwned']}"
    assert res["bad"] == [], f"active elements/attributes in widget DOM: {res['bad']}"
    assert lab_page.agentlab_dialogs == []
    for p in PAYLOADS:
        assert p in res["text"], f"payload not shown as text: {p}"


def test_buttons_start_pause_resume_stop_a_real_society(lab: Lab, lab_page: Any) -> None:
    run = _run(lab, "controls")
    probe = Path(run) / "probe.jsonl"
    cells = [
        f"RUN = {run!r}\nPROBE = {str(probe)!r}",
        "import asyncio, json\n"
        "from agentlab.runtime import Society\n"
        "from agentlab.viz import live\n"
        "soc = Society.create(RUN + '/soc', agents=10, llm='sim/instant', seed=0,\n"
        "                     progress=False, tick_seconds=0.05)\n"
        "async def probe():  # the kernel's view of the real society, for the test\n"
        "    with open(PROBE, 'a') as f:\n"
        "        while True:\n"
        "            f.write(json.dumps([soc.status, soc.paused, soc.tick]) + '\\n')\n"
        "            f.flush()\n"
        "            await asyncio.sleep(0.05)\n"
        "probe_task = asyncio.ensure_future(probe())\n"
        "dash = live(soc)  # no ticks: start runs until stop\n"
        "dash",
    ]
    open_notebook(lab_page, lab, "controls.ipynb", cells)
    root = "[data-agentlab=society]"
    wait_for(lab_page, "society", "d.status === 'idle' && d.enabled === 'start'", timeout=90)

    def kernel() -> list[Any]:
        return json.loads(probe.read_text().splitlines()[-1])

    def press(action: str) -> None:
        lab_page.locator(f"{root} button[data-action={action}]").click()

    press("start")
    wait_for(lab_page, "society", "d.status === 'running' && Number(d.tick) >= 5", timeout=60)
    assert kernel()[0] == "running"
    press("pause")
    got = wait_for(lab_page, "society", "d.status === 'paused'", timeout=30)
    held = int(got["tick"])
    time.sleep(1.0)
    status, paused, tick = kernel()
    assert (status, paused) == ("paused", True)
    assert tick == held, (tick, held)  # nothing ran while paused
    assert int(history(lab_page, "society")[-1]["tick"]) == held
    assert lab_page.locator(f"{root} button[data-action=resume]").is_enabled()
    assert not lab_page.locator(f"{root} button[data-action=start]").is_enabled()
    screenshot(lab_page, "controls_paused")

    press("resume")
    wait_for(lab_page, "society", f"d.status === 'running' && Number(d.tick) >= {held + 3}")
    press("stop")
    last = wait_for(lab_page, "society", "d.status === 'stopped'", timeout=30)
    time.sleep(0.5)
    status, paused, tick = kernel()
    assert status == "stopped" and not paused
    assert int(last["tick"]) == tick > held + 2
    assert lab_page.locator(f"{root} button[data-action=start]").is_enabled()
    # every press was acked by the kernel: no "no answer from the kernel" note
    time.sleep(4.5)  # widgets/_common.js NO_ANSWER_MS: a missing ack would show by now
    assert lab_page.locator(root).get_attribute("data-no-answer") is None
    assert lab_page.inner_text(f"{root} .al-noanswer") == ""
    screenshot(lab_page, "controls_stopped")
    # charts (axis titles with units are drawn on the canvas) have legends and export
    text = lab_page.inner_text(root)
    labels = ("Rates", "LLM calls/s", "agent-steps/s", "AIMD limit", "Tokens", "Latency")
    for label in (*labels, "mean LLM call latency"):
        assert label in text, label
    with lab_page.expect_download() as dl:
        lab_page.locator(f"{root} button.al-export").first.click()
    assert dl.value.suggested_filename == "agentlab-rates.png"
    assert Path(dl.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_notebook_saved_from_jupyterlab_keeps_the_final_snapshot(lab: Lab, lab_page: Any) -> None:
    run = _run(lab, "saved")
    cells = [
        f"RUN = {run!r}",
        "from agentlab.runtime import Society\n"
        "from agentlab.viz import live\n"
        "soc = Society.create(RUN, agents=5, llm='sim/instant', seed=0, progress=False,\n"
        "                     tick_seconds=0.05)\n"
        "dash = live(soc, ticks=6)\n"
        "dash",
        "await dash.task\ndash.stop()\nprint('final tick', soc.tick)",
    ]
    open_notebook(lab_page, lab, "saved.ipynb", cells)
    wait_for(lab_page, "society", "d.status === 'done'", timeout=90)
    lab_page.wait_for_function(
        "() => document.body.innerText.includes('final tick 6')", timeout=60_000
    )
    lab_page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    path = lab.root / "saved.ipynb"
    deadline = time.monotonic() + 20
    while "final tick 6" not in path.read_text() and time.monotonic() < deadline:
        time.sleep(0.3)
    nb = json.loads(path.read_text())
    (out,) = [
        o
        for o in nb["cells"][1]["outputs"]
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    html = "".join(out["data"]["text/html"])
    text = "".join(out["data"]["text/plain"])
    # the display was updated in place by dash.stop(): the saved snapshot is the end state
    assert "done" in html and "SocietyView" in text and "tick 6" in text, text
