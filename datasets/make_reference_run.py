"""Regenerate ``datasets/reference_run``: a small finished society run for reader tests.

    python datasets/make_reference_run.py

30 persona agents on the social feed for 4 ticks, ``sim/vllm-3b`` under the virtual clock,
seed 7. Deterministic apart from wall-clock columns (``wall_s``) and host/time fields in
``run.json``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from agentlab.runtime import Society

OUT = Path(__file__).resolve().parent / "reference_run"


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    society = Society.create(
        OUT,
        agents={"llm": 30},
        env=["social_feed"],
        llm="sim/vllm-3b",
        clock="virtual",
        seed=7,
        progress=False,
    )
    society.run_sync(ticks=4)
    society.close()
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
