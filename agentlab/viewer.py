"""``agentlab view [DIR]``: a run browser outside Jupyter; ``--bundle OUT``: the same as files.

The pages are the HTML reports of :mod:`agentlab.analysis.run_report` (jinja2 templates,
figures on one shared ``plotly.min.js``, no CDN) plus an index of every run and sweep
under DIR, a conversation replay with a filter, parameters and errors. ``serve`` renders a
page on every request, and pages of runs still being written (manifest status
``running`` and log written within the last minute) refresh themselves, so an open page follows the run. ``build_site`` writes
every page once: a static site anyone can open from disk.

It sits at the CLI layer because it composes the analysis layer (run reports) with the
sweep layer (sweep tables).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from agentlab.errors import ConfigError

__all__ = ["build_site", "main", "render_page", "serve"]

#: seconds between refreshes of a page whose run is still being written
REFRESH_S = 2
MAX_MESSAGES = 2000


def _slug(rel: str) -> str:
    return rel.replace("/", "__") or "_root"


def _manifest(d: Path) -> dict[str, Any]:
    try:
        doc = json.loads((d / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _find(root: Path) -> tuple[list[Path], list[Path]]:
    """(runs, sweeps) under ``root``; runs inside a sweep's points are listed too."""
    from agentlab.analysis.run_report import find_runs

    found = find_runs(root, depth=4)
    sweeps = [d for d in found if (d / "sweep.json").is_file()]
    runs = [d for d in found if d not in sweeps]
    for s in sweeps:  # a sweep's points hold run directories of their own
        runs += [d for d in find_runs(s, depth=4) if d != s]
    return sorted(set(runs)), sweeps


def _recent(d: Path, within_s: float = 60.0) -> bool:
    """Whether anything in the run's log changed in the last ``within_s`` seconds (a
    society's manifest says ``running`` until it is closed, finished or not)."""
    import time

    newest = max((p.stat().st_mtime for p in (d / "replay").rglob("*") if p.is_file()), default=0)
    step = d / "SOCIETY_STEP.json"
    if step.is_file():
        newest = max(newest, step.stat().st_mtime)
    return time.time() - newest < within_s


def _rel(root: Path, d: Path) -> str:
    rel = d.relative_to(root).as_posix()
    return "" if rel == "." else rel


def _index(root: Path, live: int | None) -> str:
    from agentlab.analysis.run_report import runs_df, template_env

    runs, sweeps = _find(root)
    df = runs_df(root) if runs else None
    rows = []
    for d in runs:
        rel = _rel(root, d)
        row: dict[str, Any] = {"run": rel or d.name, "href": f"run-{_slug(rel)}.html"}
        if df is not None and len(df):
            hit = df[df["run"] == (rel or d.name)]
            if len(hit):
                row.update(hit.iloc[0].to_dict())
        row["params"] = json.dumps(_manifest(d).get("params") or {}, default=str)[:120]
        rows.append(row)
    sweep_rows = []
    for s in sweeps:
        meta = json.loads((s / "sweep.json").read_text())
        pts = meta.get("points", [])
        ok = sum(
            1
            for p in pts
            if (
                json.loads(f.read_text())
                if (f := s / p["point_id"] / "status.json").is_file()
                else {}
            ).get("status")
            == "ok"
        )
        names = sorted({k for p in pts for k in p.get("params", {})})
        sweep_rows.append(
            {
                "name": _rel(root, s) or s.name,
                "href": f"sweep-{_slug(_rel(root, s))}.html",
                "notebook": Path(str(meta.get("notebook", ""))).name,
                "points": len(pts),
                "ok": ok,
                "params": ", ".join(names),
            }
        )
    columns = ["run", "kind", "status", "ticks", "agents", "llm_calls", "tokens", "errors",
               "latency_p50_s", "size_bytes", "params"]  # fmt: skip
    numeric = {"ticks", "agents", "llm_calls", "tokens", "errors", "latency_p50_s", "size_bytes"}
    return str(
        template_env()
        .get_template("view_index.html.j2")
        .render(
            root=str(root),
            runs=rows,
            sweeps=sweep_rows,
            columns=columns,
            numeric=numeric,
            live=live,
        )
    )


