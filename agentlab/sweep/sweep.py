"""``sweep``: run a parameterised notebook over a grid, locally or on Ray, resumably."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentlab.errors import ConfigError, SweepError
from agentlab.store.atomic import atomic_write_json, read_json
from agentlab.store.lifecycle import mark_status
from agentlab.sweep.grid import Grid, check_params, expand_grid, point_id
from agentlab.sweep.results import read_results
from agentlab.sweep.runner import error_line, kill_running, read_status, run_point

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Sweep", "open_sweep", "sweep"]

SCHEMA_VERSION = 1


def open_sweep(out: str | os.PathLike[str]) -> Sweep:
    """The sweep in ``out`` (``Sweep(out)``); its points are runs: ``open_run(point_dir)``."""
    return Sweep(out)


class Sweep:
    """The points of a sweep on disk: ``out/sweep.json`` plus one directory per point."""

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.out = Path(out)
        meta = read_json(self.out / "sweep.json")
        if meta is None:
            raise SweepError(f"{self.out} is not a sweep directory (no sweep.json)")
        self.meta: dict[str, Any] = meta

    @property
    def points(self) -> list[dict[str, Any]]:
        """``[{"point_id": ..., "params": {...}}, ...]`` in grid order."""
        return list(self.meta["points"])

    def point_dir(self, pid: str) -> Path:
        """Where one point's notebook, status and run directories live."""
        return self.out / pid

    def df(self) -> pd.DataFrame:
        """One row per point: parameters, status, duration, error, recorded values."""
        import pandas as pd

        rows = []
        for p in self.points:
            st = read_status(self.point_dir(p["point_id"])) or {}
            row: dict[str, Any] = {"point_id": p["point_id"], **p["params"]}
            row["status"] = st.get("status", "pending")
            row["duration_s"] = st.get("duration_s")
            row["error"] = error_line(st.get("error"))
            for k, v in read_results(self.point_dir(p["point_id"])).items():
                row[k] = v
            rows.append(row)
        return pd.DataFrame(rows)

    @property
    def params(self) -> list[str]:
        """The parameter names of the grid, in first-seen order."""
        names: dict[str, None] = {}
        for p in self.points:
            names.update(dict.fromkeys(p["params"]))
        return list(names)

    def table(self) -> pd.DataFrame:
        """:meth:`df` for reading: swept parameters, status, duration, recorded scalars."""
        from agentlab.sweep.summary import points_table

        return points_table(self.df(), self.params)

    def aggregate(
        self,
        by: list[str],
        metrics: list[str],
        *,
        replicate: str = "seed",
        ci: float = 0.95,
        df: pd.DataFrame | None = None,
    ) -> pd.DataFrame:
        """Replicates (points differing only in ``replicate``) aggregated per ``by``
        combination: mean, std, n and a Student-t ``ci`` interval per metric (see
        :func:`agentlab.sweep.summary.aggregate_df`). ``df``: a :meth:`df` with derived
        columns added (default: :meth:`df`)."""
        from agentlab.sweep.summary import aggregate_df

        table = self.df() if df is None else df
        return aggregate_df(table, by, metrics, replicate=replicate, ci=ci)

    def run_dirs(self) -> dict[str, Path]:
        """Every run directory (a folder holding ``replay/``) inside each point."""
        found: dict[str, Path] = {}
        for p in self.points:
            base = self.point_dir(p["point_id"])
            for schema in sorted(base.glob("**/replay/_schema.json")):
                run = schema.parent.parent
                rel = run.relative_to(base).as_posix()
                found[p["point_id"] if rel == "." else f"{p['point_id']}/{rel}"] = run
        return found

    def sql(self, query: str) -> pd.DataFrame:
        """DuckDB SQL over all points' run logs; each dataset is a view with a ``point``
        column (the run: ``point_id``, or ``point_id/sub/dir`` for a run inside a point).

        A ``points`` table maps every ``point`` to its ``point_id`` and the grid's
        parameters, so results group by parameter rather than by id::

            s.sql("select p.agents, p.seed, count(*) as calls from llm_calls "
                  "join points p using (point) group by all order by all")
        """
        import pandas as pd

        from agentlab.store import sql_over_runs

        runs = self.run_dirs()
        if "points" not in query:  # (built only for a query that can use it)
            return sql_over_runs(runs, query)
        keys = ("point", "point_id")  # (a parameter of either name cannot be a column)
        params = {p["point_id"]: p["params"] for p in self.points}
        rows = []
        for key in runs:
            pid = key.split("/", 1)[0]
            own = {k: v for k, v in params.get(pid, {}).items() if k not in keys}
            rows.append({"point": key, "point_id": pid, **own})
        columns = [*keys, *(k for k in self.params if k not in keys)]
        points = pd.DataFrame(rows, columns=columns)
        return sql_over_runs(runs, query, tables={"points": points})

    @property
    def status(self) -> str:
        """``running``, ``done``, ``failed`` (a point did not finish ok), ``stopped``
        (interrupted) or ``interrupted`` (its driver died)."""
        from agentlab.store.lifecycle import read_status as read_run_status

        return str(read_run_status(self.out) or "running")

    def __repr__(self) -> str:
        return f"Sweep({str(self.out)!r}, points={len(self.points)})"


