"""Shared fixtures: one Ray instance per test session, temporary run directories."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Keep litellm offline and quiet in every test process (must be set before import).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_under_basetemp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What code under test makes with :mod:`tempfile` in this process (an ``Experiment``
    without ``out=`` keeps its run in one: up to 100 MB for a 1,000-run test) goes under
    pytest's base temp, which pytest prunes to its last three sessions; in ``/tmp`` it
    stayed (4.2 GB after a day of test runs). Subprocesses keep their ``TMPDIR``: Ray's
    socket paths under a longer one could pass AF_UNIX's 107 bytes."""
    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tempfile"))
    try:
        yield
    finally:
        tempfile.tempdir = before


@pytest.fixture(scope="session")
def ray_session() -> Iterator[object]:
    """Start Ray once for the whole session (``ray.init`` costs 20-40 s here).

    On a loaded 2-core box the raylet sometimes gives up waiting for the dashboard agent's
    port file (a hard-coded 15 s, ray-project/ray#65983) and ``ray.init`` fails with "node
    timed out during startup"; a second attempt almost always succeeds, so retry twice.
    """
    ray = pytest.importorskip("ray")
    last: Exception | None = None
    for _attempt in range(3):
        if ray.is_initialized():
            break
        try:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=False,
                runtime_env={
                    "env_vars": {
                        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                        "LITELLM_OFFLINE_MODE": "true",
                    }
                },
            )
        except Exception as exc:  # Ray raises plain Exception for startup time-outs
            last = exc
            ray.shutdown()
            time.sleep(2)
    if not ray.is_initialized():
        raise RuntimeError(f"ray.init failed 3 times; last error: {last}")
    yield ray
    # Left running on purpose: shutdown at interpreter exit is cheaper than per-module.


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    """An empty directory for one run."""
    d = tmp_path / "run"
    d.mkdir()
    return d
