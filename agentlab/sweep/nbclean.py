"""Check or strip notebook outputs (notebooks are committed without outputs).

``python -m agentlab.sweep.nbclean [--check] NOTEBOOK...``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["has_outputs", "strip_outputs"]


def has_outputs(nb: dict) -> bool:
    """Whether any code cell has outputs or an execution count."""
    return any(
        c.get("outputs") or c.get("execution_count") is not None
        for c in nb.get("cells", [])
        if c.get("cell_type") == "code"
    )


def strip_outputs(nb: dict) -> dict:
    """Remove outputs, execution counts and widget state; returns the notebook."""
    for c in nb.get("cells", []):
        if c.get("cell_type") == "code":
            c["outputs"] = []
            c["execution_count"] = None
    nb.get("metadata", {}).pop("widgets", None)
    return nb


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = 0
    for name in (a for a in argv if a != "--check"):
        p = Path(name)
        nb = json.loads(p.read_text())
        if has_outputs(nb):
            bad += 1
            if check:
                print(f"{p}: has outputs (run python -m agentlab.sweep.nbclean {p})")
            else:
                p.write_text(json.dumps(strip_outputs(nb), indent=1) + "\n")
    return 1 if (check and bad) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
