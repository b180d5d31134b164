"""``agentlab view`` over HTTP (no browser): what a local server must refuse, escape and
keep to itself (issue 23), links that all lead somewhere, pages that stay small, and a
follow stream that is silent while nothing changes."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.view.conftest import SOCIETY, make_society

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running(root: Path, host: str = "127.0.0.1") -> Iterator[tuple[str, int]]:
    from agentlab.viewer import serve  # the old module name: these tests also ran on it

    server = serve(root, host=host, port=0)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield "127.0.0.1", server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def get(port: int, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        con.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
        res = con.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
    finally:
        con.close()


def hrefs(body: bytes) -> list[str]:
    return re.findall(r'href="([^"]+)"', body.decode())


def resolve(page: str, href: str) -> str:
    """The request path a browser sends for ``href`` on ``page`` (quoted as it would)."""
    url = urllib.parse.urljoin("http://x/" + page.lstrip("/"), href.replace("&amp;", "&"))
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.quote(urllib.parse.unquote(parts.path), safe="/'")


@pytest.fixture(scope="module")
def server(mixed_folder: Path) -> Iterator[int]:
    with running(mixed_folder) as (_, port):
        yield port


def test_a_request_for_another_host_is_refused(server: int) -> None:
    # DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1
    status, _, body = get(server, "/", host=f"evil.example:{server}")
    assert status == 421 and b"evil" not in body and b"experiment" not in body
    assert get(server, "/", host=f"localhost:{server}")[0] == 200
    assert get(server, "/", host=f"127.0.0.1:{server}")[0] == 200
    assert get(server, "/", host="127.0.0.1:1")[0] == 421  # another port is another origin


def test_pages_carry_security_headers(server: int) -> None:
    _, headers, _ = get(server, "/")
    csp = headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    # a paper's own HTML runs its scripts in a sandbox, not in the viewer's origin
    status, headers, _ = get(server, "/f/paper/paper.html")
    assert status == 200 and headers["content-security-policy"].startswith("sandbox")


def test_listening_on_every_interface_warns(mixed_folder: Path) -> None:
    code = (
        "import sys; from agentlab.viewer import serve; "
        f"s = serve({str(mixed_folder)!r}, host='0.0.0.0', port=0); s.server_close()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "every interface" in proc.stderr


def test_a_run_named_with_quotes_brackets_and_spaces_opens(server: int) -> None:
    _, _, index = get(server, "/")
    link = next(h for h in hrefs(index) if "my" in h and "run" in h)
    status, _, body = get(server, resolve("/", link))
    assert status == 200, link
    assert SOCIETY.replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;") in body.decode()
    assert "<b>'s" not in body.decode()  # the name is text, never markup


def test_symlinks_are_not_followed_out_of_the_folder(tmp_path: Path) -> None:
    from agentlab.viewer import build_site

    outside = make_society(tmp_path / "private" / "secret-run", ticks=1)
    root = tmp_path / "runs"
    make_society(root / "mine", ticks=1)
    (root / "elsewhere").symlink_to(outside.parent, target_is_directory=True)
    (root / "mine" / "agents" / "escape").symlink_to(tmp_path / "private")
    with running(root) as (_, port):
        _, _, index = get(port, "/")
        assert b"secret-run" not in index and b"elsewhere" not in index
        for path in ("/r/elsewhere/secret-run/index.html", "/f/elsewhere/secret-run/run.json"):
            assert get(port, path)[0] == 404
    site = build_site(root, tmp_path / "site").parent
    files = [p.relative_to(site).as_posix() for p in site.rglob("*")]
    assert not [f for f in files if "secret" in f or "elsewhere" in f], files


def test_a_bundle_shows_no_local_path_and_no_secret(tmp_path: Path) -> None:
    from agentlab.viewer import build_site

    root = tmp_path / "runs"
    run = make_society(root / "keys", ticks=1)
    m = json.loads((run / "run.json").read_text())
    m["params"] = {"agents": 4, "api_key": "sk-live-0123", "llm": {"auth_token": "tok-456"},
                   "db_password": "hunter2", "temperature": 0.7}  # fmt: skip
    (run / "run.json").write_text(json.dumps(m))
    site = build_site(root, tmp_path / "site").parent
    text = "\n".join(p.read_text(errors="replace") for p in site.rglob("*.html"))
    for secret in ("sk-live-0123", "tok-456", "hunter2"):
        assert secret not in text
    assert "temperature" in text and "[redacted]" in text
    assert str(tmp_path) not in text and str(Path.home()) + "/" not in text


def test_a_malformed_experiment_gets_an_error_page(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    bad = root / "broken"
    (bad / "replay" / "experiment_runs").mkdir(parents=True)
    (bad / "run.json").write_text(json.dumps({"kind": "topology_experiment", "status": "ok"}))
    (bad / "replay" / "_schema.json").write_text("{not json")
    (bad / "replay" / "experiment_runs" / "x.jsonl").write_text('{"run_id": 1, "topology": [\n')
    with running(root) as (_, port):
        status, _, index = get(port, "/")
        assert status == 200 and b"broken" in index
        link = next(h for h in hrefs(index) if "broken" in h)
        status, headers, body = get(port, resolve("/", link))
        assert body.strip(), "an empty response"
        assert headers["content-type"].startswith("text/html")
        assert status in (200, 500) and b"broken" in body


def test_every_link_leads_to_a_page_and_pages_stay_small(server: int) -> None:
    seen, todo, dead, sizes = {"/"}, ["/"], [], {}
    while todo:
        path = todo.pop()
        status, headers, body = get(server, path)
        if status != 200:
            dead.append((path, status))
            continue
        sizes[path] = len(body)
        if not headers["content-type"].startswith("text/html") or path.startswith("/f/"):
            continue
        for h in hrefs(body):
            if h.startswith(("http:", "https:", "#")):
                continue
            target = resolve(path, h)
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert dead == []
    kinds = {p.split("/")[-1].split("-")[0] for p in sizes}
    assert {"index.html", "errors", "calls", "messages", "agent", "topology", "xrun",
            "point", "spans"} <= kinds, kinds  # fmt: skip
    assert max(v for k, v in sizes.items() if k.endswith(".html") and "/f/" not in k) < 1_000_000


def test_the_follow_stream_is_silent_until_a_run_commits(
    mixed_folder: Path, tmp_path: Path
) -> None:
    from agentlab.view.server import POLL_S

    root = tmp_path / "runs"
    shutil.copytree(mixed_folder / SOCIETY, root / "live")
    with running(root) as (_, port):
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        con.request("GET", "/_events?run=live", headers={"Host": f"127.0.0.1:{port}"})
        res = con.getresponse()
        assert res.status == 200 and res.getheader("Content-Type") == "text/event-stream"
        assert res.fp.readline() == b"retry: 2000\n"
        res.fp.readline()
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(res.fp.readline()), daemon=True)
        reader.start()
        time.sleep(6 * POLL_S)
        assert got == []  # idle: nothing is sent
        step = root / "live" / "SOCIETY_STEP.json"
        doc: Any = json.loads(step.read_text())
        step.write_text(json.dumps(doc) + "\n")  # a commit rewrites the step file
        reader.join(10)
        assert got == [b"event: change\n"]
        con.close()


def test_a_burst_of_commits_spread_over_polls_is_one_event(
    mixed_folder: Path, tmp_path: Path
) -> None:
    # one run_sync on a loaded machine: status "running", the tick's commit, status
    # "done", more than a poll apart; a page must fetch its rows once, not three times
    from agentlab.view.server import POLL_S, SETTLE_MAX_S, SETTLE_S

    root = tmp_path / "runs"
    shutil.copytree(mixed_folder / SOCIETY, root / "live")
    step = root / "live" / "SOCIETY_STEP.json"
    doc: Any = json.loads(step.read_text())
    with running(root) as (_, port):
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        con.request("GET", "/_events?run=live", headers={"Host": f"127.0.0.1:{port}"})
        res = con.getresponse()
        assert res.fp.readline() == b"retry: 2000\n"
        res.fp.readline()
        lines: list[tuple[float, bytes]] = []

        def read() -> None:
            while (line := res.fp.readline()) != b"":
                if line.startswith(b"event:"):
                    lines.append((time.monotonic(), line))

        threading.Thread(target=read, daemon=True).start()
        gap = POLL_S * 1.5  # each write lands in a different poll
        assert POLL_S < gap < SETTLE_S and 3 * gap < SETTLE_MAX_S
        for i in range(3):
            doc["_burst"] = i
            step.write_text(json.dumps(doc) + "\n")
            time.sleep(gap)
        last_write = time.monotonic()
        time.sleep(SETTLE_S + 3 * POLL_S)
        assert [line for _, line in lines] == [b"event: change\n"]
        assert lines[0][0] >= last_write - gap  # sent after the burst, not in the middle
        con.close()


def test_runs_rows_skip_symlinks(mixed_folder: Path, tmp_path: Path) -> None:
    from agentlab.view import runs_rows

    root = tmp_path / "runs"
    shutil.copytree(mixed_folder / SOCIETY, root / "mine")
    (root / "elsewhere").symlink_to(mixed_folder, target_is_directory=True)
    assert [r["run"] for r in runs_rows(root)] == ["mine"]


def test_runs_rows_are_the_index_rows(mixed_folder: Path) -> None:
    from agentlab.store.summary import summarize_run
    from agentlab.view import format_runs, render_page, runs_rows

    rows = {r["run"]: r for r in runs_rows(mixed_folder)}
    assert {"experiment", SOCIETY, "sweep", "paper", "paper/society"} <= set(rows)
    soc = rows[SOCIETY]
    assert soc["kind"] == "society" and soc["ticks"] == 3 and soc["llm_calls"] > 0
    assert soc["step_errors"] > 0 and soc["llm_failures"] > 0
    # an LLM failure that failed a step attempt is one error, that step error
    in_steps = summarize_run(mixed_folder / SOCIETY).errors.llm_in_steps
    assert soc["errors"] == soc["step_errors"] + soc["tool_errors"] + soc["llm_failures"] - in_steps
    assert rows["sweep"]["kind"] == "sweep" and rows["paper"]["kind"] == "paper"
    assert rows["paper/society"]["parent"] == "paper"
    # the one error vocabulary: the same counts as summarize_run (runs, report, widgets),
    # in the index row, the run's header tiles and the rows of its errors page
    s = summarize_run(mixed_folder / SOCIETY)
    assert (soc["step_errors"], soc["tool_errors"], soc["errors"]) == (
        s.errors.step_errors, s.errors.tool_errors, s.errors.total)  # fmt: skip
    page = render_page(mixed_folder, f"r/{SOCIETY}/index.html") or ""
    for key, n in (("step_errors", s.errors.step_errors), ("tool_errors", s.errors.tool_errors),
                   ("llm_failures", sum(s.errors.llm_failures.values()))):  # fmt: skip
        assert re.search(rf'data-key="{key}"><div class="v">{n}</div>', page), key
    assert 'data-key="ticks"' in page and '<div class="l">steps</div>' in page
    # an experiment's tiles name its runs (its "steps") and has no ticks
    xp = render_page(mixed_folder, "r/experiment/index.html") or ""
    assert re.search(r'data-key="steps"><div class="v">4</div><div class="l">runs</div>', xp)
    assert 'data-key="ticks"' not in xp and '<div class="l">failed runs</div>' in xp
    errors = render_page(mixed_folder, f"r/{SOCIETY}/errors-1.html") or ""
    assert errors.count("<tr>") - 1 == s.errors.total  # one row per counted error
    text = format_runs(list(rows.values()))
    assert SOCIETY in text and "step_errors" in text
    # the list's "steps" column holds an experiment's runs: the table says so below it,
    # the page on hovering the cell (a bare "4 steps" read as four agent-steps)
    assert "an experiment's steps are its workflow runs" in text.splitlines()[-1]
    index = render_page(mixed_folder, "index.html") or ""
    row = re.search(r'<tr data-kind="experiment".*?</tr>', index, re.S)
    assert row and '<span title="workflow runs">4</span>' in row.group(0), row
    assert '<span title="failed workflow runs">' in row.group(0)


def test_a_societys_tiles_carry_its_reports_latency_and_tokens(mixed_folder: Path) -> None:
    """A society's page had counts only; its report leads with tokens, latency and TTFT:
    the same figures, from the same calls, head the page."""
    from agentlab.analysis.run_report import summarize_run
    from agentlab.core.text_table import format_seconds
    from agentlab.view import render_page

    rep = summarize_run(mixed_folder / SOCIETY)
    page = render_page(mixed_folder, f"r/{SOCIETY}/index.html") or ""

    def tile(key: str) -> str:
        m = re.search(rf'data-key="{key}"><div class="v">([^<]*)</div>', page)
        assert m, key
        return m.group(1)

    assert tile("tokens") == f"{rep['tokens']['total']:,}"
    for q in ("p50", "p95"):
        assert tile(f"latency_{q}") == format_seconds(rep["latency_s"][q])
        assert tile(f"ttft_{q}") == format_seconds(rep["ttft_s"][q])
    # an experiment's latencies are per topology, in its table: no pooled tiles
    xp = render_page(mixed_folder, "r/experiment/index.html") or ""
    assert 'data-key="latency_p50"' not in xp


def test_the_agents_page_shows_what_each_agent_did(mixed_folder: Path) -> None:
    """The agents page was a list of names: which agent failed, called most or waited
    longest meant opening each. Each row now holds its agent's totals, the sums of the
    agent's own page's rows, adding up to the run's counts."""
    import pandas as pd

    from agentlab.store import open_run
    from agentlab.view import render_page

    page = render_page(mixed_folder, f"r/{SOCIETY}/agents-1.html") or ""
    head = re.findall(r"<th[^>]*>([^<]+)</th>", page)
    assert head[:5] == ["agent", "steps", "llm_calls", "llm_failures", "tokens"], head
    assert head[-1] == "latency p50 (s)", head
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S)[1:]

    def cells(row: str) -> list[str]:
        return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]

    table = pd.DataFrame([cells(r) for r in rows], columns=head)
    run = open_run(mixed_folder / SOCIETY)
    calls = run.llm_calls_df()
    assert table["llm_calls"].str.replace(",", "").astype(int).sum() == len(calls)
    tokens = int(calls["prompt_tokens"].sum() + calls["completion_tokens"].sum())
    assert table["tokens"].str.replace(",", "").astype(int).sum() == tokens
    one = table.iloc[0]
    own = render_page(mixed_folder, f"r/{SOCIETY}/agent-{one['agent']}.html") or ""
    own_head = re.findall(r"<th[^>]*>([^<]+)</th>", own)
    by_tick = pd.DataFrame([cells(r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", own, re.S)[1:]],
                           columns=own_head)  # fmt: skip
    for col in ("steps", "llm_calls", "tool_calls", "messages", "tokens"):
        total = by_tick[col].str.replace(",", "").astype(int).sum()
        assert int(one[col].replace(",", "")) == total, col
    mine = calls[calls["agent_id"] == one["agent"]]
    assert float(one["latency p50 (s)"]) == round(float((mine["end"] - mine["start"]).median()), 3)


def test_an_experiments_spans_name_their_run_and_stage(mixed_folder: Path) -> None:
    """An experiment's spans page was rows of "experiment.run" with agent and tick "–":
    which of its runs took longest was not on the page. Each span now names its run (a
    link to the run's page; an LLM call's from its trace) and its stage and iteration (a
    call's from its parent), and an LLM call's "prompt & reply" is its own call (by agent and time
    alone, "expert_1" matched whichever run's expert_1 called last)."""
    from agentlab.store.run import open_run
    from agentlab.view import render_page

    page = render_page(mixed_folder, "r/experiment/spans-1.html") or ""
    head = re.search(r'<table id="spans".*?</tr>', page, re.S)
    assert head and ">run<" in head.group(0) and ">stage<" in head.group(0), page[:2000]
    rows = re.findall(r"<tr>(.*?)</tr>", page[head.end() :], re.S)
    runs = [r for r in rows if "experiment.run" in r]
    assert runs and all(re.search(r'href="[^"]*xrun-(star|sequential)-000[01]\.html"', r)
                        for r in runs)  # fmt: skip
    calls = [r for r in rows if "llm.call" in r]
    assert calls and all("xrun-" in r and ", iteration " in r for r in calls), calls[:2]
    run = open_run(mixed_folder / "experiment")
    try:
        owner = dict(run.sql("select request_id, run_id from llm_calls").itertuples(index=False))
    finally:
        run.close()
    for r in calls:
        rid = urllib.parse.unquote(re.search(r'#c-([^"]+)"', r).group(1))  # type: ignore[union-attr]
        assert f"xrun-{owner[rid]}.html" in r, r


def test_an_experiments_page_shows_its_traffic_by_topology(mixed_folder: Path) -> None:
    """The browser's experiment page listed runs, calls and scores per topology and none of
    the traffic the study is run for; its IAT chart pooled every stage beside a report
    whose IATs are the discussion's. Now its table has the report's traffic columns, the
    numbers ``traffic_summary_df`` gives, and the chart is the discussion's."""
    from agentlab.analysis.report import format_seconds
    from agentlab.analysis.summary import traffic_summary_df
    from agentlab.store.run import open_run
    from agentlab.view import render_page

    page = render_page(mixed_folder, "r/experiment/index.html") or ""
    table = page[page.index('id="topologies"') :]
    table = table[: table.index("</table>")]
    for head in ("burst fraction", "IAT median", "latency p50", "TTFT p50", "mean in flight"):
        assert f">{head}<" in table, head
    run = open_run(mixed_folder / "experiment")
    try:
        want = traffic_summary_df(run.llm_calls_df()).set_index("topology")
    finally:
        run.close()
    for topo in ("star", "sequential"):
        row = re.search(rf"topology-{topo}-1\.html.*?</tr>", table, re.S)
        assert row, topo
        for col in ("latency_p50", "ttft_p50"):
            assert f">{format_seconds(want.loc[topo, col])}<" in row.group(0), (topo, col)
    assert "Discussion inter-arrival times by topology" in page
    # its calls' and messages' "tick" is the workflow iteration, and their tables say so
    # (beside the discussion round: test_counts_and_columns)
    for name in ("calls-1.html", "messages-1.html", "xrun-star-0000.html"):
        sub = render_page(mixed_folder, f"r/experiment/{name}") or ""
        heads = re.findall(r"<tr><th.*?</tr>", sub, re.S)
        assert heads and all(">iteration<" in h and ">tick<" not in h for h in heads), (name, heads)
    society = render_page(mixed_folder, f"r/{SOCIETY}/calls-1.html") or ""
    assert '<th class="num">tick</th>' in society


def test_a_run_inside_a_sweep_point_shows_the_points_parameters(tmp_path: Path) -> None:
    """A run a point's notebook wrote has no parameters of its own: the runs list shows the
    point's grid parameters (and so filters by them), secrets redacted."""
    from agentlab.store import write_manifest
    from agentlab.view import runs_rows

    sw = tmp_path / "sw"
    write_manifest(sw, kind="sweep", config={}, seed=None)
    pts = [{"point_id": "agents=3-aa", "params": {"agents": 3, "api_key": "sk-1"}},
           {"point_id": "agents=4-bb", "params": {"agents": 4, "api_key": "sk-1"}}]  # fmt: skip
    (sw / "sweep.json").write_text(json.dumps({"schema_version": 1, "points": pts}))
    for p in pts:
        write_manifest(sw / p["point_id"] / "exp", kind="topology_experiment", config={}, seed=0)
    write_manifest(sw / "agents=4-bb" / "own", kind="society", config={}, seed=0,
                   params={"agents": 9})  # fmt: skip
    rows = {r["run"]: r for r in runs_rows(tmp_path)}
    assert rows["sw/agents=3-aa/exp"]["params"] == {"agents": 3, "api_key": "[redacted]"}
    assert rows["sw/agents=4-bb/exp"]["params"]["agents"] == 4
    assert rows["sw/agents=4-bb/own"]["params"] == {"agents": 9}  # its own win


def test_the_calls_page_says_how_each_answered_call_ended(server: int) -> None:
    """An answered call's outcome reads ``ok · text`` / ``ok · tool calls`` (its
    ``finish_reason``); a failed one keeps its error code."""
    _, _, index = get(server, "/")
    run = next(h for h in hrefs(index) if "my" in h and "run" in h)
    _, _, page = get(server, resolve("/", run))
    calls = next(h for h in hrefs(page) if "calls-1.html" in h)
    status, _, body = get(server, resolve(resolve("/", run), calls))
    cells = re.findall(r'<td><span class="(?:ok|bad)">([^<]+)</span></td>', body.decode())
    assert status == 200 and cells, calls
    assert {"ok · text", "ok · tool calls"} <= set(cells)
    assert "ok" not in cells and "bad_response" in cells  # (30 % malformed, no retries)


def test_the_calls_page_shows_each_calls_ttft(server: int) -> None:
    """Time to first token beside each call's latency (the page had latency only)."""
    _, _, index = get(server, "/")
    run = next(h for h in hrefs(index) if "my" in h and "run" in h)
    _, _, page = get(server, resolve("/", run))
    calls = next(h for h in hrefs(page) if "calls-1.html" in h)
    body = get(server, resolve(resolve("/", run), calls))[2].decode()
    head = re.findall(r"<th[^>]*>([^<]+)</th>", body)
    assert head.index("TTFT (s)") == head.index("latency (s)") + 1
    col = head.index("TTFT (s)")
    rows = re.findall(r"<tr id=\"c-[^\"]+\">(.*?)</tr>", body, re.S)
    ttfts = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)[col] for r in rows]
    lats = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)[col - 1] for r in rows]
    pairs = [(float(t), float(la)) for t, la in zip(ttfts, lats, strict=True) if t not in ("", "–")]
    assert pairs and all(0 <= t <= la for t, la in pairs)


def test_agentlab_runs_lists_a_papers_own_runs_on_request(
    mixed_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the browser's list: a paper's and a sweep's own runs are summed in its row and
    listed with ``--all`` (two papers made a table of 62 rows, 60 of them theirs)."""
    from agentlab.cli import main as cli

    assert cli(["runs", str(mixed_folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in out[2:-1]]
    assert "paper" in names and "paper/society" not in names, out
    assert out[-1] == "1 run inside sweeps and papers not listed (--all lists them)"
    assert cli(["runs", str(mixed_folder), "--all"]) == 0
    out = capsys.readouterr().out
    assert "paper/society" in out and "not listed" not in out
