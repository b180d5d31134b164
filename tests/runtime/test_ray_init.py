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
