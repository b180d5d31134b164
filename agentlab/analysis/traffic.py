"""Traffic both ways: export a run's LLM traffic as a replayable trace, and replay a trace
against any OpenAI-compatible endpoint, recording the result as a new run.

**Trace** (``trace.jsonl``, one call per line, ordered by start)::

    {"schema_version": 1, "id": "r1a2-7", "t": 0.52, "agent_id": "llm-00003",
     "labels": {"stage": "react", "iteration": 0}, "tick": 1, "prompt_tokens": 612,
     "completion_tokens": 118, "stream": false, "latency": 0.31, "parent": "r1a2-3",
     "think_s": 0.004}

``t`` is the call's start in seconds from the first call. ``parent`` is the dependency:
the call of the same agent (``agent_id``, else the ``sender`` label) in the same tick that
ended last before this one started — an agent's calls form a chain, as a ReAct loop or a
discussion turn does; ``think_s`` is the gap between the parent's end and this start.
Calls with no such predecessor are roots.

**Replay** (:func:`replay_traffic`, ``agentlab replay-traffic RUN --base-url URL``):
*open loop* sends each call at ``t / speed`` whatever the server does (a fixed arrival
process, as serving benchmarks do); *closed loop* sends roots at ``t / speed`` and every
other call ``think_s`` after its parent's answer arrives (the society's dependencies, so a
slower server stretches the run as it would stretch the society). Prompts are synthetic
text of about ``prompt_tokens`` tokens (4 characters per token, as the simulator counts)
and ask for ``completion_tokens`` tokens via ``max_tokens``. Every call lands in the new
run's ``llm_calls`` with the original call id as ``labels.trace_id``.

**Serving-benchmark files** (:func:`export_traffic`): ``sharegpt.json`` for ``vllm bench
serve --dataset-name sharegpt``, **the vLLM file that keeps each call's output length**
(:mod:`agentlab.analysis.sharegpt`); ``vllm_custom.jsonl`` for ``--dataset-name custom``,
**which loses output lengths**: vLLM's ``CustomDataset`` reads only ``prompt`` and asks for
``--custom-output-len`` tokens (default 256) for every request; the ``output_tokens`` field
is there for people, vLLM ignores it. ``guidellm.jsonl`` for GuideLLM's ``--data`` (``prompt``, ``prompt_tokens_count``,
``output_tokens_count``). These carry sizes only, not timing or dependencies.
``mooncake_trace.jsonl`` for aiperf's ``--custom-dataset-type mooncake_trace``
(``timestamp`` in ms from the first call, ``input_length``, ``output_length``; replay it
with ``--fixed-schedule``) and ``guidellm_trace.jsonl`` for guidellm's
``kind=trace_synthetic`` data (its default columns: ``timestamp`` in seconds,
``input_length``, ``output_length``, ``duration``): each tool reads them with no column
overrides, timing kept (``tests/analysis/test_traffic_peers.py`` reads them with the
tools' own readers).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from agentlab.analysis.sharegpt import export_sharegpt
from agentlab.analysis.traffic_calls import SCHEMA_VERSION, traffic_trace

__all__ = ["SCHEMA_VERSION", "export_traffic", "load_trace", "replay_traffic", "traffic_trace"]

_WORDS = ("alpha", "delta", "kilo", "lima", "mike", "oscar", "papa", "romeo", "tango")
_CALL_COLUMNS = {
    "request_id": "VARCHAR", "model": "VARCHAR", "start": "DOUBLE", "end": "DOUBLE",
    "first_token": "DOUBLE", "queue_wait": "DOUBLE", "agent_id": "VARCHAR", "labels": "JSON",
    "prompt_tokens": "BIGINT", "completion_tokens": "BIGINT", "outcome": "VARCHAR",
    "error": "VARCHAR", "attempts": "BIGINT", "stream": "BOOLEAN", "stage": "VARCHAR",
    "trace_id": "VARCHAR", "tick": "BIGINT", "run_id": "VARCHAR", "schema_version": "BIGINT",
}  # fmt: skip


def synthetic_prompt(tokens: int, seed: str) -> str:
    """Deterministic filler text of about ``tokens`` tokens (4 characters each)."""
    n = max(1, 4 * max(0, tokens - 4))  # the simulator adds 4 tokens per message
    k = sum(map(ord, seed))
    words: list[str] = []
    size = 0
    while size < n:
        w = _WORDS[k % len(_WORDS)]
        k = (k * 1103515245 + 12345) & 0x7FFFFFFF
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:n]


def export_traffic(run: Any, out: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``trace.jsonl``, ``vllm_custom.jsonl`` (vLLM ignores its output lengths: use
    ``sharegpt.json``), ``sharegpt.json`` (``vllm bench serve --dataset-name sharegpt``,
    lengths kept under the Llama-3 tokenizer), ``guidellm.jsonl``, ``mooncake_trace.jsonl``
    (aiperf) and ``guidellm_trace.jsonl`` into ``out``.

    Returns:
        ``{"trace": path, "vllm": path, "sharegpt": path, "guidellm": path,
        "mooncake": path, "guidellm_trace": path}``.
    """
    trace = traffic_trace(run)
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"trace": d / "trace.jsonl", "vllm": d / "vllm_custom.jsonl"}
    paths["guidellm"] = d / "guidellm.jsonl"
    paths["mooncake"] = d / "mooncake_trace.jsonl"
    paths["guidellm_trace"] = d / "guidellm_trace.jsonl"
    with (
        paths["trace"].open("w") as ft,
        paths["vllm"].open("w") as fv,
        paths["guidellm"].open("w") as fg,
        paths["mooncake"].open("w") as fm,
        paths["guidellm_trace"].open("w") as fgt,
    ):
        for c in trace:
            ft.write(json.dumps(c, sort_keys=True) + "\n")
            prompt = synthetic_prompt(c["prompt_tokens"], c["id"])
            out_tok = max(1, c["completion_tokens"])
            fv.write(json.dumps({"prompt": prompt, "output_tokens": out_tok}) + "\n")
            row = {"prompt": prompt, "prompt_tokens_count": c["prompt_tokens"]}
            fg.write(json.dumps(row | {"output_tokens_count": out_tok}) + "\n")
            sizes = {"input_length": max(1, c["prompt_tokens"]), "output_length": out_tok}
            fm.write(json.dumps({"timestamp": round(c["t"] * 1000.0, 3)} | sizes) + "\n")
            timing = {"timestamp": round(c["t"], 6), "duration": round(c["latency"], 6)}
            fgt.write(json.dumps(timing | sizes) + "\n")
    paths["sharegpt"] = export_sharegpt(run, d / "sharegpt.json")["path"]
    return paths