def _run_page(root: Path, d: Path, js: str | None, live: bool) -> str:
    from agentlab.analysis.run_report import (
        experiment_table,
        figures_html,
        summarize,
        template_env,
    )
    from agentlab.store import open_run
    from agentlab.viz.conversation import readable

    run = open_run(d)
    try:
        summary = summarize(run, 10)
        figures = figures_html(run)
        experiment = experiment_table(run)
        msgs = run.messages_df()
        spans = run.spans_df()
        have = set(run.datasets["name"]) if len(run.datasets) else set()
        states = run.df("agent_states") if "agent_states" in have else None
    finally:
        run.close()
    messages = []
    for _, m in msgs.head(MAX_MESSAGES).iterrows():
        rec = m.to_dict()
        receivers = rec.get("receivers")
        if hasattr(receivers, "tolist"):  # DuckDB lists arrive as numpy arrays
            receivers = receivers.tolist()
        messages.append(
            {
                "tick": rec.get("tick"),
                "hub": rec.get("hub") or "",
                "sender": rec.get("sender") or "",
                "receivers": ", ".join(map(str, receivers))
                if isinstance(receivers, list | tuple)
                else str(receivers or ""),
                "content": readable(rec.get("content"))[:2000],
            }
        )
    agent_states = []
    if states is not None and len(states):
        for _, a in states.sort_values(["tick", "agent_id"]).head(MAX_MESSAGES).iterrows():
            rec = a.to_dict()
            agent_states.append(
                {
                    "tick": rec.get("tick"),
                    "agent": rec.get("agent_id"),
                    "type": rec.get("type"),
                    "ok": rec.get("ok"),
                    "attempts": rec.get("attempts"),
                    "summary": readable(rec.get("summary")).replace("\n", ", ")[:300],
                }
            )
    errors = []
    if len(spans) and "status" in spans:
        bad = spans[spans["status"] == "error"].head(200)
        t0 = float(spans["start"].min()) if "start" in spans else 0.0
        for _, s in bad.iterrows():
            rec = s.to_dict()
            detail = rec.get("error") or rec.get("attrs") or ""
            errors.append(
                {
                    "name": rec.get("name"),
                    "t": float(rec.get("start", t0)) - t0,
                    "detail": str(detail)[:300],
                }
            )
    following = live and summary["manifest"].get("status") == "running" and _recent(d)
    return str(
        template_env()
        .get_template("view_run.html.j2")
        .render(
            s=summary,
            figures=figures,
            experiment=experiment,
            agent_states=agent_states,
            state_ticks=sorted({a["tick"] for a in agent_states}),
            plotly_js=js,
            index="index.html",
            params=_manifest(d).get("params") or {},
            messages=messages,
            messages_cut=len(msgs) if len(msgs) > MAX_MESSAGES else 0,
            errors=errors,
            live=REFRESH_S if following else None,
        )
    )


def _sweep_page(root: Path, s: Path, js: str | None) -> str:
    from agentlab.analysis.run_report import template_env
    from agentlab.sweep import Sweep

    sw = Sweep(s)
    table = sw.table()
    return str(
        template_env()
        .get_template("table_report.html.j2")
        .render(
            title=f"sweep {_rel(root, s) or s.name}",
            subtitle=str(sw.meta.get("notebook")),
            columns=[str(c) for c in table.columns],
            numeric={c for c in table.columns if str(table[c].dtype) not in ("object", "str")},
            rows=table.to_dict("records"),
            figures=[],
            plotly_js=js,
            live=None,
        )
    )


def render_page(root: Path, name: str, *, live: bool = False) -> str | None:
    """The HTML of page ``name`` (``index.html``, ``run-<slug>.html``,
    ``sweep-<slug>.html``), or None when there is no such page."""
    from agentlab.analysis.run_report import PLOTLY_JS

    if name in ("", "index.html"):
        return _index(root, REFRESH_S if live else None)
    runs, sweeps = _find(root)
    for d in runs:
        if name == f"run-{_slug(_rel(root, d))}.html":
            return _run_page(root, d, PLOTLY_JS, live)
    for s in sweeps:
        if name == f"sweep-{_slug(_rel(root, s))}.html":
            return _sweep_page(root, s, PLOTLY_JS)
    return None


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def build_site(root: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write every page of ``root`` into ``out`` (one shared ``plotly.min.js``); returns
    the index path."""
    from agentlab.analysis.run_report import PLOTLY_JS

    src, dst = Path(root), Path(out)
    if not src.is_dir():
        raise ConfigError(f"{str(src)!r} is not a directory")
    dst.mkdir(parents=True, exist_ok=True)
    (dst / PLOTLY_JS).write_text(_plotly_js())
    runs, sweeps = _find(src)
    (dst / "index.html").write_text(_index(src, None))
    for d in runs:
        (dst / f"run-{_slug(_rel(src, d))}.html").write_text(_run_page(src, d, PLOTLY_JS, False))
    for s in sweeps:
        (dst / f"sweep-{_slug(_rel(src, s))}.html").write_text(_sweep_page(src, s, PLOTLY_JS))
    return dst / "index.html"


def serve(
    root: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8700
) -> http.server.ThreadingHTTPServer:
    """A server rendering the pages of ``root`` on request (call ``serve_forever``)."""
    from agentlab.analysis.run_report import PLOTLY_JS

    base = Path(root)
    if not base.is_dir():
        raise ConfigError(f"{str(base)!r} is not a directory")
    js = _plotly_js().encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = urllib.parse.urlparse(self.path).path.lstrip("/")
            if name == PLOTLY_JS:
                body, ctype = js, "text/javascript"
            else:
                page = render_page(base, name, live=True)
                if page is None:
                    self.send_error(404, f"no page {name!r}")
                    return
                body, ctype = page.encode(), "text/html; charset=utf-8"
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: one line per request would drown the terminal

    return http.server.ThreadingHTTPServer((host, port), Handler)


def main(args: argparse.Namespace) -> int:
    """CLI: ``agentlab view [DIR] [--bundle OUT] [--port N]``."""
    if args.bundle:
        index = build_site(args.dir, args.bundle)
        print(f"static site written: {index}")
        return 0
    server = serve(args.dir, host=args.host, port=args.port)
    print(f"agentlab view: http://{args.host}:{server.server_address[1]}/ (Ctrl-C to stop)")
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        t.join()
    finally:
        server.shutdown()
        server.server_close()
    return 0
