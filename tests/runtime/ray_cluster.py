"""A throw-away two-node Ray cluster on this machine, for the node-failure tests.

Both nodes run ``ray start --block`` as child processes of the test, so every process of a
node (raylet, workers, agents) descends from its ``ray start`` and can be killed by pid —
never with ``ray stop``, which would also stop the session's Ray and other users' clusters.
Ports are picked free, the object store is kept small, and the head has its own temp dir.

``hide=[...]`` starts the second node as a machine that shares nothing with the first but
the network: inside its own mount namespace (``unshare -m``, needs root) with an empty
tmpfs over each hidden directory (the run's parent) and over its private directory, which
holds its Ray temp dir, its ``TMPDIR`` and its working directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
# Node death is noticed through GCS health checks; the defaults take ~30 s.
FAST_HEALTH = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that were free a moment ago."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class Node:
    """One ``ray start --block`` process and what it started."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def processes(self) -> list[psutil.Process]:
        try:
            return [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(True)]
        except psutil.NoSuchProcess:
            return []

    def task_pids(self, title: str) -> list[int]:
        """Pids of this node's worker processes whose title starts with ``title``."""
        out = []
        for p in self.processes():
            with suppress(psutil.Error):
                if " ".join(p.cmdline()).startswith(title):
                    out.append(p.pid)
        return out

    def kill(self) -> int:
        """SIGKILL every process of the node (raylet and workers first); returns how many."""
        procs = self.processes()
        for p in reversed(procs):
            with suppress(psutil.Error, ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        return len(procs)


@dataclass
class Cluster:
    """The head's address and both nodes (``worker`` is ``None`` for a one-node cluster)."""

    address: str
    head: Node
    worker: Node | None
    env: dict[str, str] = field(default_factory=dict)
    #: the second node's private directory (only visible inside its mount namespace)
    private: Path | None = None


# Runs as the second node's process: hides directories, then becomes ``ray start``.
_ISOLATE = (
    'set -e; for d in $AGENTLAB_HIDE; do mount -t tmpfs -o size=512m tmpfs "$d"; done; '
    'mkdir -p "$TMPDIR" "$AGENTLAB_WD"; cd "$AGENTLAB_WD"; exec "$@"'
)


def can_isolate() -> bool:
    """Whether this process may start a node in its own mount namespace (root, unshare)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


def _start(
    name: str, args: list[str], log: Path, env: dict[str, str], prefix: list[str] | None = None
) -> Node:
    f = open(log, "wb")  # noqa: SIM115 - kept open for the child's lifetime
    proc = subprocess.Popen(
        [*(prefix or []), RAY, "start", "--block", "--disable-usage-stats", *args],
        stdout=f,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # a Ctrl-C of pytest must not reach the cluster half-way
    )
    return Node(name, proc, log)


@contextmanager
def two_node_cluster(
    tmp: Path, *, hide: list[Path] | None = None, second: bool = True
) -> Iterator[Cluster]:
    """Start a head and a second node (1 CPU each); tear both down by pid afterwards.

    Args:
        tmp: where the nodes' logs go.
        hide: start the second node in its own mount namespace with these directories
            hidden (see the module docstring).
        second: ``False``: the head alone (a one-node cluster, for comparisons).
    """
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **FAST_HEALTH, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    nodes: list[Node] = []
    # Short on purpose: Ray's socket paths under it must stay within AF_UNIX's 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="alray-", dir="/tmp")
    private = Path(tempfile.mkdtemp(prefix="alw-", dir="/tmp")) if hide else None
    gcs, *p = free_ports(14)
    common = [
        "--num-cpus",
        "1",
        "--object-store-memory",
        str(80 * 2**20),
        "--node-ip-address",
        "127.0.0.1",
    ]
    try:
        head = _start(
            "head",
            [
                "--head",
                "--port",
                str(gcs),
                "--temp-dir",
                temp_dir,
                "--include-dashboard",
                "false",
                *_node_port_flags(p[0:6]),
                "--ray-client-server-port",
                str(p[12]),
                *common,
            ],
            tmp / "head.log",
            env,
        )
        nodes.append(head)
        address = f"127.0.0.1:{gcs}"
        _wait_port(gcs, head, 90)
        if not second:
            yield Cluster(address, head, None, env)
            return
        wenv, prefix, extra = env, list[str](), list[str]()
        if private is not None:
            assert hide is not None
            wenv = {
                **env,
                "AGENTLAB_HIDE": " ".join(str(d) for d in [*hide, private]),
                "TMPDIR": str(private / "t"),
                "AGENTLAB_WD": str(private / "wd"),
            }
            prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", _ISOLATE, "sh"]
            extra = ["--temp-dir", str(private / "r")]
        worker = _start(
            "worker",
            [
                "--address",
                address,
                *_node_port_flags(p[6:12]),
                *extra,
                *common,
            ],
            tmp / "worker.log",
            wenv,
            prefix,
        )
        nodes.append(worker)
        yield Cluster(address, head, worker, env, private)
    finally:
        for n in reversed(nodes):
            n.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)


_NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)


def _node_port_flags(ports: list[int]) -> list[str]:
    """The per-node port flags of ``ray start`` (each node of the cluster needs its own)."""
    return [
        x for flag, port in zip(_NODE_PORT_FLAGS, ports, strict=True) for x in (flag, str(port))
    ]


def _wait_port(port: int, node: Node, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.proc.poll() is not None:
            raise RuntimeError(f"ray start exited: {node.log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"the Ray head did not listen on {port} in {timeout:.0f} s")