def load_trace(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read ``trace.jsonl`` (a file, or a run directory: its traffic is exported on the fly).

    Raises:
        ConfigError: a line is not a trace call, or a parent id is unknown.
    """
    from agentlab.errors import ConfigError

    p = Path(path)
    if p.is_dir():
        return traffic_trace(p)
    calls = []
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            c = json.loads(line)
            float(c["t"]), int(c["prompt_tokens"]), int(c["completion_tokens"]), str(c["id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{p}:{i}: not a trace call ({exc!r}): {line[:120]}") from None
        calls.append(c)
    ids = {c["id"] for c in calls}
    for c in calls:
        if c.get("parent") is not None and c["parent"] not in ids:
            raise ConfigError(f"{p}: call {c['id']} has unknown parent {c['parent']!r}")
    return calls


async def replay_traffic(
    trace: Any,
    base_url: str,
    out: str | os.PathLike[str],
    *,
    model: str = "openai/default",
    mode: str = "open",
    speed: float = 1.0,
    timeout: float = 120.0,
    max_retries: int = 0,
    progress: bool = True,
) -> Path:
    """Fire a trace at an OpenAI-compatible endpoint; the calls become run ``out``.

    Args:
        trace: a trace (list of dicts), a ``trace.jsonl`` path or a run directory.
        base_url: e.g. ``http://127.0.0.1:8600/v1``.
        out: the new run directory (must not exist yet or be empty).
        model: litellm model string sent for every call (``openai/<served name>``).
        mode: ``"open"`` (original arrival times) or ``"closed"`` (dependencies).
        speed: time compression (2.0 replays twice as fast).
        timeout, max_retries: per call, as for :class:`~agentlab.llm.LLMClient`.
        progress: a bar of the calls answered (and failed) over the trace's span.

    Raises:
        ConfigError: bad ``mode``/``speed``, ``out`` already holds files, or nothing
            answers at ``base_url`` (checked first: a replay at the trace's own pace runs
            for as long as the trace, and every call would fail).
    """
    from agentlab.errors import ConfigError, LLMError
    from agentlab.llm import LLMClient
    from agentlab.store.manifest import write_manifest
    from agentlab.store.replay import get_replay_sink

    if mode not in ("open", "closed"):
        raise ConfigError(f"unknown replay mode {mode!r}; valid: 'open', 'closed'")
    if not speed > 0:
        raise ConfigError(f"speed must be > 0, got {speed}")
    calls = trace if isinstance(trace, list) else load_trace(trace)
    run_dir = Path(out)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(f"{run_dir} is not empty; replay-traffic writes a new run")
    await asyncio.to_thread(_check_reachable, base_url)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"base_url": base_url, "model": model, "mode": mode, "speed": speed, "calls": len(calls)}
    write_manifest(run_dir, kind="traffic_replay", config=cfg, seed=None)
    sink = get_replay_sink(run_dir)
    sink.register("llm_calls", _CALL_COLUMNS, description="replayed calls", module=__name__)
    # a fixed limit: the trace, not our limiter, decides how much is in flight
    client = LLMClient(
        model, base_url=base_url, timeout=timeout, max_retries=max_retries, concurrency=1 << 20
    )
    from agentlab.llm.litellm_backend import import_litellm

    import_litellm()  # seconds of import must not delay the first arrivals
    loop = asyncio.get_running_loop()
    t_start = loop.time()
    done: dict[str, asyncio.Event] = {c["id"]: asyncio.Event() for c in calls}
    bar = _progress_bar(calls, mode, speed, progress)
    failed = 0

    async def fire(c: dict[str, Any]) -> None:
        parent = c.get("parent") if mode == "closed" else None
        if parent is not None:
            await done[parent].wait()
            await asyncio.sleep(float(c.get("think_s") or 0.0) / speed)
        else:
            await asyncio.sleep(max(0.0, t_start + float(c["t"]) / speed - loop.time()))
        msgs = [{"role": "user", "content": synthetic_prompt(c["prompt_tokens"], c["id"])}]
        labels = dict(c.get("labels") or {}) | {"trace_id": c["id"]}
        try:
            resp = await client.complete(
                msgs,
                agent_id=c.get("agent_id"),
                labels=labels,
                stream=bool(c.get("stream")),
                max_tokens=max(1, int(c["completion_tokens"])),
            )
            record = resp.record
        except LLMError as exc:
            record = exc.record  # type: ignore[attr-defined]
            nonlocal failed
            failed += 1
            bar.set_postfix_str(f"failed={failed}", refresh=False)
        finally:
            done[c["id"]].set()
            bar.update(1)
        row = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
        row = {k: v for k, v in row.items() if k in _CALL_COLUMNS}
        row |= {"stage": labels.get("stage"), "trace_id": c["id"], "tick": c.get("tick")}
        sink.append("llm_calls", row | {"run_id": run_dir.name})

    try:
        await asyncio.gather(*(fire(c) for c in calls))
    finally:
        bar.close()
    await sink.aflush()
    return run_dir


def _check_reachable(base_url: str, timeout: float = 10.0) -> None:
    """Refuse a ``base_url`` nothing listens at (any HTTP answer, even a 404, will do)."""
    import urllib.error
    import urllib.request

    from agentlab.errors import ConfigError

    url = base_url.rstrip("/") + "/models"
    try:
        urllib.request.urlopen(url, timeout=timeout).close()
    except urllib.error.HTTPError:
        return  # a server answered
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(f"nothing answers at {base_url} ({reason}); is the server up?") from None


def _progress_bar(calls: list[dict[str, Any]], mode: str, speed: float, enabled: bool) -> Any:
    from agentlab.core.progress_bar import progress_bar

    span = max((float(c.get("t") or 0.0) for c in calls), default=0.0) / speed
    desc = f"replay ({mode} loop, trace span {span:,.0f} s)" if mode == "open" else "replay"
    return progress_bar(len(calls), desc, "call", enabled=enabled)


def main(args: Any) -> int:
    """CLI entry (``agentlab replay-traffic``)."""
    if args.export:
        paths = export_traffic(args.run, args.export)
        print(f"replay-traffic: wrote {', '.join(str(p) for p in paths.values())}")
        if not args.base_url:
            return 0
    if not args.base_url or not args.out:
        from agentlab.errors import ConfigError

        raise ConfigError("replay-traffic needs --base-url and --out (or only --export DIR)")
    out = asyncio.run(
        replay_traffic(
            args.run,
            args.base_url,
            args.out,
            model=args.model,
            mode=args.mode,
            speed=args.speed,
            timeout=args.timeout,
        )
    )
    return _report_replay(out, f"{args.mode} loop replay of {args.run}", args.base_url, args.model)


#: a replay in which more than this share of calls failed exits non-zero
MAX_FAILED_SHARE = 0.5


def _report_replay(out: Path, what: str, base_url: str, model: str) -> int:
    """Print where the replay went and how many calls failed; the exit code.

    A replay whose calls mostly failed (a model the server does not serve, a wrong base
    URL, a server that is down) measured nothing: it says so on stderr and exits 1
    instead of a plain "recorded in ..." and 0.
    """
    import sys

    from agentlab.store.run import open_run

    calls = open_run(out).df("llm_calls")
    failed = calls[calls["outcome"] != "ok"] if len(calls) else calls
    print(f"replay-traffic: {what} recorded in {out}")
    if not len(failed):
        return 0
    first = failed.iloc[0]
    msg = (
        f"replay-traffic: {len(failed)} of {len(calls)} calls failed (first: "
        f"{first['outcome']}: {str(first['error'])[:300]}); model {model!r} at {base_url}"
    )
    if len(failed) / len(calls) > MAX_FAILED_SHARE:
        print(f"{msg}: the replay measured no served traffic. Check --model (the "
              "server's model name, prefixed with openai/) and --base-url", file=sys.stderr)  # fmt: skip
        return 1
    print(msg, file=sys.stderr)
    return 0
