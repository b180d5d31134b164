"""``agentlab export-otlp``: a run's spans to an OTLP file or endpoint, once or live
(``--follow``). The command's own module, so :mod:`agentlab.store.otlp` (the mapping and
the push) needs neither the run reader nor the live follower."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentlab.errors import ConfigError
from agentlab.store.lifecycle import read_status
from agentlab.store.otlp import traces_url
from agentlab.store.otlp_live import LiveOtlp
from agentlab.store.run import open_run


def main(args: Any) -> int:
    """``agentlab export-otlp RUN (--out FILE [--format F] | --endpoint URL)``."""
    if not args.out and not args.endpoint:
        raise ConfigError("give --out FILE and/or --endpoint URL")
    if getattr(args, "follow", False):
        if not args.endpoint or args.out:
            raise ConfigError("--follow pushes live: give --endpoint URL (and no --out)")
        return _follow(args.run, args.endpoint)
    run = open_run(args.run)
    try:
        if args.out:
            fmt = args.format or (
                "protobuf" if Path(args.out).suffix in (".pb", ".bin") else "json"
            )
            n = run.export_otlp(args.out, format=fmt)
            print(f"wrote {n} spans to {args.out} (OTLP {fmt})")
        if args.endpoint:
            n = run.export_otlp(endpoint=args.endpoint)
            print(f"pushed {n} spans to {traces_url(args.endpoint)}")
    finally:
        run.close()
    return 0


def _follow(run_dir: str, endpoint: str, poll: float = 1.0) -> int:
    """Push a run's spans as its ticks commit until it is no longer running."""
    live = LiveOtlp(run_dir, endpoint).start()
    print(f"following {run_dir} → {live.url} (Ctrl-C stops)")
    try:
        while read_status(run_dir) in ("running", "paused"):
            time.sleep(poll)
    except KeyboardInterrupt:
        pass
    stats = live.stop()
    print(
        f"pushed {stats['pushed']} of {stats['seen']} spans to {live.url}"
        + (f"; {stats['dropped']} dropped ({stats['last_error']})" if stats["dropped"] else "")
    )
    return 0 if not stats["dropped"] else 1
