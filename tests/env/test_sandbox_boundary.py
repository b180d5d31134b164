"""The worker process as a boundary (issue 23): a clean environment, a private working
directory, no new privileges, process / file-size / open-file limits, no root, the whole
process group killed; limits inherited from the host (``ulimit``, SLURM, PBS) clamp ours
instead of stopping the worker; a start-up failure shows the agent no host path."""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentlab.env import CodeGenRouter, Limits, create_env
from agentlab.env import sandbox_pool as sp
from agentlab.env.sandbox_pool import SandboxPool
from agentlab.errors import ToolError, UnsafeCodeError

ROOT = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="needs Linux /proc")


def _limits(pid: int) -> dict[str, str]:
    rows = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
    return {r[:26].strip(): r[26:47].strip() for r in rows}


def _status(pid: int) -> dict[str, str]:
    pairs = (line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {k: v.strip() for k, v in pairs}


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # exited (a zombie waits for whoever adopted it)


def _group(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != pgid:
            try:
                if os.getpgid(int(entry.name)) == pgid and not _gone(int(entry.name)):
                    members.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                pass
    return members


@linux
async def test_the_worker_is_confined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    pool = SandboxPool(1)
    try:
        pool.warm()
        (worker,) = pool._idle
        pid = worker.proc.pid
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {e.split(b"=", 1)[0].decode() for e in environ if e}
        assert "OPENAI_API_KEY" not in names and b"sk-host-secret" not in b"".join(environ)
        assert names <= {"PATH", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE",
                         "LC_ALL", "HOME", "TMPDIR"}, names  # fmt: skip
        cwd = os.readlink(f"/proc/{pid}/cwd")
        assert cwd != os.getcwd() and Path(cwd).name.startswith("agentlab-sandbox.")
        assert not any(Path(cwd).iterdir())
        status = _status(pid)
        assert status["NoNewPrivs"] == "1"
        if os.geteuid() == 0:
            assert status["Uid"].split()[1] != "0", status["Uid"]  # dropped to nobody
        else:
            assert status["Uid"].split()[1] == str(os.geteuid())
        lim = _limits(pid)
        assert lim["Max processes"] == "0" and lim["Max file size"] == "0"
        assert lim["Max open files"] == "16" and lim["Max core file size"] == "0"
        assert lim["Max address space"] == str(Limits().max_memory_mb * 2**20)
        assert os.getpgid(pid) == pid  # its own process group
        res = await pool.run("sorted([3, 1, 2])", {})  # and it still serves
        assert res.value == [1, 2, 3]
    finally:
        pool.close()
    assert not Path(cwd).exists()


@linux
async def test_what_a_worker_forks_dies_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker whose program escaped the interpreter and forked (simulated: the worker's
    # interpreter binary starts a child first, in the worker's process group).
    wrapper = tmp_path / "python"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        "{sys.executable}" -c "import time; time.sleep(600)" &
        exec "{sys.executable}" "$@"
        """))  # fmt: skip
    wrapper.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(wrapper))
    pool = SandboxPool(1)
    try:
        pool.warm()
        (worker,) = pool._idle
        forked = _group(worker.proc.pid)
        assert forked, "the wrapper's child is not in the worker's group"
        spin = Limits(max_steps=10**15, max_seconds=10**6, kill_after_seconds=1.0)
        with pytest.raises(UnsafeCodeError, match="worker process was killed"):
            await pool.run("while True:\n    pass", {}, spin)
        deadline = time.monotonic() + 10
        while not all(_gone(p) for p in forked) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(p) for p in forked), "a forked child outlived its killed worker"
        while not pool._idle and time.monotonic() < deadline + 60:  # the replacement
            time.sleep(0.05)
        (fresh,) = pool._idle
        forked = _group(fresh.proc.pid)
        assert forked
    finally:
        pool.close()
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in forked) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in forked), "a forked child outlived pool.close()"


_UNDER_LIMITS = """
import asyncio, json, resource
from agentlab.env import Limits
from agentlab.env.sandbox_pool import SandboxPool

async def main():
    pool = SandboxPool(1)
    try:
        small = await pool.run("1 + 1", {})
        big = await pool.run("sum(range(100))", {}, Limits(max_memory_mb=8192))
        print(json.dumps([small.value, big.value]))
    finally:
        pool.close()

asyncio.run(main())
"""


@linux
@pytest.mark.slow
def test_the_worker_starts_under_inherited_hard_limits() -> None:
    """As under ``ulimit -t 100 -v 2097152`` or a batch job: the worker may not raise a
    hard limit (120 s CPU, 8 GiB asked), so it clamps to the inherited ones."""

    def inherited() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (100, 100))
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    out = subprocess.run(
        [sys.executable, "-c", _UNDER_LIMITS], capture_output=True, text=True, timeout=300,
        preexec_fn=inherited, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [2, 4950]


async def test_a_start_up_failure_shows_the_agent_no_host_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, scripted
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sp, "_START_TIMEOUT", 0.001)  # no worker is up that fast
    feed = create_env("social_feed", seed=0)
    pool = SandboxPool(1)
    try:
        with caplog.at_level(logging.WARNING, logger="agentlab.env.sandbox_pool"):
            with pytest.raises(ToolError) as err:
                await pool.run("1 + 1", {})
            res = await CodeGenRouter(feed, llm=scripted("1 + 1"), pool=pool).route(
                "x", agent_id="a"
            )
    finally:
        pool.close()
    for text in (str(err.value), res.observation, res.error or ""):
        assert "could not start" in text or "did not start" in text, text
        assert sys.executable not in text and str(ROOT) not in text, text
    assert sys.executable in caplog.text  # the host's log has the details
