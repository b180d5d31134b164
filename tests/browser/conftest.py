"""A real JupyterLab in headless Debian Chromium, shared by the whole browser session.

- ``jupyter_lab``: one server per session on a free 127.0.0.1 port, with its own runtime,
  config and workspace dirs; notebooks live in a temporary root.
- ``lab_page``: a fresh page whose init script samples every agentlab widget root
  (``[data-agentlab]``) every 20 ms *inside the page* into ``window.__agentlab_history``
  (sampling from Python only sees the final state), and counts dialogs.
- ``open_notebook(page, name, cells)``: write the notebook, open it, wait for an idle
  kernel, run all cells.

Screenshots go to ``test-output/browser/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "test-output" / "browser"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

SAMPLER = """
window.__agentlab_history = [];
window.__agentlab_dialogs = 0;
(() => {
  const last = {};
  setInterval(() => {
    document.querySelectorAll('[data-agentlab]').forEach((el) => {
      const d = Object.assign({}, el.dataset);
      const s = JSON.stringify(d);
      if (last[d.agentlab] !== s) {
        last[d.agentlab] = s;
        window.__agentlab_history.push(Object.assign({t: performance.now()}, d));
      }
    });
  }, 20);
})();
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    url: str
    root: Path


@contextlib.contextmanager
def start_lab(base: Path, extra: list[str] | None = None) -> Iterator[Lab]:
    """A JupyterLab server in ``base`` (notebooks under ``base/notebooks``)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not installed (apt-get install -y chromium)")
    root = base / "notebooks"
    root.mkdir(parents=True)
    # no "Would you like to get notified about official Jupyter news?" toast: it sat over
    # the page's lower right, where a click (Playwright waits for the target to receive
    # it) could time out under it
    notes = base / "settings" / "@jupyterlab" / "apputils-extension"
    notes.mkdir(parents=True)
    (notes / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    port = _free_port()
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "AGENTLAB_PROGRESS": "0",
    }
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
        "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=",
        "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
        "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
        f"--ServerApp.root_dir={root}", *(extra or []),
    ]  # fmt: skip
    log = open(base / "lab.log", "wb")  # noqa: SIM115 (lives as long as the server)
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(url + "/api/status", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"jupyter lab did not start: {(base / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.5)
    try:
        yield Lab(url, root)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with start_lab(tmp_path_factory.mktemp("lab")) as lab:
        yield lab


def shutdown_kernels(lab: Lab) -> None:
    """Shut down every kernel of ``lab`` (a finished test must not keep a society running)."""
    with urllib.request.urlopen(lab.url + "/api/kernels", timeout=10) as r:
        kernels = json.loads(r.read())
    for k in kernels:
        req = urllib.request.Request(f"{lab.url}/api/kernels/{k['id']}", method="DELETE")
        urllib.request.urlopen(req, timeout=10).close()


@pytest.fixture()
def lab(jupyter_lab: Lab) -> Iterator[Lab]:
    """The module's JupyterLab, its kernels shut down after the test."""
    yield jupyter_lab
    shutdown_kernels(jupyter_lab)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1300, "height": 1400},
        )
        yield ctx
        ctx.close()


@pytest.fixture()
def lab_page(chromium: Any) -> Iterator[Any]:
    page = chromium.new_page()
    page.add_init_script(SAMPLER)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.agentlab_dialogs = dialogs  # type: ignore[attr-defined]
    yield page
    page.close()


class Offline:
    """Aborts every request that is not ``file:`` / ``data:`` / localhost; counts them."""

    def __init__(self, page: Any) -> None:
        self.blocked: list[str] = []
        self.failed: list[str] = []
        page.route("**/*", self._route)
        page.on("requestfailed", lambda r: self.failed.append(r.url))

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:", "blob:", "http://127.0.0.1", "ws://127.0.0.1")):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()


def write_notebook(path: Path, cells: list[str]) -> None:
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
             "outputs": [], "source": src}
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                           "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    path.write_text(json.dumps(nb, indent=1))


KERNEL_IDLE = """() => {
  const app = window.jupyterapp;
  const w = app && app.shell.currentWidget;
  const ctx = w && w.sessionContext;
  const k = ctx && ctx.session && ctx.session.kernel;
  return !!(k && ctx.isReady && k.status === 'idle' && w.content && w.content.widgets.length);
}"""


def open_notebook(page: Any, lab: Lab, name: str, cells: list[str] | None = None) -> None:
    """Open ``name`` (writing it first when ``cells`` is given) and run all its cells."""
    if cells is not None:
        write_notebook(lab.root / name, cells)
    page.goto(f"{lab.url}/lab/tree/{name}?reset", wait_until="domcontentloaded")
    page.wait_for_function("() => !!window.jupyterapp", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=90_000)
    if cells is not None:
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")


def history(page: Any, kind: str) -> list[dict[str, Any]]:
    """In-page samples of one widget kind (``society``, ``conversation``, ``iat``, ``human``)."""
    return [h for h in page.evaluate("() => window.__agentlab_history") if h["agentlab"] == kind]


def wait_for(page: Any, kind: str, cond: str, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until a sample of ``kind`` satisfies the JS expression ``cond`` over ``d``."""
    page.wait_for_function(
        f"""() => (window.__agentlab_history || []).some(
              (d) => d.agentlab === {json.dumps(kind)} && ({cond}))""",
        timeout=timeout * 1000,
    )
    return history(page, kind)[-1]


def screenshot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
