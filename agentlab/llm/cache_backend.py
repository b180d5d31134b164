"""A response cache for real providers: record every attempt, replay a run with no network.

**Recording.** A society run with a real provider (anything that is not ``sim/`` or
``cache:``) writes each attempt's request and answer to ``RUN/llm_cache/*.jsonl`` (one file
per process, kept open and flushed line by line; lines written with orjson, sorted keys)
plus the client config in ``RUN/llm_cache/config.json``.
An attempt that failed (429, timeout, provider error) is recorded with its error, so a
replay retries exactly as the original did.

**Replay.** ``LLMClient("cache:RUN")`` (``Society.create(..., llm="cache:RUN")``) takes the
recorded run's config (model, request defaults, seed, timeout, retries) and answers every
attempt from the cache: same text, tool calls, tokens, finish reason, the same errors, and
the recorded latency (slept on the client's clock). Nothing touches the network.

**Keys.** An attempt is found by ``(key, n)``: ``key`` is the SHA-256 of the canonical JSON
(sorted keys) of the request as sent — model, messages, request parameters (``sim_*``
dropped), tools and response schema, stream flag — and ``n`` counts earlier attempts with
the same key: when recording, in this process and run; when replaying, in this replaying
client (each ``LLMClient("cache:RUN")``, so each replaying run, counts from 0: replaying
the same cache twice in one process answers both alike). Identical requests in flight at
the same time may swap answers between runs; requests that differ in any byte never do. A
miss raises :class:`CacheMissError` naming the request.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import orjson

from agentlab.errors import (
    BadResponseError,
    ConfigError,
    LLMError,
    LLMTimeoutError,
    ProviderError,
    RateLimitError,
    StructuredOutputError,
)
from agentlab.llm.sim_backend import SimResult

__all__ = [
    "CACHE_DIR",
    "CacheMissError",
    "CacheRecorder",
    "CacheReplayer",
    "RecordingTransport",
    "ReplayTransport",
    "get_recorder",
    "request_key",
    "source_config",
]

CACHE_DIR = "llm_cache"
_LINE_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS
SCHEMA_VERSION = 1
_ERRORS: dict[str, type[LLMError]] = {
    c.__name__: c
    for c in (
        RateLimitError,
        LLMTimeoutError,
        ProviderError,
        BadResponseError,
        StructuredOutputError,
    )
}


class CacheMissError(ConfigError):
    """A ``cache:RUN`` replay met a request the recorded run never made."""


def request_key(kw: dict[str, Any], stream: bool) -> tuple[str, dict[str, Any]]:
    """``(sha256 hex, canonical request)`` of one attempt's backend keyword arguments."""
    spec = kw.get("spec")
    request = {
        "model": kw["model"],
        "messages": kw["messages"],
        "params": {k: v for k, v in (kw.get("params") or {}).items() if not k.startswith("sim_")},
        "tools": kw.get("tools"),
        "schema": None if spec is None else spec.schema,
        "stream": stream,
    }
    blob = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest(), request


