"""``agentlab paper``: execute a notebook fresh and export it to HTML next to its manifest.

The artefact a reader can check: ``OUT/<name>.ipynb`` (executed), ``OUT/<name>.html``
(figures included), ``OUT/manifest.json`` (versions, git revision, parameters, timings),
``OUT/results.jsonl`` and whatever run directories the notebook wrote.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path
from typing import Any

from agentlab.errors import ConfigError, SweepError
from agentlab.sweep.export import export_html
from agentlab.sweep.grid import check_params, load_params_file, notebook_defaults, parse_param_args
from agentlab.sweep.runner import error_line, run_point

__all__ = ["export_html", "export_saved", "main", "make_paper", "notebook_defaults"]


def make_paper(
    notebook: str | os.PathLike[str],
    out: str | os.PathLike[str],
    params: dict[str, Any] | None = None,
    *,
    timeout: float | None = None,
) -> Path:
    """Execute ``notebook`` fresh into ``out`` and export HTML; returns the HTML path.

    ``out/run.json`` follows the run lifecycle: ``running`` while the notebook executes
    (under the folder's writer lock: a second paper into the same folder is refused),
    then ``done`` / ``failed`` (``stopped`` on Ctrl-C).
    """
    from agentlab.store import write_manifest
    from agentlab.store.lifecycle import hold_run_dir, mark_status

    nb = _existing(notebook)
    check_params(nb, params or {})
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    started = time.time()
    effective = {**notebook_defaults(nb), **(params or {})}
    lock = hold_run_dir(outp, "paper")
    final_status = "stopped"
    error: str | None = None
    try:
        config = {"notebook": str(nb.resolve()), "status": None, "duration_s": None,
                  "started": started}  # fmt: skip
        write_manifest(outp, kind="paper", config=config, seed=effective.get("seed"),
                       params=effective)  # fmt: skip
        # figures stay JSON in the executed notebook (no 4.6 MB plotly.js per notebook);
        # the HTML export plots them with one shared plotly.min.js (see sweep.export)
        status = run_point(
            nb,
            params or {},
            outp,
            point_id=nb.stem,
            timeout=timeout,
            env={"PLOTLY_RENDERER": "plotly_mimetype"},
        )
        _update_config(outp, status=status["status"], duration_s=status["duration_s"])
        executed = outp / "notebook.ipynb"
        if status["status"] != "ok":
            final_status = "failed"
            error = f"{status['status']}: {error_line(status.get('error')) or ''}"
            where = ""
            if executed.exists():  # as far as it ran, papermill's error banner on top
                partial = outp / f"{nb.stem}.ipynb"
                executed.replace(partial)
                with contextlib.suppress(Exception):  # the failure is the news, not this
                    where = f"\nthe notebook as far as it ran: {export_html(partial, outp / f'{nb.stem}.html')}"
            raise SweepError(f"{nb.name} failed ({status['status']}): {status['error']}{where}")
        final = outp / f"{nb.stem}.ipynb"
        executed.replace(final)
        html = export_html(final, outp / f"{nb.stem}.html")
        final_status = "done"
        return html
    except Exception as exc:
        if final_status != "failed":
            final_status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        mark_status(outp, final_status, error=error)  # type: ignore[arg-type]
        lock.release()


def _update_config(outp: Path, **values: Any) -> None:
    from agentlab.store.atomic import atomic_write_json
    from agentlab.store.manifest import read_manifest

    doc = read_manifest(outp)
    doc.setdefault("config", {}).update(values)
    atomic_write_json(outp / "run.json", doc)


def export_saved(notebook: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """``notebook`` as saved (not executed) → ``out/<name>.html`` that opens offline: the
    outputs it holds, widgets as their ``text/html`` snapshots (a notebook saved from
    JupyterLab keeps its widget state, with which plain nbconvert draws the widgets through
    a widget manager loaded from a CDN: blank offline). Returns the HTML path."""
    nb = _existing(notebook)
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    return export_html(nb, outp / f"{nb.stem}.html")


def _existing(notebook: str | os.PathLike[str]) -> Path:
    nb = Path(notebook)
    if not nb.is_file():
        raise ConfigError(f"notebook {str(nb)!r} does not exist")
    return nb


def main(args: argparse.Namespace) -> int:
    """CLI: ``agentlab paper NOTEBOOK --out DIR [-p NAME=VALUE ...] [--params FILE]
    [--no-execute]``."""
    params = load_params_file(args.params, multi=False) if args.params else {}
    params.update(parse_param_args(args.param, multi=False))
    if getattr(args, "no_execute", False):
        if params or args.timeout is not None:
            raise ConfigError("--no-execute exports the notebook as saved: no -p / --params / "
                              "--timeout")  # fmt: skip
        print(f"html written: {export_saved(args.notebook, args.out)}")
        return 0
    html = make_paper(args.notebook, args.out, params, timeout=args.timeout)
    print(f"paper written: {html}\nmanifest: {Path(args.out) / 'run.json'}")
    return 0