def _nb_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def sweep(
    notebook: str | os.PathLike[str],
    grid: Grid,
    *,
    out: str | os.PathLike[str],
    executor: str = "ray",
    max_parallel: int | None = None,
    cpus_per_run: float = 1,
    timeout: float | None = None,
    resume: bool = True,
    progress: bool = True,
    address: str | None = None,
    kernel_name: str | None = None,
    exist_ok: bool | Literal["replace"] = True,
) -> Sweep:
    """Execute ``notebook`` once per grid point with papermill; return the :class:`Sweep`.

    Args:
        notebook: a notebook with a cell tagged ``parameters``.
        grid: dict of lists (cartesian product) or list of dicts.
        out: sweep directory; each point lands in ``out/<point-id>/``.
        executor: ``"ray"`` (a Ray task per point; ``address=`` joins a cluster) or
            ``"local"`` (a pool of child processes).
        max_parallel: points at once (default: CPUs / cpus_per_run).
        cpus_per_run: Ray CPUs reserved per point.
        timeout: seconds per point; a point past it is killed and marked ``timeout``.
        resume: skip points whose status is ``ok`` (failed/missing ones run again).
        progress: show a progress bar.
        exist_ok: ``True`` (default) keeps what ``out`` holds (``resume`` decides which
            points run again); ``"replace"`` takes the sweep's writer lock and deletes it
            first (refused, naming the holder, while another sweep drives it);
            ``False`` refuses an existing sweep.

    A failing point never stops the others. Ctrl-C (a notebook's stop button) kills the
    running points, marks nothing as done that is not, marks the sweep ``stopped``, prints
    one line and returns the :class:`Sweep` (its ``status`` is ``"stopped"``); calling
    ``sweep`` again (``resume=True``) runs the points that did not finish.
    """
    nb = Path(notebook)
    if not nb.is_file():
        raise ConfigError(f"notebook {str(nb)!r} does not exist")
    if executor not in {"ray", "local"}:
        raise ConfigError(f"unknown executor {executor!r}; valid: 'local', 'ray'")
    points = expand_grid(grid)
    check_params(nb, {k for p in points for k in p})
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    from agentlab.store.lifecycle import claim_run_dir

    # one driver per sweep directory: a second `agentlab sweep` of it is refused (naming
    # the first), and a driver killed with -9 leaves the sweep "interrupted", not "running"
    lock = claim_run_dir(outp, exist_ok, what="sweep")
    try:
        return _plan_and_drive(
            _SweepRun(nb, points, outp, executor, max_parallel, cpus_per_run, timeout, resume,
                      progress, address, kernel_name)
        )  # fmt: skip
    finally:
        lock.release()


@dataclasses.dataclass(frozen=True, slots=True)
class _SweepRun:
    """What one ``sweep()`` call asked for, as validated (see :func:`sweep`)."""

    nb: Path
    points: list[dict[str, Any]]
    out: Path
    executor: str
    max_parallel: int | None
    cpus_per_run: float
    timeout: float | None
    resume: bool
    progress: bool
    address: str | None
    kernel_name: str | None


def _plan_and_drive(run: _SweepRun) -> Sweep:
    nb, outp = run.nb, run.out
    entries: list[dict[str, Any]] = [{"point_id": point_id(p), "params": p} for p in run.points]
    previous = read_json(outp / "sweep.json")
    meta = {
        "schema_version": SCHEMA_VERSION,
        "notebook": str(nb.resolve()),
        "notebook_sha256": _nb_hash(nb),
        "executor": run.executor,
        "points": entries,
        "created": (previous or {}).get("created", time.time()),
        "updated": time.time(),
    }
    if previous and previous.get("notebook_sha256") != meta["notebook_sha256"] and run.resume:
        warnings.warn(
            "the notebook changed since this sweep last ran; finished points are "
            "kept (pass resume=False to re-run them)",
            stacklevel=3,
        )
    return _drive(run, entries, meta)


