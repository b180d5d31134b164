"""Check or strip notebook outputs (notebooks are committed without outputs).

``python -m agentlab.sweep.nbclean [--check] NOTEBOOK...`` checks or strips files in place;
``python -m agentlab.sweep.nbclean --filter`` reads a notebook on stdin and writes it
stripped to stdout: the git *clean* filter that ``make setup`` installs for ``*.ipynb``
(see ``.gitattributes``), so running a notebook in place leaves ``git status`` clean and
what git stores has no outputs, whatever the editor saved.

Opening a notebook in JupyterLab rewrites its kernelspec (``display_name`` becomes the
installed kernel's, e.g. "Python 3 (ipykernel)") and its ``language_info``, and with widget
state saving on it adds ``metadata.widgets``: the filter stores the one canonical form of
each, so opening, running and saving a notebook leaves ``git status`` clean.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["canonical", "has_outputs", "strip_outputs"]

#: metadata that running a notebook adds (papermill, JupyterLab's execution timing)
_RUN_METADATA = ("papermill", "execution", "widgets")
_CELL_RUN_METADATA = ("papermill", "execution", "collapsed", "scrolled")
#: the kernelspec stored for every Python notebook, whatever display name the editor's
#: installed kernel has
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def has_outputs(nb: dict) -> bool:
    """Whether any code cell has outputs or an execution count."""
    return any(
        c.get("outputs") or c.get("execution_count") is not None
        for c in nb.get("cells", [])
        if c.get("cell_type") == "code"
    )


def strip_outputs(nb: dict) -> dict:
    """Remove outputs, execution counts, widget state and run metadata; returns ``nb``."""
    for c in nb.get("cells", []):
        if isinstance(c.get("source"), str):  # nbformat allows both; editors write lines
            c["source"] = c["source"].splitlines(keepends=True)
        meta = c.get("metadata", {})
        for k in _CELL_RUN_METADATA:
            meta.pop(k, None)
        if meta.get("tags") == []:  # papermill adds empty tag lists
            del meta["tags"]
        if c.get("cell_type") == "code":
            c["outputs"] = []
            c["execution_count"] = None
    meta = nb.get("metadata", {})
    for k in _RUN_METADATA:
        meta.pop(k, None)
    lang = meta.get("language_info")
    if isinstance(lang, dict) and "name" in lang:
        meta["language_info"] = {"name": lang["name"]}  # the kernel rewrites the rest
    spec = meta.get("kernelspec")
    if (
        isinstance(spec, dict)
        and spec.get("language", "python") == "python"
        and spec.get("name", "python3") in ("python3", "python")
    ):
        meta["kernelspec"] = dict(KERNELSPEC)  # the editor rewrites the display name
    return nb


def canonical(nb: dict) -> str:
    """The committed text of a notebook (``indent=1``, sorted keys as nbformat writes them,
    UTF-8, final newline)."""
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    """CLI entry (see the module docstring); returns the exit code."""
    if "--filter" in argv:
        raw = sys.stdin.buffer.read().decode("utf-8")
        try:
            nb = json.loads(raw)
        except ValueError:
            sys.stdout.write(raw)  # not JSON (a merge in progress): store it as it is
            return 0
        sys.stdout.write(canonical(strip_outputs(nb)))
        return 0
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
                p.write_text(canonical(strip_outputs(nb)))
    return 1 if (check and bad) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
