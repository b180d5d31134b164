"""Client CPU per call over real HTTP: the lean path vs litellm vs the ``openai`` SDK.

One ``agentlab sim-serve --profile instant`` process on 127.0.0.1 serves every row, so the
server's CPU is not in the figures; each row is this process's ``time.process_time`` over
its calls divided by the number of calls, sequential, one call in flight:

- ``LLMClient(transport="lean")`` on its own HTTP/1.1 client (:mod:`agentlab.llm.http1`,
  httptools), and the same on aiohttp (``AGENTLAB_LEAN_HTTP=aiohttp``, the client of the
  previous release: "before" in the same run);
- ``LLMClient(transport="litellm")`` — the same client over ``litellm.acompletion``;
- ``openai.AsyncOpenAI().chat.completions.create`` — the SDK alone, no agentlab work
  (no records, limiter or retries): a reference for what a plain HTTP client costs;
- ``openai_http.acall`` / ``astream`` alone: the lean transport without the client's
  limiter, stream task and records;
- bare ``http1`` and bare ``aiohttp`` posting the lean path's exact request bytes and
  reading the reply without parsing it: the floor under each HTTP client.

A streamed reply costs more than a plain one even at the floor: the server writes each SSE
event separately (as vLLM does, one per token), so the client takes one socket read and
wake-up per event, ~10-20 µs of kernel and event loop each on this 2-core VM whatever
the client. A second table runs 32 calls in flight, as a society does; a third streams
from a second sim-serve framed like vLLM, one SSE event per token, to price an event.

Each plain (non-streaming) and streaming, in interleaved repetitions (the best of each path
is shown). Target: lean <= 300 us client CPU per call.

    python benchmarks/lean_client.py [--quick] [--json PATH] [--before DIR]

``--before DIR`` adds a table of the lean client's rows (plain, streamed with 15 and 33
events, one call and 32 in flight) on the code in ``DIR`` and on this checkout, in child
processes that alternate against the same two servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

MSGS = [{"role": "user", "content": "Summarise the discussion in one sentence."}]
TARGET_US = 300.0
REPS = 3  # interleaved repetitions per path (5 without --quick); the least disturbed one is kept
_CLOSERS: list[Callable[[], Awaitable[Any]]] = []  # clients to close before the loop ends


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """``agentlab sim-serve`` in its own process; returns it and its base URL."""
    port = _free_port()
    exe = shutil.which("agentlab", path=os.path.dirname(sys.executable))
    head = [exe] if exe else [sys.executable, "-m", "agentlab.cli"]
    cmd = [*head, "sim-serve", "--profile", "instant", "--port", str(port), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    for _ in range(300):
        try:
            urllib.request.urlopen(base + "/models", timeout=1).read()
            return proc, base
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"sim-serve did not answer on {base}")


def _sys_s() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


async def _cpu_per_call(fn: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    """(process CPU, of which kernel/system CPU) in microseconds per call."""
    for _ in range(min(20, n)):  # warm connections, caches and lazy imports
        await fn()
    s0, t0 = _sys_s(), time.process_time()
    for _ in range(n):
        await fn()
    cpu, sys_ = time.process_time() - t0, _sys_s() - s0
    return cpu / n * 1e6, sys_ / n * 1e6


def _client_fns(base: str, transport: str) -> tuple[Any, Any]:
    from agentlab.llm import LLMClient

    c = LLMClient("openai/instant", base_url=base, seed=0, transport=transport)

    async def plain() -> None:
        await c.complete(MSGS)

    async def stream() -> None:
        async for _ in c.stream(MSGS):
            pass

    return plain, stream


def _sdk_fns(base: str) -> tuple[Any, Any]:
    import openai

    sdk = openai.AsyncOpenAI(base_url=base, api_key="sk-none", max_retries=0)
    _CLOSERS.append(sdk.close)

    async def plain() -> None:
        await sdk.chat.completions.create(model="instant", messages=MSGS)  # type: ignore[arg-type]

    async def stream() -> None:
        s = await sdk.chat.completions.create(
            model="instant",
            messages=MSGS,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        async for _ in s:
            pass

    return plain, stream


def _bare_fns(base: str, client: str) -> tuple[Any, Any]:
    """An HTTP client alone posting the lean path's exact request bytes and reading the
    reply without parsing it: the floor under the lean path on that client."""
    from agentlab.llm import LLMClient, http1, openai_http

    c = LLMClient("openai/instant", base_url=base, seed=0, transport="lean")
    reqs = {
        stream: openai_http._request(c._lkw(MSGS, None, None, dict(c._req_defaults), 0), stream)
        for stream in (False, True)
    }
    target = http1.Target(reqs[False][0])
    raws = {s: http1.encode(target, body, headers) for s, (_, body, headers) in reqs.items()}

    if client == "httptools":

        async def plain() -> None:
            r = await http1.request(target, raws[False], 60.0)
            await r.read()
            r.release()

        async def stream() -> None:
            r = await http1.request(target, raws[True], 60.0)
            while await r.read_some():
                pass
            r.release()

        return plain, stream

    async def aplain() -> None:
        url, body, headers = reqs[False]
        async with openai_http._session().post(url, data=body, headers=headers) as resp:
            await resp.read()

    async def astream() -> None:
        url, body, headers = reqs[True]
        async with openai_http._session().post(url, data=body, headers=headers) as resp:
            async for _ in resp.content.iter_any():
                pass

    return aplain, astream


def _transport_fns(base: str) -> tuple[Any, Any]:
    """``openai_http.acall`` / ``astream`` alone: the lean transport's parse without the
    client around it (no limiter, stream task or records)."""
    from agentlab.core.clock import RealClock
    from agentlab.llm import LLMClient, openai_http

    c = LLMClient("openai/instant", base_url=base, seed=0, transport="lean")
    clock = RealClock()

    async def plain() -> None:
        await openai_http.acall(clock, **c._lkw(MSGS, None, None, dict(c._req_defaults), 0))

    async def stream() -> None:
        holder: list[Any] = []
        kw = c._lkw(MSGS, None, None, dict(c._req_defaults), 0)
        async for _ in openai_http.astream(clock, holder, **kw):
            pass

    return plain, stream


PER_TOKEN = (
    "lean (LLMClient, httptools)",
    "lean (LLMClient, aiohttp: before)",
    "litellm (LLMClient)",
    "httptools alone (no parse)",
)
HTTP = "AGENTLAB_LEAN_HTTP"  # openai_http.HTTP_ENV, named here to keep imports lazy
# name -> (count key, how to make its two functions, the HTTP client it runs on)
PATHS: dict[str, tuple[str, Callable[[str], tuple[Any, Any]], str]] = {
    "lean (LLMClient, httptools)": ("lean", lambda b: _client_fns(b, "lean"), "httptools"),
    "lean (LLMClient, aiohttp: before)": ("lean", lambda b: _client_fns(b, "lean"), "aiohttp"),
    "litellm (LLMClient)": ("litellm", lambda b: _client_fns(b, "litellm"), "auto"),
    "openai SDK alone (no records)": ("sdk", _sdk_fns, "auto"),
    "lean transport alone (httptools)": ("lean", _transport_fns, "httptools"),
    "httptools alone (no parse)": ("lean", lambda b: _bare_fns(b, "httptools"), "httptools"),
    "aiohttp alone (no parse)": ("lean", lambda b: _bare_fns(b, "aiohttp"), "aiohttp"),
}


async def _run(
    base: str, counts: dict[str, int], reps: int, only: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    paths = {
        name: (counts[k], make(base), http)
        for name, (k, make, http) in PATHS.items()
        if not only or name in only
    }
    # Interleaved repetitions, each path's best kept: on a shared box the load drifts
    # within a run, and sequential rows would compare different loads.
    got: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in paths}
    for _ in range(reps):
        for name, (n, (plain, stream), http) in paths.items():
            os.environ[HTTP] = http
            p_us, p_sys = await _cpu_per_call(plain, n // reps)
            s_us, s_sys = await _cpu_per_call(stream, n // reps)
            got[name].append((p_us, p_sys, s_us, s_sys))
    for close in _CLOSERS:
        await close()
    rows = []
    for name, reps in got.items():
        p_us, p_sys = min((r[0], r[1]) for r in reps)
        s_us, s_sys = min((r[2], r[3]) for r in reps)
        rows.append(
            {
                "path": name,
                "calls": paths[name][0],
                "plain_us": round(p_us, 1),
                "plain_sys_us": round(p_sys, 1),
                "stream_us": round(s_us, 1),
                "stream_sys_us": round(s_sys, 1),
            }
        )
    return rows


async def _wide_us(fn: Callable[[], Awaitable[Any]], calls: int, width: int) -> float:
    """CPU per call in microseconds with ``width`` calls in flight."""
    await asyncio.gather(*(fn() for _ in range(width)))  # warm the pool
    t0 = time.process_time()
    for _ in range(calls // width):
        await asyncio.gather(*(fn() for _ in range(width)))
    return (time.process_time() - t0) / (calls // width * width) * 1e6


async def _concurrent(base: str, calls: int, width: int, reps: int) -> list[dict[str, Any]]:
    """CPU per call with ``width`` calls in flight (a society's traffic): socket wake-ups
    are shared between connections, so what is left is each call's own Python."""
    out = []
    for http in ("httptools", "aiohttp"):
        os.environ[HTTP] = http
        plain, stream = _client_fns(base, "lean")
        row: dict[str, Any] = {"path": f"lean ({http}), {width} in flight", "calls": calls}
        for kind, fn in (("plain", plain), ("stream", stream)):
            best = min([await _wide_us(fn, calls, width) for _ in range(reps)])
            row[f"{kind}_us"] = round(best, 1)
        out.append(row)
    return out


# --before: the lean client's rows, measured in a child process on one checkout
SIDE = ("plain", "stream", "stream per token", "plain, 32 in flight", "stream, 32 in flight",
        "stream, no socket", "stream per token, no socket")  # fmt: skip
READS = ("reads per stream", "reads per stream per token")


async def _side_rows(base: str, base_t: str, n: int, wide: int) -> dict[str, float]:
    """One pass over :data:`SIDE` with whatever ``agentlab`` this process imports."""
    plain, stream = _client_fns(base, "lean")
    _, stream_t = _client_fns(base_t, "lean")
    out = {
        "plain": (await _cpu_per_call(plain, n))[0],
        "stream": (await _cpu_per_call(stream, n))[0],
        "stream per token": (await _cpu_per_call(stream_t, n))[0],
        "plain, 32 in flight": await _wide_us(plain, wide, 32),
        "stream, 32 in flight": await _wide_us(stream, wide, 32),
    }
    # After the timings: socket reads per streamed call. The server writes each event
    # separately, so a client that is quicker between reads takes more, smaller reads.
    from agentlab.llm import http1

    seen = [0]
    received = http1.Response.data_received

    def counted(self: Any, data: bytes) -> None:
        seen[0] += 1
        received(self, data)

    http1.Response.data_received = counted  # type: ignore[method-assign]
    for key, fn in (("reads per stream", stream), ("reads per stream per token", stream_t)):
        seen[0] = 0
        for _ in range(100):
            await fn()
        out[key] = seen[0] / 100
    http1.Response.data_received = received  # type: ignore[method-assign]
    out |= await _no_socket_rows(base, base_t, n)
    return out


class _Replay:
    """A captured SSE reply handed out one event per read, each after one loop turn: the
    socket's place in ``openai_http._post``, so the client's Python is timed alone."""

    status = 200

    def __init__(self, events: list[bytes]) -> None:
        self._it = iter(events)

    async def read_some(self) -> bytes:
        await asyncio.sleep(0)
        return next(self._it, b"")

    async def read(self) -> bytes:
        return b""

    def release(self, drain: bool = False) -> None:
        pass


async def _no_socket_rows(base: str, base_t: str, n: int) -> dict[str, float]:
    """Streamed calls of ``LLMClient`` on captured replies (no socket, no kernel): CPU
    that does not depend on how the server's writes coalesce into reads."""
    from agentlab.llm import openai_http

    out = {}
    post = openai_http._post
    for key, url in (("stream, no socket", base), ("stream per token, no socket", base_t)):
        events = [e + b"\n\n" for e in _stream_body(url).split(b"\n\n") if e]

        async def replay(prepared: Any, timeout: float, ev: list[bytes] = events) -> _Replay:
            return _Replay(ev)

        openai_http._post = replay  # type: ignore[assignment]
        _, stream = _client_fns(url, "lean")
        out[key] = (await _cpu_per_call(stream, n))[0]
    openai_http._post = post
    return out


def _side_by_side(before: str, base: str, base_t: str, n: int, wide: int, reps: int) -> list[str]:
    """The lean client's rows on the ``before`` checkout and on this one, in child
    processes that alternate ``reps`` times against the same servers (the least CPU of
    each is kept, and every run's figure is printed, for the spread)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    got: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(reps):
        order = (("before", before), ("after", here))
        for code, src in order if i % 2 == 0 else order[::-1]:  # neither always goes first
            env = {**os.environ, "PYTHONPATH": src, HTTP: "httptools"}
            cmd = [sys.executable, os.path.abspath(__file__), "--side-worker",
                   base, base_t, str(n), str(wide)]  # fmt: skip
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            got[code].append(json.loads(out.stdout.strip().splitlines()[-1]))
    lines = [f"lean client (httptools), before = {before}, after = this checkout; us CPU per "
          f"call, least of {reps} alternating child runs [all runs]"]  # fmt: skip
    lines.append(f"{'row':<24} {'before':>8} {'after':>8}   before runs / after runs")
    for row in SIDE:
        b = [r[row] for r in got["before"]]
        a = [r[row] for r in got["after"]]
        runs = f"{' '.join(f'{x:.0f}' for x in b)} / {' '.join(f'{x:.0f}' for x in a)}"
        lines.append(f"{row:<24} {min(b):>8.0f} {min(a):>8.0f}   {runs}")
    for row in READS:  # not CPU: the mean over the runs
        b = [r[row] for r in got["before"]]
        a = [r[row] for r in got["after"]]
        lines.append(f"{row:<24} {sum(b) / len(b):>8.1f} {sum(a) / len(a):>8.1f}   (socket reads)")
    return lines


def _events_per_stream(base: str) -> int:
    return _stream_body(base).count(b"data:")


def _stream_body(base: str) -> bytes:
    req = urllib.request.Request(
        base + "/chat/completions",
        data=json.dumps(
            {"model": "instant", "messages": MSGS, "stream": True,
             "stream_options": {"include_usage": True}}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as r:
        return bytes(r.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (< 1 minute)")
    ap.add_argument("--json", default=None, help="write the figures to this path")
    ap.add_argument(
        "--before",
        default=None,
        metavar="DIR",
        help="also run the lean client's rows on the checkout in DIR (e.g. "
        "`git archive REV | tar -x -C DIR`) and on this one, alternating",
    )
    ap.add_argument("--side-worker", nargs=4, default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--side-only", action="store_true", help="with --before: only the side-by-side table"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="alternating child runs for --before (default: 3, 5 without --quick)",
    )
    args = ap.parse_args()
    if args.side_worker:  # a child of --before: one pass, figures as JSON on stdout
        base, base_t, n, wide = args.side_worker
        print(json.dumps(asyncio.run(_side_rows(base, base_t, int(n), int(wide)))))
        return 0
    k = 1 if args.quick else 5
    counts = {"lean": 600 * k, "litellm": 60 * k, "sdk": 300 * k}
    # a coarse stream (3 tokens an SSE event: ~12 a reply) and vLLM's framing, one event
    # per token (sim-serve's default since it streams as vLLM: both were one event per
    # token, and the per-event figure divided by zero)
    proc, base = start_server("--tokens-per-chunk", "3")
    proc_t, base_t = start_server()
    saved = os.environ.get(HTTP)
    try:
        events, events_t = _events_per_stream(base), _events_per_stream(base_t)
        reps = REPS if args.quick else 5
        side = []
        if args.before:
            side = _side_by_side(
                args.before, base, base_t, counts["lean"], 640 * k, args.repeat or reps
            )
            if args.side_only:
                print(f"streamed replies: {events} SSE events, one per token {events_t}")
                print("\n".join(side))
                return 0
        rows = asyncio.run(_run(base, counts, reps))
        wide = asyncio.run(_concurrent(base, 640 * k, 32, reps))
        per_token = asyncio.run(_run(base_t, counts, reps, PER_TOKEN))
    finally:
        if saved is None:
            os.environ.pop(HTTP, None)
        else:
            os.environ[HTTP] = saved
        for p in (proc, proc_t):
            p.terminate()
            p.wait(timeout=10)
    lean = rows[0]
    print(f"client CPU per call in us (user+system; the kernel's share in brackets), one call in "
          f"flight; a streamed reply is {events} SSE events")  # fmt: skip
    print(f"{'path':<36} {'calls':>6} {'plain':>12} {'stream':>12} {'x lean':>13}")
    for r in rows:
        r["ratio_plain_vs_lean"] = round(r["plain_us"] / lean["plain_us"], 1)
        r["ratio_stream_vs_lean"] = round(r["stream_us"] / lean["stream_us"], 1)
        plain = f"{r['plain_us']:.0f} ({r['plain_sys_us']:.0f})"
        stream = f"{r['stream_us']:.0f} ({r['stream_sys_us']:.0f})"
        ratio = f"{r['ratio_plain_vs_lean']:.1f} / {r['ratio_stream_vs_lean']:.1f}"
        print(f"{r['path']:<36} {r['calls']:>6} {plain:>12} {stream:>12} {ratio:>13}")
    print(f"{'':<36} {'calls':>6} {'plain':>12} {'stream':>12}")
    for r in wide:
        print(f"{r['path']:<36} {r['calls']:>6} {r['plain_us']:>12.0f} {r['stream_us']:>12.0f}")
    print(f"streamed as vLLM frames it, one SSE event per token ({events_t} events a reply):")
    for r in per_token:
        print(f"{r['path']:<36} {r['calls']:>6} {'':>12} {r['stream_us']:>12.0f}")
    ok = lean["plain_us"] <= TARGET_US and lean["stream_us"] <= TARGET_US
    print(
        f"target lean <= {TARGET_US:.0f} us CPU per call (plain and stream, one in flight): "
        f"{'MET' if ok else 'NOT MET'}"
    )
    floor = next(r for r in rows if r["path"].startswith("httptools alone"))
    over_p = lean["plain_us"] - floor["plain_us"]
    over_s = lean["stream_us"] - floor["stream_us"]
    print(f"lean above its HTTP client alone: plain +{over_p:.0f} us, stream +{over_s:.0f} us")
    lean_t, floor_t = per_token[0], per_token[-1]
    ev = events_t - events
    if ev > 0:
        print(
            f"per SSE event ({events} -> {events_t} events): lean "
            f"{(lean_t['stream_us'] - lean['stream_us']) / ev:.1f} us, httptools alone "
            f"{(floor_t['stream_us'] - floor['stream_us']) / ev:.1f} us"
        )
    print("\n".join(side))
    if args.json:
        out = {"rows": rows, "in_flight_32": wide, "sse_events_per_stream": events}
        out |= {"one_event_per_token": per_token, "sse_events_per_token_stream": events_t}
        out |= {"target_us": TARGET_US, "target_met": ok}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
