"""Sweep parallel efficiency: serial papermill vs sweep(executor="local") vs sweep("ray").

    python benchmarks/sweep.py [--quick] [--json PATH]

8 points of a small notebook (each point: kernel start + a fixed amount of CPU work).
Parallel efficiency = serial time / (parallel time × workers), Ray start-up excluded
(``ray.init`` and one warm-up task per worker happen before the clock starts).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def _notebook(path: Path, work_s: float) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(f"x = 0\nwork_s = {work_s}")
    p.metadata["tags"] = ["parameters"]
    nb.cells = [
        p,
        nbformat.v4.new_code_cell(
            "import time\nt = time.process_time()\nn = 0\n"
            "while time.process_time() - t < work_s:\n    n += 1\n"
            "from agentlab.sweep import record\nrecord('n', n)"
        ),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    from agentlab.sweep import sweep
    from agentlab.sweep.runner import run_point

    points = 4 if a.quick else 8  # (--quick: under a minute; a papermill kernel's start
    work = 1.0 if a.quick else 8.0  # is ~2.5 s of each point's serial time)
    workers = os.cpu_count() or 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    nb = _notebook(tmp / "bench.ipynb", work)
    grid = {"x": list(range(points))}
    rows = []

    t = time.perf_counter()
    for i in range(points):
        run_point(nb, {"x": i}, tmp / "serial" / str(i), point_id=str(i))
    serial = time.perf_counter() - t
    rows.append(("serial papermill", serial, 1.0, 1))

    t = time.perf_counter()
    sweep(nb, grid, out=tmp / "local", executor="local", max_parallel=workers, progress=False)
    local = time.perf_counter() - t
    rows.append(("sweep local", local, serial / (local * workers), workers))

    import ray

    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=1)
    def warm() -> int:  # start the worker processes and import what a point needs
        import papermill  # noqa: F401

        import agentlab.sweep.runner  # noqa: F401

        return os.getpid()

    ray.get([warm.remote() for _ in range(workers)])  # start-up excluded, as for ray.init
    t = time.perf_counter()
    sweep(nb, grid, out=tmp / "ray", executor="ray", max_parallel=workers, progress=False)
    rayt = time.perf_counter() - t
    rows.append(("sweep ray", rayt, serial / (rayt * workers), workers))
    ray.shutdown()

    print(f"{points} points, {work:.0f} s CPU work each, {workers} workers")
    print(f"{'mode':<18}{'wall s':>10}{'speed-up':>10}{'efficiency':>12}")
    for name, wall, eff, w in rows:
        print(f"{name:<18}{wall:>10.1f}{serial / wall:>10.2f}{eff * 100 if w > 1 else 100:>11.0f}%")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                [{"mode": n, "wall_s": w, "efficiency": e, "workers": k} for n, w, e, k in rows],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
