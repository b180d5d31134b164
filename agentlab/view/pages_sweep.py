"""The pages of a sweep (its points, charts of a metric over a parameter, one point) and of a
paper (its files, recorded tables and figures).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agentlab.view import charts, data
from agentlab.view.files import Entry, read_doc
from agentlab.view.page_parts import (
    MAX_INLINE,
    REPLICATE,
    _crumbs,
    _cut,
    _na,
    _params_text,
    _render,
    counted,
)
from agentlab.view.site_state import SiteState as Site
from agentlab.view.site_state import href, quote

# --- sweeps and papers ----------------------------------------------------------------------


def _children(site: Site, e: Entry, prefix: str | None = None) -> list[Entry]:
    pre = (prefix or e.rel) + "/" if (prefix or e.rel) else ""
    return [c for c in site.entries().values() if c.rel != e.rel and c.rel.startswith(pre)
            and c.parent == e.rel]  # fmt: skip


def _runs_block(site: Site, e: Entry, path: str, kids: list[Entry], heading: str) -> dict[str, Any]:
    base = site.base(path)
    rows = []
    for c in kids:
        s = data.run_summary(c)
        rows.append({"cells": [
            {"text": c.rel[len(e.rel) + 1:] if e.rel else c.rel, "href": href(base, c.rel)},
            c.kind, s.get("status"), s.get("ticks", 0), s.get("llm_calls", 0),
            s["errors"].get("total", 0),
        ]})  # fmt: skip
    return {"type": "table", "id": "child-runs", "heading": heading, "rows": rows,
            "columns": ["run", "kind", "status", "ticks", "LLM calls", "errors"],
            "numeric": {"ticks", "LLM calls", "errors"}}  # fmt: skip


def _file_links(site: Site, e: Entry, folder: Path, path: str) -> list[dict[str, str]]:
    from agentlab.view.site_state import RAW_TYPES

    base = site.base(path)
    out = []
    for sub in ("", "tables", "figures"):
        d = folder / sub if sub else folder
        if not d.is_dir() or d.is_symlink():
            continue
        for p in sorted(d.iterdir()):
            if p.is_symlink() or not p.is_file() or p.suffix.lower() not in RAW_TYPES:
                continue
            if p.name in ("run.json", "plotly.min.js", "status.json", "sweep.json"):
                continue
            rel = p.relative_to(site.root).as_posix()
            out.append({"text": p.relative_to(folder).as_posix(), "href": base + quote(f"f/{rel}")})
    return out


def _results(folder: Path) -> dict[str, Any]:
    from agentlab.sweep.results import read_results

    return read_results(folder)


def _kv_block(heading: str, values: dict[str, Any], id_: str) -> dict[str, Any]:
    return {"type": "table", "id": id_, "heading": heading, "columns": ["name", "value"],
            "numeric": set(), "rows": [{"cells": [k, _cut(v if isinstance(v, str) else
                                        json.dumps(v, default=str), 400)]} for k, v in values.items()]}  # fmt: skip


def _paper_page(site: Site, e: Entry, path: str) -> str:
    s = data.run_summary(e)
    m = e.manifest
    cfg = m.get("config") or {}
    files = _file_links(site, e, e.path, path)
    html = [f for f in files if f["text"].endswith(".html")]
    blocks: list[dict[str, Any]] = []
    if html:
        blocks.append({"type": "links", "heading": "The paper", "links": html, "id": "paper-html"})
    if s.get("params"):
        blocks.append(_kv_block("Parameters", s["params"], "params"))
    res = data.redact(_results(e.path))
    if res:
        blocks.append(_kv_block("Recorded results", res, "results"))
    figs = _recorded(e.path, blocks)
    blocks.append(_runs_block(site, e, path, _children(site, e), "Runs written by the paper"))
    nb = Path(str(cfg.get("notebook") or "")).name
    sub = f"paper · {s.get('status')} · notebook {nb or '?'} · created {str(s.get('created') or '–')[:19]}"
    return _render(site, path, e.rel, title=e.rel or e.path.name, subtitle=sub,
                   crumbs=_crumbs(site, path, e), blocks=blocks, plotly_js=figs)  # fmt: skip


def _recorded(folder: Path, blocks: list[dict[str, Any]]) -> bool:
    """The tables (first rows) and figures a notebook recorded in ``folder``, as blocks;
    whether any figure was added."""
    import pandas as pd

    for p in sorted((folder / "tables").glob("*.csv")) if (folder / "tables").is_dir() else []:
        if p.is_symlink() or p.stat().st_size > MAX_INLINE:
            continue
        try:
            df = pd.read_csv(p, index_col=0)  # record_table writes the index first
        except (OSError, ValueError):
            continue
        if df.index.name is not None or not df.index.equals(pd.RangeIndex(len(df))):
            df = df.reset_index()  # a named or labelled index is data; 0, 1, 2 ... is not
        df = df.head(50)
        blocks.append({"type": "table", "id": f"table-{p.stem}", "heading": f"Table {p.stem}",
                       "columns": [str(c) for c in df.columns], "numeric": {
                           str(c) for c in df.columns if pd.api.types.is_numeric_dtype(df[c])},
                       "rows": [{"cells": [_na(v) for v in r]} for r in df.itertuples(index=False)]})  # fmt: skip
    figs = []
    for p in sorted((folder / "figures").glob("*.json")) if (folder / "figures").is_dir() else []:
        if p.is_symlink() or p.stat().st_size > MAX_INLINE:
            continue
        fig = charts.recorded_figure_chart(p.stem, p.read_text())
        if fig:
            figs.append(fig)
    if figs:
        # (one a row: each is a notebook's full-width figure)
        blocks.append({"type": "charts", "heading": "Figures", "charts": figs, "wide": True})
    return bool(figs)


def _sweep_part(site: Site, e: Entry, name: str, path: str) -> str | None:
    from agentlab.sweep import Sweep

    sw = Sweep(e.path)
    if name == "index.html":
        return _sweep_page(site, e, sw, path)
    m = re.match(r"^point-(.+)\.html$", name)
    if not m:
        return None
    pid = m.group(1)
    point = next((p for p in sw.points if p["point_id"] == pid), None)
    if point is None:
        return None
    folder = e.path / pid
    status = read_doc(folder / "status.json")
    blocks: list[dict[str, Any]] = [
        {"type": "tiles", "id": "tiles", "tiles": [
            {"key": "status", "label": "status", "value": status.get("status", "pending"),
             "bad": status.get("status") not in (None, "ok")},
            {"key": "duration_s", "label": "seconds", "value": _na(status.get("duration_s"))}]},
        _kv_block("Parameters", data.redact(point.get("params") or {}), "params"),
    ]  # fmt: skip
    res = data.redact(_results(folder))
    if res:
        blocks.append(_kv_block("Recorded results", res, "results"))
    if status.get("error"):
        blocks.append(
            {"type": "pre", "heading": "Error", "bad": True, "text": _cut(status["error"])}
        )
    figs = _recorded(folder, blocks)
    kids = [
        c
        for c in site.entries().values()
        if c.rel.startswith(f"{e.rel}/{pid}/" if e.rel else f"{pid}/")
    ]
    blocks.append(_runs_block(site, e, path, kids, "Runs of this point"))
    files = _file_links(site, e, folder, path)
    if files:
        blocks.append({"type": "links", "heading": "Files", "links": files, "id": "files"})
    return _render(site, path, e.rel, title=f"point {pid}", subtitle=_params_text(point.get("params") or {}),
                   crumbs=_crumbs(site, path, e, (pid, None)), blocks=blocks, plotly_js=figs)  # fmt: skip


def _sweep_page(site: Site, e: Entry, sw: Any, path: str) -> str:
    import pandas as pd

    df = sw.df()
    params = sw.params
    base = site.base(path)
    metrics = [c for c in df.columns if c not in {"point_id", "status", "duration_s", "error", *params}
               and pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]  # fmt: skip
    # why a point failed, on the page that lists it (it took a click per failed point)
    errors = "error" in df and bool(df["error"].notna().any())
    cols = ["point", *params, "status", "seconds", *metrics, *(["error"] if errors else [])]
    rows = []
    for r in df.to_dict("records"):
        rows.append({"attrs": {"status": r.get("status")}, "cells": [
            {"text": r["point_id"], "href": href(base, e.rel, f"point-{r['point_id']}.html")},
            *[_cut(v if isinstance(v := data.redact({p: _na(r.get(p))})[p], str) else
                   json.dumps(v, default=str), 60) for p in params],
            {"text": r.get("status"), "cls": "ok" if r.get("status") == "ok" else "bad"},
            _na(r.get("duration_s")),
            *[_na(r.get(c)) for c in metrics],
            *([_cut(r.get("error"), 300)] if errors else []),
        ]})  # fmt: skip
    figs = _sweep_charts(df, params, metrics)
    blocks: list[dict[str, Any]] = []
    if figs:
        blocks.append({"type": "charts", "heading": "Recorded metrics against parameters",
                       "charts": figs, "note": "mean of the replicates with a 95% Student-t "
                       "interval (one point per parameter value)"})  # fmt: skip
    blocks.append({"type": "table", "id": "points", "heading": "Points", "columns": cols,
                   "numeric": {"seconds", *metrics}, "rows": rows, "sortable": True})  # fmt: skip
    blocks.append(_runs_block(site, e, path, _children(site, e), "Runs written by the points"))
    ok = int((df["status"] == "ok").sum()) if len(df) else 0
    nb = Path(str(sw.meta.get("notebook", ""))).name
    return _render(site, path, e.rel, title=e.rel or e.path.name,
                   subtitle=f"sweep of {nb} · {counted(len(df), 'point')}, {ok} ok",
                   crumbs=_crumbs(site, path, e), blocks=blocks, plotly_js=bool(figs))  # fmt: skip


def _sweep_charts(df: Any, params: list[str], metrics: list[str]) -> list[dict[str, str]]:
    from agentlab.sweep.summary import aggregate_df

    ok = df[df["status"] == "ok"] if "status" in df else df
    varied = [p for p in params if ok[p].astype(str).nunique() > 1] if len(ok) else []
    rep = next((p for p in REPLICATE if p in varied), None)
    figs = []
    for param in [p for p in varied if p != rep][:3]:
        for metric in metrics[:4]:
            try:
                agg = aggregate_df(ok.assign(**{param: ok[param].astype(str)})
                                   if ok[param].dtype == object else ok,
                                   [param], [metric], replicate=rep or param)  # fmt: skip
            except Exception:  # an unusable column: skip the chart, keep the page
                continue
            if len(agg):
                figs.append(charts.sweep_metric_chart(agg, param, metric))
    return figs
