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
    try:
        papermill.execute_notebook(
            spec["notebook"],
            str(executed),
            parameters=spec.get("parameters") or {},
            kernel_name=spec.get("kernel_name"),
            progress_bar=False,
            cwd=str(out_dir),
            start_timeout=120,
        )
    except Exception as exc:  # papermill raises PapermillExecutionError with the cell traceback
        text = "".join(traceback.format_exception_only(type(exc), exc))
        (out_dir / "error.txt").write_text(text)
        print(text, file=sys.stderr)
        return 1
    finally:
        if executed.is_file():  # outputs with a static snapshot render it in nbconvert
            drop_snapshot_widget_state(executed)
    return 0


if __name__ == "__main__":
    sys.exit(execute(json.loads(Path(sys.argv[1]).read_text())))