def _drive(run: _SweepRun, entries: list[dict[str, Any]], meta: dict[str, Any]) -> Sweep:
    from agentlab.store import write_manifest

    outp, timeout, kernel_name = run.out, run.timeout, run.kernel_name

    atomic_write_json(outp / "sweep.json", meta)
    write_manifest(
        outp,
        kind="sweep",
        seed=None,
        params={"points": len(entries)},
        config={
            "notebook": meta["notebook"],
            "notebook_sha256": meta["notebook_sha256"],
            "executor": run.executor,
            "grid": run.points,
            "timeout": timeout,
            "cpus_per_run": run.cpus_per_run,
        },
    )
    todo = [
        e
        for e in entries
        if not (run.resume and (read_status(outp / e["point_id"]) or {}).get("status") == "ok")
    ]
    result = Sweep(outp)
    if not todo:
        _finish(outp, result)
        return result
    bar = _progress(len(entries), len(entries) - len(todo), run.progress)
    finished = interrupted = False
    try:
        if run.executor == "local":
            parallel = run.max_parallel or os.cpu_count() or 1
            _run_local(run.nb, todo, outp, parallel, timeout, kernel_name, bar)
        else:
            _run_ray(run.nb, todo, outp, run.max_parallel, run.cpus_per_run, timeout,
                     kernel_name, run.address, bar)  # fmt: skip
        finished = True
    except KeyboardInterrupt:  # the running points are killed: one line, no traceback
        interrupted = True
    finally:
        bar.close()
        if finished:
            _finish(outp, result)
        else:
            mark_status(outp, "stopped")
    if interrupted:
        ok = int((result.df()["status"] == "ok").sum())
        print(f"sweep stopped: {ok} of {len(entries)} points ok (in the returned Sweep); "
              "sweep() again with resume=True runs the rest", file=sys.stderr)  # fmt: skip
    return result


def _finish(outp: Path, result: Sweep) -> None:
    """``done`` when every point finished ok, else ``failed`` naming how many did not."""
    df = result.df()
    bad = df[df["status"] != "ok"]
    if not len(bad):
        mark_status(outp, "done")
        return
    first = bad.iloc[0]
    mark_status(
        outp,
        "failed",
        error=f"{len(bad)} of {len(df)} points did not finish ok; first: "
        f"{first['point_id']}: {first['status']}: {first['error']}",
    )


def _progress(total: int, done: int, enabled: bool) -> Any:
    from agentlab.core.progress_bar import progress_bar

    return progress_bar(total, "sweep", "pt", initial=done, enabled=enabled)


def _tick(bar: Any, status: dict[str, Any]) -> None:
    bar.update(1)
    bar.set_postfix_str(f"last={status['point_id'][:28]} {status['status']}")


def _run_local(
    nb: Path,
    todo: list[dict[str, Any]],
    outp: Path,
    parallel: int,
    timeout: float | None,
    kernel_name: str | None,
    bar: Any,
) -> None:
    pool = cf.ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="agentlab-sweep")
    futures: dict[cf.Future[dict[str, Any]], str] = {}
    for e in todo:
        fut = pool.submit(
            run_point,
            nb,
            e["params"],
            outp / e["point_id"],
            point_id=e["point_id"],
            timeout=timeout,
            kernel_name=kernel_name,
        )
        futures[fut] = e["point_id"]
    try:
        for fut in cf.as_completed(futures):
            _tick(bar, fut.result())
    except KeyboardInterrupt:
        for f in futures:
            f.cancel()
        kill_running()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_ray(
    nb: Path,
    todo: list[dict[str, Any]],
    outp: Path,
    max_parallel: int | None,
    cpus_per_run: float,
    timeout: float | None,
    kernel_name: str | None,
    address: str | None,
    bar: Any,
) -> None:
    from agentlab.runtime.ray_init import ensure_ray
    from agentlab.sweep._ray import remote_point, unpack_into

    ray = ensure_ray(address)
    task = remote_point(cpus_per_run)
    nb_bytes = nb.read_bytes()
    nb_ref = ray.put(nb_bytes)
    limit = max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1) // cpus_per_run))
    pending = list(todo)
    inflight: dict[Any, str] = {}

    def submit() -> None:
        while pending and len(inflight) < limit:
            e = pending.pop(0)
            ref = task.remote(nb.name, nb_ref, e["params"], e["point_id"], timeout, kernel_name)
            inflight[ref] = e["point_id"]

    try:
        submit()
        while inflight:
            done, _ = ray.wait(list(inflight), num_returns=1)
            ref = done[0]
            pid = inflight.pop(ref)
            try:
                status, archive = ray.get(ref)
                unpack_into(archive, outp / pid)
            except ray.exceptions.RayError as exc:  # the worker died: record, go on
                status = {
                    "point_id": pid,
                    "status": "failed",
                    "error": str(exc)[-2000:],
                    "params": next(e["params"] for e in todo if e["point_id"] == pid),
                }
                atomic_write_json(outp / pid / "status.json", status)
            _tick(bar, status)
            submit()
    except KeyboardInterrupt:
        for ref in inflight:
            ray.cancel(ref, force=True)
        raise
