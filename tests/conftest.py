"""Shared fixtures: one Ray instance per test session, temporary run directories."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Keep litellm offline and quiet in every test process (must be set before import).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_session() -> Iterator[object]:
    """Start Ray once for the whole session (``ray.init`` costs 20-40 s here)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
            configure_logging=False,
            runtime_env={"env_vars": {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}},
        )
    yield ray
    # Left running on purpose: shutdown at interpreter exit is cheaper than per-module.


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    """An empty directory for one run."""
    d = tmp_path / "run"
    d.mkdir()
    return d
