"""Sweep points as Ray tasks, without assuming a shared filesystem.

The notebook travels to the worker as bytes; the point runs in a temporary directory there;
the whole point directory comes back as a tar archive that the driver unpacks under
``out/<point-id>/``. So a worker on another node needs only this package and the
notebook's own dependencies installed, not access to the driver's disk.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

from agentlab.store.scratch import ScratchDir

__all__ = ["pack_dir", "remote_point", "unpack_into"]


def pack_dir(path: Path) -> bytes:
    """A gzip'd tar of ``path``'s contents."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for child in sorted(path.iterdir()):
            tar.add(child, arcname=child.name)
    return buf.getvalue()


def unpack_into(data: bytes, dest: Path) -> None:
    """Unpack an archive made by :func:`pack_dir`, refusing paths that leave ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")


def _execute_remote(
    nb_name: str,
    nb_bytes: bytes,
    params: dict[str, Any],
    point_id: str,
    timeout: float | None,
    kernel_name: str | None,
) -> tuple[dict[str, Any], bytes]:
    from agentlab.sweep.runner import run_point

    # a scratch dir: a worker killed mid-point (a cancelled sweep, ray.shutdown) leaves it
    # to the next sweep of the temp dir
    tmp = ScratchDir("agentlab-sweep")
    try:
        nb_path = tmp.path / nb_name
        nb_path.write_bytes(nb_bytes)
        out = tmp.path / "point"
        status = run_point(
            nb_path, params, out, point_id=point_id, timeout=timeout, kernel_name=kernel_name
        )
        return status, pack_dir(out)
    finally:
        tmp.close()


def remote_point(cpus_per_run: float) -> Any:
    """The Ray remote function running one point, with ``num_cpus=cpus_per_run``."""
    import ray

    return ray.remote(num_cpus=cpus_per_run, max_retries=0)(_execute_remote).options(
        runtime_env={
            "env_vars": {
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_OFFLINE_MODE": "true",
                "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            }
        }
    )
