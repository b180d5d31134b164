"""``ensure_ray`` starts a local cluster without Ray's stray auth notice (no cluster here:
Ray's own notice functions are called under the same filter)."""

from __future__ import annotations

import logging

import pytest

from agentlab.runtime.ray_init import quiet_auth_notice


def test_the_auth_enabled_notice_is_dropped_and_the_disabled_warning_kept() -> None:
    setup = pytest.importorskip("ray._private.authentication.authentication_token_setup")
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    setup.logger.addHandler(handler)  # Ray's "ray" loggers do not propagate to the root
    try:
        setup._warn_token_auth_enabled()  # what every local ray.init printed in a notebook
        assert any(m.startswith("Token authentication is enabled") for m in seen)
        seen.clear()
        with quiet_auth_notice():
            setup._warn_token_auth_enabled()
            setup._warn_token_auth_disabled()
        assert [m[:35] for m in seen] == ["Token authentication is disabled fo"]  # kept
        seen.clear()
        setup._warn_token_auth_enabled()  # the filter is gone after init
        assert len(seen) == 1
    finally:
        setup.logger.removeHandler(handler)


# the raylet's report of a SIGKILLed batch worker, as Ray 2.60 printed it in a notebook
WORKER_DIED = (
    "A worker died or was killed while executing a task by an unexpected system error. To "
    "troubleshoot the problem, check the logs for the dead worker. Lease ID: 0500000001000000ff"
    "ffffffffffffffffffffffffffffffffffffffffffffff Worker ID: a8a014058a3e0a0ed47966936474b817"
    "11417150614c7284d973496e Node ID: 3540aebd8801a9a404b5737d23fb9a3a1f0850f10b487c7705eed4a9"
    " Worker IP address: 192.0.2.2 Worker port: 37289 Worker PID: 3817 Worker exit type: "
    "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2."
    " End of file. Some common causes include: (1) the process was killed by the OOM killer due"
    " to high memory usage, (2) ray stop --force was called, or (3) the worker crashed "
    "unexpectedly due to SIGSEGV or another unexpected error. If the process was killed by the "
    "kernel OOM killer (verifiable by checking for OOM in dmesg of the OOMing node), consider "
    "enabling resource isolation via --enable-resource-isolation to prevent node deaths by "
    "resource contention and significant loss of progress by uninformed kernel OOM killing."
)


def test_rays_report_of_a_dead_worker_is_one_short_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch worker killed mid-tick: the driver printed the raylet's ~1,000-character
    report (ids, address, OOM advice: eight wrapped lines under a notebook cell) while the
    society ran the batch again; agentlab says that itself (``ray_executor``) and Ray's
    report keeps its first sentence, the pid and the exit type. Other messages pass."""
    worker = pytest.importorskip("ray._private.worker")
    from agentlab.runtime.ray_init import _shorten_worker_deaths

    monkeypatch.setattr(worker, "print_to_stdstream", worker.print_to_stdstream)  # (restored)
    _shorten_worker_deaths()
    _shorten_worker_deaths()  # (once: a second ensure_ray does not wrap it again)
    worker.print_to_stdstream({"lines": [WORKER_DIED], "pid": "raylet", "is_err": False}, False)
    worker.print_to_stdstream({"lines": ["some other news"], "pid": "raylet", "is_err": False},
                              False)  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and len(out[0]) < 160, out
    assert "A worker died or was killed while executing a task (pid 3817, SYSTEM_ERROR)" in out[0]
    assert out[1].endswith("some other news")