class CacheRecorder:
    """Appends attempts of one process to ``RUN/llm_cache/<pid>-<random>.jsonl``."""

    def __init__(self, run_dir: str | os.PathLike[str], config: dict[str, Any]) -> None:
        self.dir = Path(run_dir) / CACHE_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "config.json"
        if not cfg.exists():
            tmp = cfg.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(config, sort_keys=True, indent=1))
            os.replace(tmp, cfg)
        self.path = self.dir / f"{os.getpid()}-{os.urandom(3).hex()}.jsonl"
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        # Opened once (on the first attempt) and flushed after every line: the same bytes
        # reach the kernel per attempt as with an open/close per line (so kill -9 loses at
        # most a torn last line either way), without the two extra syscalls per call.
        self._file: IO[bytes] | None = None

    def record(
        self,
        kw: dict[str, Any],
        stream: bool,
        latency: float,
        res: SimResult | None = None,
        error: LLMError | None = None,
        chunks: list[str] | None = None,
    ) -> None:
        """Write one attempt (its answer, or its error) as one JSON line."""
        key, request = request_key(kw, stream)
        with self._lock:
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
            entry: dict[str, Any] = {
                "schema_version": SCHEMA_VERSION,
                "key": key,
                "n": n,
                "request": request,
                "latency": latency,
            }
            if error is not None:
                entry["error"] = {"class": type(error).__name__, "message": str(error)}
            if res is not None:
                entry["result"] = {
                    "text": res.text,
                    "prompt_tokens": res.prompt_tokens,
                    "completion_tokens": res.completion_tokens,
                    "finish_reason": res.finish_reason,
                    "tool_calls": [list(c) for c in res.tool_calls],
                    "ttft": res.first_token - res.arrival,
                    "chunks": chunks,
                }
            f = self._file
            opened = f is None
            if f is None:
                f = self._file = self.path.open("ab")
            f.write(_line(entry))
            f.flush()
        if opened:
            _keep_open(self)

    def close(self) -> None:
        """Close this process's cache file (reopened by the next :meth:`record`)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _line(entry: dict[str, Any]) -> bytes:
    """One cache line. orjson: several times cheaper than json.dumps, and the replayer's
    json.loads reads it; what orjson refuses (a lone surrogate in a prompt or a reply,
    which json.loads accepts from a server; an int past 64 bits) goes through json as
    before, escaped, instead of failing a call the provider already answered."""
    try:
        return orjson.dumps(entry, default=str, option=_LINE_OPTS)
    except TypeError:  # orjson.JSONEncodeError
        return (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()


_RECORDERS: dict[str, CacheRecorder] = {}
#: recorders holding an open file, oldest first: a process that runs many societies keeps
#: at most ``_MAX_OPEN`` cache files open (a closed one reopens on its next attempt)
_OPEN: list[CacheRecorder] = []
_OPEN_LOCK = threading.Lock()
_MAX_OPEN = 8


def _keep_open(rec: CacheRecorder) -> None:
    with _OPEN_LOCK:
        if rec in _OPEN:
            _OPEN.remove(rec)
        _OPEN.append(rec)
        evict = _OPEN[:-_MAX_OPEN]
        del _OPEN[:-_MAX_OPEN]
    for old in evict:  # outside _OPEN_LOCK, and never holding another recorder's lock
        old.close()


_REPLAYERS: dict[str, CacheReplayer] = {}


def get_recorder(run_dir: str, config: dict[str, Any]) -> CacheRecorder:
    """This process's recorder for ``run_dir`` (one file per process and run)."""
    rec = _RECORDERS.get(run_dir)
    if rec is not None and not (rec.dir / "config.json").exists():
        # the run directory was deleted and made again (a notebook re-running a cell): the
        # old recorder's open file is the deleted one, whose lines no replay would see
        rec.close()
        rec = None
    if rec is None:
        rec = _RECORDERS[run_dir] = CacheRecorder(run_dir, config)
    return rec


