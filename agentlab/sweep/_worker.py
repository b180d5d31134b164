"""Executes one notebook with papermill; run as ``python -m agentlab.sweep._worker SPEC``.

A separate process per point means a timeout or a crashed kernel kills exactly that point
(its process group), never the sweep.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def _defaults(notebook: str) -> dict[str, str]:
    """``kernel_name="python3"`` and ``language="python"`` for a notebook that names no
    kernel or language (one written by a script or by ``nbformat.v4.new_notebook()``:
    papermill refused it with "No kernel name found in notebook and no override provided",
    and given parameters "No language found ..."); a notebook's own are kept."""
    try:
        meta = json.loads(Path(notebook).read_text(encoding="utf-8")).get("metadata") or {}
    except (OSError, ValueError):
        return {}  # papermill reports an unreadable notebook itself
    spec = meta.get("kernelspec") or {}
    out = {} if spec.get("name") else {"kernel_name": "python3"}
    if not (spec.get("language") or (meta.get("language_info") or {}).get("name")):
        out["language"] = "python"
    return out


def execute(spec: dict) -> int:
    """Run the notebook described by ``spec``; write ``error.txt`` on failure."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    out_dir = Path(spec["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ["AGENTLAB_RUN_DIR"] = str(out_dir)  # the kernel inherits it: agentlab.record
    os.environ.update(spec.get("env") or {})
    import papermill

    from agentlab.sweep.export import drop_snapshot_widget_state

    executed = out_dir / spec.get("output_name", "notebook.ipynb")
    kernel = {"kernel_name": spec["kernel_name"]} if spec.get("kernel_name") else {}
    try:
        for attempt in range(1, KERNEL_START_TRIES + 1):
            try:
                papermill.execute_notebook(
                    spec["notebook"],
                    str(executed),
                    parameters=spec.get("parameters") or {},
                    progress_bar=False,
                    cwd=str(out_dir),
                    start_timeout=120,
                    **{**_defaults(spec["notebook"]), **kernel},
                )
                break
            except Exception as exc:
                if attempt == KERNEL_START_TRIES or not _kernel_failed_to_start(exc):
                    raise
                print(f"kernel failed to start ({exc}); retrying ({attempt})", file=sys.stderr)
    except Exception as exc:  # papermill raises PapermillExecutionError with the cell traceback
        text = "".join(traceback.format_exception_only(type(exc), exc))
        (out_dir / "error.txt").write_text(text)
        print(text, file=sys.stderr)
        return 1
    finally:
        if executed.is_file():  # outputs with a static snapshot render it in nbconvert
            drop_snapshot_widget_state(executed)
    return 0


#: papermill starts a kernel this many times before giving up on a point
KERNEL_START_TRIES = 3
#: what jupyter_client raises when a kernel dies or stays silent before its first reply. Kernels
#: started at the same moment by separate processes can pick the same free ports (each process
#: probes them alone) and one dies binding them: seen with three sweep points starting at once.
_START_FAILURES = ("Kernel died before replying to kernel_info", "Kernel didn't respond")


def _kernel_failed_to_start(exc: BaseException) -> bool:
    """True for a kernel that never answered ``kernel_info``: no cell ran, a retry is safe."""
    return any(marker in str(exc) for marker in _START_FAILURES)


if __name__ == "__main__":
    sys.exit(execute(json.loads(Path(sys.argv[1]).read_text())))
