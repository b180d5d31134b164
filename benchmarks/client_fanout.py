"""The client-side gap of a fan-out: how far apart "simultaneous" requests reach the server.

A workflow that fans out k calls at once (``asyncio.gather``: the Star reviewers, the
execution stage) sends them one after another: each coroutine builds and writes its request
before the next one runs. The gap between their arrivals at the server is the send-side CPU
of one request, not the client's whole CPU per call (parsing the reply comes later). This
measures that gap for real clients against a local HTTP server in another process, which
timestamps each request when it has been read whole.

``sim/vllm-3b``'s ``client_overhead_s`` is the mean gap of the OpenAI SDK measured here
(the paper's client is not published; the SDK is what OpenAI-compatible vLLM clients use),
see ``datasets/make_vllm_3b_profile.py``.

    python benchmarks/client_fanout.py [--quick] [--fanouts 100] [--k 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import statistics
import time
from pathlib import Path
from typing import Any

REPLY = json.dumps({
    "id": "x", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()  # fmt: skip


def _serve(port: int, out: Any, n: int) -> None:
    arrivals: list[float] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            if not head:
                return
            size = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    size = int(line.split(b":")[1])
            await r.readexactly(size)
            arrivals.append(time.perf_counter())
            await asyncio.sleep(0.02)  # a short reply, after the whole fan-out has arrived
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                    + str(len(REPLY)).encode() + b"\r\n\r\n" + REPLY)  # fmt: skip
            await w.drain()
            if len(arrivals) >= n:
                out.put(arrivals)

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", port)
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _messages(i: int) -> list[dict[str, str]]:
    # a reviewer-sized prompt (~6,000 characters), distinct per request
    return [{"role": "system", "content": f"You are reviewer {i}."},
            {"role": "user", "content": ("Review the proposal. " * 300) + str(i)}]  # fmt: skip


async def _fanouts(kind: str, port: int, fanouts: int, k: int) -> None:
    base = f"http://127.0.0.1:{port}/v1"
    if kind == "openai":
        from openai import AsyncOpenAI

        client: Any = AsyncOpenAI(base_url=base, api_key="x", max_retries=0)

        async def one(i: int) -> None:
            await client.chat.completions.create(model="m", messages=_messages(i))
    else:
        import httpx

        client = httpx.AsyncClient(base_url=base)

        async def one(i: int) -> None:
            await client.post("/chat/completions", json={"model": "m", "messages": _messages(i)})

    for _ in range(2):  # connections opened before measuring (a warm client)
        await asyncio.gather(*(one(i) for i in range(k)))
    for f in range(fanouts):
        await asyncio.gather(*(one(f * k + i) for i in range(k)))
        await asyncio.sleep(0.05)  # the next fan-out clearly apart


def measure(kind: str, fanouts: int = 100, k: int = 3) -> dict[str, Any]:
    """Gaps (s) between consecutive arrivals within each fan-out of ``k`` requests."""
    port, q = _port(), mp.Queue()
    n = (fanouts + 2) * k
    proc = mp.Process(target=_serve, args=(port, q, n), daemon=True)
    proc.start()
    time.sleep(0.5)
    try:
        asyncio.run(_fanouts(kind, port, fanouts, k))
        arrivals = q.get(timeout=30)[2 * k :]
    finally:
        proc.terminate()
        proc.join()
    gaps = [b - a for j in range(0, len(arrivals), k)
            for a, b in zip(arrivals[j : j + k], arrivals[j + 1 : j + k], strict=False)]  # fmt: skip
    q_ = statistics.quantiles(gaps, n=20)
    return {"client": kind, "fanouts": fanouts, "k": k, "gaps": len(gaps),
            "mean_s": statistics.fmean(gaps), "median_s": statistics.median(gaps),
            "p05_s": q_[0], "p95_s": q_[-1]}  # fmt: skip


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 fan-outs (a few seconds)")
    ap.add_argument("--fanouts", type=int, default=None, help="fan-outs per client (100)")
    ap.add_argument("--k", type=int, default=3, help="requests per fan-out (Star: 3 reviewers)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    fanouts = args.fanouts or (20 if args.quick else 100)
    rows = [measure(kind, fanouts, args.k) for kind in ("httpx", "openai")]
    print(
        f"{'client':8s} {'gaps':>5s} {'mean ms':>8s} {'median ms':>9s} {'p05 ms':>7s} {'p95 ms':>7s}"
    )
    for r in rows:
        print(f"{r['client']:8s} {r['gaps']:5d} {1e3 * r['mean_s']:8.3f} {1e3 * r['median_s']:9.3f} "
              f"{1e3 * r['p05_s']:7.3f} {1e3 * r['p95_s']:7.3f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