def source_config(run: str) -> dict[str, Any]:
    """The client config a ``cache:RUN`` replays (``RUN/llm_cache/config.json``).

    Raises:
        ConfigError: the run has no response cache.
    """
    cfg = Path(run) / CACHE_DIR / "config.json"
    try:
        return json.loads(cfg.read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        raise ConfigError(
            f"cache:{run}: no response cache at {cfg}; a run records one when it uses a real "
            "provider (not sim/...)"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"cache:{run}: {cfg} is not valid JSON ({exc})") from None


class CacheReplayer:
    """A recorded run's cache, parsed once per process (see the module docstring).

    It holds no replay position: each :class:`ReplayTransport` (one per replaying client)
    counts its own occurrences and passes them to :meth:`take`.
    """

    def __init__(self, run: str) -> None:
        self.run = run
        self._table: dict[tuple[str, int], dict[str, Any]] = {}
        root = Path(run) / CACHE_DIR
        for path in sorted(root.glob("*.jsonl")):
            with path.open(encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        continue
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue  # a torn last line of a killed process
                    self._table.setdefault((e["key"], int(e["n"])), e)

    def __len__(self) -> int:
        return len(self._table)

    def take(self, kw: dict[str, Any], stream: bool, seen: dict[str, int]) -> dict[str, Any]:
        """The recorded entry of this attempt: the next occurrence of its key in ``seen``
        (the replaying client's counts, updated here).

        Raises:
            CacheMissError: naming the request (model, last message, key, occurrence).
        """
        key, request = request_key(kw, stream)
        n = seen.get(key, 0)
        seen[key] = n + 1
        entry = self._table.get((key, n))
        if entry is None:
            last = request["messages"][-1] if request["messages"] else {}
            known = sum(1 for k, _ in self._table if k == key)
            raise CacheMissError(
                f"cache:{self.run}: no recorded answer for request {key[:16]} occurrence {n} "
                f"(model {request['model']!r}, {len(request['messages'])} messages, last "
                f"{json.dumps(last, default=str)[:200]}); the cache holds {known} "
                f"occurrence(s) of this request and {len(self._table)} attempts in all"
            )
        return entry


def _replayer(model: str) -> CacheReplayer:
    run = model.removeprefix("cache:")
    rep = _REPLAYERS.get(run)
    if rep is None:
        rep = _REPLAYERS[run] = CacheReplayer(run)
    return rep


def _error(entry: dict[str, Any]) -> LLMError:
    err = entry["error"]
    return _ERRORS.get(err["class"], ProviderError)(err["message"])


def _result(entry: dict[str, Any], t0: float, t1: float) -> SimResult:
    r = entry["result"]
    calls = [(str(c[0]), str(c[1]), str(c[2])) for c in r["tool_calls"]]
    res = SimResult(r["text"], r["prompt_tokens"], r["completion_tokens"], t0, None, t1, t1)
    res.finish_reason, res.tool_calls = r["finish_reason"], calls
    res.first_token = t0 + float(r["ttft"])
    return res


class ReplayTransport:
    """The transport of a ``cache:RUN`` client: every attempt answered from the cache."""

    def __init__(self, model: str) -> None:
        self.model = model
        # occurrences per request key, counted by this client (not by the process: a
        # second replay of the same cache in one process starts again from the first)
        self._seen: dict[str, int] = {}

    async def acall(self, clock: Any, **kw: Any) -> SimResult:
        """One non-streaming attempt, replayed (latency slept on ``clock``)."""
        entry = _replayer(self.model).take(kw, False, self._seen)
        t0 = clock.now()
        await clock.sleep(float(entry["latency"]))
        if "error" in entry:
            raise _error(entry)
        return _result(entry, t0, clock.now())

    async def astream(self, clock: Any, holder: list[SimResult], **kw: Any) -> AsyncIterator[str]:
        """A streamed attempt, replayed chunk by chunk; the result is appended to ``holder``."""
        entry = _replayer(self.model).take(kw, True, self._seen)
        t0 = clock.now()
        if "error" in entry:
            await clock.sleep(float(entry["latency"]))
            raise _error(entry)
        r = entry["result"]
        chunks = r.get("chunks") or ([r["text"]] if r["text"] else [])
        ttft, latency = float(r["ttft"]), float(entry["latency"])
        for i, piece in enumerate(chunks):
            at = ttft + (latency - ttft) * (i / max(1, len(chunks) - 1))
            await clock.sleep(t0 + at - clock.now())
            yield piece
        await clock.sleep(t0 + latency - clock.now())
        holder.append(_result(entry, t0, clock.now()))


class RecordingTransport:
    """Wraps a real transport (litellm or the lean HTTP path), recording every attempt."""

    def __init__(self, inner: Any, recorder: CacheRecorder) -> None:
        self.inner, self.recorder = inner, recorder

    async def acall(self, clock: Any, **kw: Any) -> SimResult:
        """One attempt through the inner transport, recorded (answer or error)."""
        t0 = clock.now()
        try:
            res: SimResult = await self.inner.acall(clock, **kw)
        except LLMError as exc:
            self.recorder.record(kw, False, clock.now() - t0, error=exc)
            raise
        self.recorder.record(kw, False, clock.now() - t0, res=res)
        return res

    async def astream(self, clock: Any, holder: list[SimResult], **kw: Any) -> AsyncIterator[str]:
        """A streamed attempt through the inner transport, recorded with its chunks."""
        t0 = clock.now()
        pieces: list[str] = []
        try:
            async for piece in self.inner.astream(clock, holder, **kw):
                pieces.append(piece)
                yield piece
        except LLMError as exc:
            self.recorder.record(kw, True, clock.now() - t0, error=exc)
            raise
        self.recorder.record(kw, True, clock.now() - t0, res=holder[-1], chunks=pieces)
