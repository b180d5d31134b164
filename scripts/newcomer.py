"""A newcomer's first half hour, scripted: the README's quick start, then JupyterLab.

    .venv/bin/python scripts/newcomer.py [--out test-output/newcomer] [--agents 200]

1. ``agentlab demo`` (what ``make demo`` runs), in a scratch folder, as printed.
2. The notebook the demo suggests (``notebooks/05_replay_analysis.ipynb``, copied into a
   scratch git repo set up like ``make setup`` does) with ``run_dir`` set to the demo's run
   as the demo says, and a new notebook holding the demo's one-liner
   ``agentlab.show(run)``: each opened in JupyterLab in Chromium, run, saved from the UI,
   its kernel and session shut down, and reopened.
3. Checks what a newcomer would notice: every cell ran without an error, the widgets show
   after the reopen (no "model not found"), and ``git status`` is clean after JupyterLab
   saved the notebook (``git diff``: the clean filter strips outputs and the kernel's
   display name; ``git status`` still lists a file whose size changed until ``git add``).

Screenshots (``*.png``), the demo's output and ``timings.json`` go to ``--out``. Exits
non-zero when a check fails. Needs Debian's chromium and the ``playwright`` package (the
dev install has it); it starts and stops its own JupyterLab on a free loopback port.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const ctx = w && w.sessionContext;
  const k = ctx && ctx.session && ctx.session.kernel;
  return !!(k && ctx.isReady && k.status === 'idle' && w.content && w.content.widgets.length);
}"""
ALL_RAN = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = w.content.widgets.filter((c) => c.model.type === 'code');
  return k && k.status === 'idle' && cells.every((c) => c.model.executionCount !== null);
}"""

DIRTY = "() => !!window.jupyterapp.shell.currentWidget.context.model.dirty"


class Walk:
    """Timed steps and checks, written to ``timings.json``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.t0 = time.monotonic()
        self.steps: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self.notes: list[str] = []

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        print(f"-- {name} ...", flush=True)
        try:
            yield
        finally:
            dt = time.monotonic() - t
            self.steps.append({"step": name, "seconds": round(dt, 1)})
            print(f"   {dt:.1f} s", flush=True)

    def check(self, ok: bool, what: str) -> None:
        print(f"   [{'ok' if ok else 'FAIL'}] {what}", flush=True)
        if not ok:
            self.failures.append(what)

    def note(self, what: str) -> None:
        print(f"   [note] {what}", flush=True)
        self.notes.append(what)

    def save(self) -> None:
        doc = {"total_s": round(time.monotonic() - self.t0, 1), "steps": self.steps,
               "failures": self.failures, "notes": self.notes}  # fmt: skip
        (self.out / "timings.json").write_text(json.dumps(doc, indent=1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def jupyter_lab(root: Path, scratch: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(scratch / "rt"),
           "JUPYTER_CONFIG_DIR": str(scratch / "cfg"),
           "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "ws"), "AGENTLAB_PROGRESS": "0"}  # fmt: skip
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
           "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=",
           "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
           "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
           f"--ServerApp.root_dir={root}"]  # fmt: skip
    log = open(scratch / "lab.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/api/status", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not start; see lab.log") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _delete_all(url: str, what: str) -> None:
    with urllib.request.urlopen(f"{url}/api/{what}", timeout=10) as r:
        for it in json.loads(r.read()):
            req = urllib.request.Request(f"{url}/api/{what}/{it['id']}", method="DELETE")
            urllib.request.urlopen(req, timeout=10).close()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def _scratch_repo(root: Path) -> None:
    """A git repo set up as ``make setup`` sets the checkout up (the nbclean filter)."""
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "newcomer@example.com")
    _git(root, "config", "user.name", "newcomer")
    _git(root, "config", "filter.agentlab-nbstrip.clean",
         f"{sys.executable} -m agentlab.sweep.nbclean --filter")  # fmt: skip
    _git(root, "config", "filter.agentlab-nbstrip.smudge", "cat")
    shutil.copy(REPO / ".gitattributes", root / ".gitattributes")
    shutil.copy(REPO / ".gitignore", root / ".gitignore")


def _set_parameter(nb_path: Path, name: str, value: str) -> None:
    """What the newcomer types into the parameters cell: ``name = value``."""
    nb = json.loads(nb_path.read_text())
    for c in nb["cells"]:
        if "parameters" in c.get("metadata", {}).get("tags", []):
            src = "".join(c["source"])
            src = re.sub(rf"^{name} = .*$", f"{name} = {value}", src, count=1, flags=re.M)
            c["source"] = src
    nb_path.write_text(json.dumps(nb, indent=1) + "\n")


def _notebook_round_trip(walk: Walk, page: Any, url: str, root: Path, name: str) -> None:
    stem = Path(name).stem
    with walk.step(f"{stem}: open in JupyterLab (kernel ready)"):
        page.goto(f"{url}/lab/tree/{name}?reset", wait_until="domcontentloaded")
        page.wait_for_function("() => !!window.jupyterapp", timeout=90_000)
        page.wait_for_function(KERNEL_IDLE, timeout=120_000)
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    with walk.step(f"{stem}: run all cells"):
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_timeout(500)
        page.wait_for_function(ALL_RAN, timeout=300_000)
        page.wait_for_timeout(1500)  # widgets draw their first frames
    page.screenshot(path=str(walk.out / f"{stem}_1_ran.png"), full_page=True)
    errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
    walk.check(errors == 0, f"{stem}: every cell ran without an error ({errors} errors)")
    with walk.step(f"{stem}: save from the UI"):
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (
                '"outputs": [\n' in (root / name).read_text()
                or "execution_count" in (root / name).read_text()
            ):
                break
            time.sleep(0.3)
        page.wait_for_timeout(1000)
    diff = _git(root, "diff", "--stat")
    (walk.out / f"{stem}_git_diff.txt").write_text(_git(root, "diff"))
    walk.check(diff == "", f"{stem}: no change to git after JupyterLab saved it ({diff!r})")
    # git status still lists a saved notebook until the next `git add`: git takes a file
    # whose size changed as modified without running the clean filter (git diff is empty)
    walk.note(f"{stem}: git status --porcelain: {_git(root, 'status', '--porcelain')!r}")
    with walk.step(f"{stem}: close kernel and session, reopen"):
        _reopen(page, url, name)
    _check_reopened(walk, page, stem, "2_reopened")
    dirty = page.evaluate(DIRTY)
    walk.note(f"{stem}: marked unsaved right after the reopen: {dirty}")
    # a newcomer who reopens, looks and saves again (ipywidgets#3888: in JupyterLab 4 a
    # reopened notebook's save could drop the widget state it was opened with)
    with walk.step(f"{stem}: save the reopened notebook, close, reopen"):
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function(f"() => !({DIRTY})()", timeout=30_000)
        page.wait_for_timeout(1000)
        _reopen(page, url, name)
    _check_reopened(walk, page, stem, "3_saved_again")


def _reopen(page: Any, url: str, name: str) -> None:
    """Close every session and kernel, as at the end of a day, and open ``name`` again."""
    _delete_all(url, "sessions")
    _delete_all(url, "kernels")
    page.goto(f"{url}/lab/tree/{name}?reset", wait_until="domcontentloaded")
    page.wait_for_function("() => !!window.jupyterapp", timeout=90_000)
    page.wait_for_function(KERNEL_IDLE, timeout=120_000)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    page.wait_for_timeout(3000)  # the widget manager restores and renders


def _check_reopened(walk: Walk, page: Any, stem: str, shot: str) -> None:
    page.screenshot(path=str(walk.out / f"{stem}_{shot}.png"), full_page=True)
    body = page.inner_text("body")
    walk.check("model not found" not in body, f"{stem} ({shot}): no 'model not found'")
    outputs = page.locator(".jp-OutputArea-output").count()
    walk.check(outputs > 0, f"{stem} ({shot}): outputs shown ({outputs})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--out", default=str(REPO / "test-output" / "newcomer"))
    ap.add_argument("--agents", type=int, default=200, help="demo agents (the demo's default)")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    walk = Walk(out)
    scratch = Path(tempfile.mkdtemp(prefix="agentlab-newcomer-"))
    try:
        work = scratch / "work"
        work.mkdir()
        with walk.step("quick start: agentlab demo"):
            agentlab = Path(sys.executable).parent / "agentlab"
            proc = subprocess.run([str(agentlab), "demo", "--agents", str(args.agents)],
                                  cwd=work, capture_output=True, text=True, timeout=900)  # fmt: skip
        (out / "demo.txt").write_text(proc.stdout + proc.stderr)
        walk.check(proc.returncode == 0, "agentlab demo exits 0")
        m = re.search(r"^run directory: (.+)$", proc.stdout, re.M)
        walk.check(m is not None, "the demo prints its run directory")
        walk.check("05_replay_analysis.ipynb" in proc.stdout, "the demo names a notebook")
        if m is None or proc.returncode:
            return 1
        run_dir = m.group(1).strip()
        root = scratch / "lab"
        root.mkdir()
        _scratch_repo(root)
        shutil.copy(REPO / "notebooks" / "05_replay_analysis.ipynb", root)
        explore = {"cells": [{"cell_type": "code", "execution_count": None, "id": "show",
                              "metadata": {}, "outputs": [],
                              "source": f'import agentlab; run = agentlab.open_run("{run_dir}"); '
                                        "agentlab.show(run)"}],
                   "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                               "name": "python3"},
                                "language_info": {"name": "python"}},
                   "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
        (root / "explore.ipynb").write_text(json.dumps(explore, indent=1) + "\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", "as cloned")
        _set_parameter(root / "05_replay_analysis.ipynb", "run_dir", json.dumps(run_dir))
        _git(root, "add", "-A")  # the newcomer's own edit, committed: only JupyterLab remains
        _git(root, "commit", "-qm", "run_dir set")
        from playwright.sync_api import sync_playwright

        with jupyter_lab(root, scratch) as url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            for name in ("05_replay_analysis.ipynb", "explore.ipynb"):
                _notebook_round_trip(walk, page, url, root, name)
            browser.close()
    finally:
        walk.save()
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(json.loads((out / "timings.json").read_text()), indent=1))
    return 1 if walk.failures else 0


if __name__ == "__main__":
    sys.exit(main())
