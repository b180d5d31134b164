"""Real benchmark clients against ``agentlab sim-serve``: guidellm, aiperf, the openai SDK
and litellm, unmodified, with output lengths and prompt tokens checked.

Each client asks for ``--prompt-tokens`` prompts (counted by the client with the Llama-3
tokenizer directory ``scripts/peer_tools.sh`` exports, the vocabulary sim/vllm-3b counts
with) and ``--output-tokens`` replies (``ignore_eos``, as these tools ask for fixed lengths)
from ``sim-serve --profile vllm-3b`` at ``--concurrency``. Printed per client: requests ok,
output tokens delivered (asked -> min / median / max, as the client counts them), prompt
tokens (client -> server; the server's count must be the client's plus the chat template,
and for guidellm, aiperf and the SDK exactly ``agentlab.llm.tokens.count_prompt_tokens`` of
the prompt sent; guidellm and aiperf run twice, on ``/v1/chat/completions`` and on
``/v1/completions``, where the server's count is the raw prompt's plus
``<|begin_of_text|>``), TTFT and ITL as the client measures them.

    python benchmarks/peer_clients.py [--quick] [--json OUT] [--keep DIR]

Needs ``scripts/peer_tools.sh`` (run first, installs guidellm 0.8.x and aiperf 0.13.x into
``.venv-peers/``); exits non-zero if any client fails or a check does not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ALL_CLIENTS = "guidellm,guidellm-completions,aiperf,aiperf-completions,sdk,litellm"
QUICK_CLIENTS = "guidellm,aiperf,sdk,litellm"  # (the /v1/completions runs: full run only)
MODEL = "llama-3.2-3b"  # the served name (clients are given the tokenizer directory)


def peer_paths() -> dict[str, str]:
    """Install (if needed) and locate the peer tools: GUIDELLM, AIPERF, PEER_TOKENIZER."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "peer_tools.sh")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])


@contextmanager
def sim_serve(profile: str, sets: list[str]) -> Iterator[str]:
    """``agentlab sim-serve`` in its own process; yields its base URL (no ``/v1``)."""
    port = _free_port()
    cmd = [sys.executable, "-m", "agentlab.cli", "sim-serve", "--profile", profile]
    cmd += ["--port", str(port), "--served-model-name", MODEL]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("sim-serve did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _dist(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "min": values[0],
        "median": statistics.median(values),
        "p95": values[min(len(values) - 1, int(0.95 * len(values)))],
        "max": values[-1],
    }


def _prompt_tokens(messages: list[dict[str, Any]]) -> int:
    from agentlab.llm.tokens import count_prompt_tokens

    return count_prompt_tokens(messages, tokenizer="llama3")


def _payload_tokens(payload: dict[str, Any]) -> int:
    """The prompt tokens vLLM reports for a request body: a chat prompt rendered with the
    template, a raw ``prompt`` (``/v1/completions``) as its text plus ``<|begin_of_text|>``."""
    if "messages" in payload:
        return _prompt_tokens(payload["messages"])
    from agentlab.llm.tokens import count_text_tokens

    return count_text_tokens(payload["prompt"], tokenizer="llama3") + 1


def run_guidellm(
    exe: str, tok: str, url: str, a: argparse.Namespace, out: Path, endpoint: str = "chat"
) -> dict[str, Any]:
    """guidellm 0.8: synthetic prompts of ``prompt_tokens``, ``output_tokens`` asked;
    ``endpoint`` ``chat`` or ``completions`` (its ``request_format``)."""
    report = out / f"guidellm-{endpoint}.json"
    fmt = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    backend = f"kind=openai_http,target={url},model={MODEL},request_format={fmt}"
    cmd = [exe, "run", "--backend", backend]
    cmd += ["--profile", f"kind=concurrent,streams={a.concurrency}"]
    cmd += ["--constraint", f"kind=max_requests,count={a.requests}"]
    cmd += ["--data", f"kind=synthetic_text,prompt_tokens={a.prompt_tokens},"
            f"output_tokens={a.output_tokens}"]  # fmt: skip
    cmd += ["--tokenizer", f"kind=hf_auto,model={tok}"]
    cmd += ["--output", f"kind=json,path={report}", "--disable-console-interactive"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # guidellm spawns up to 10 worker processes, each importing it afresh (~60 s before the
    # first request on a loaded 2-core box); a few carry this concurrency
    env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(a.guidellm_workers)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out)
    wall = time.perf_counter() - t0
    (out / f"guidellm-{endpoint}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"guidellm failed ({proc.returncode}): {proc.stderr[-2000:]}")
    bench = json.loads(report.read_text())["benchmarks"][0]
    ok = bench["requests"]["successful"]
    exact = 0
    client_prompt = []
    for r in ok:
        body = json.loads(r["request_args"])["body"]
        exact += r["prompt_tokens"] == _payload_tokens(body)
        client_prompt.append(a.prompt_tokens)  # guidellm generates them to this length
    return {
        "tool": "guidellm" if endpoint == "chat" else f"guidellm {endpoint}",
        "ok": len(ok),
        "errors": len(bench["requests"]["errored"]) + len(bench["requests"]["incomplete"]),
        "output_tokens": _dist([r["output_metrics"]["text_tokens"] for r in ok]),
        "server_output_tokens": _dist([r["output_tokens"] for r in ok]),
        "client_prompt_tokens": _dist(client_prompt),
        "server_prompt_tokens": _dist([r["prompt_tokens"] for r in ok]),
        "server_prompt_exact": exact,
        "ttft_ms": _dist([r["time_to_first_token_ms"] for r in ok]),
        "itl_ms": _dist([r["inter_token_latency_ms"] for r in ok]),
        "wall_s": round(wall, 1),
    }


def run_aiperf(
    exe: str, tok: str, url: str, a: argparse.Namespace, out: Path, endpoint: str = "chat"
) -> dict[str, Any]:
    """aiperf 0.13: synthetic prompts, ``ignore_eos`` via ``--extra-inputs``; ``endpoint``
    ``chat`` (``/v1/chat/completions``) or ``completions`` (``/v1/completions``: a raw
    prompt, which the server counts with the tokenizer's ``<|begin_of_text|>`` only)."""
    art = out / f"aiperf-{endpoint}"
    cmd = [exe, "profile", "-m", MODEL, "--url", url, "--endpoint-type", endpoint, "--streaming"]
    cmd += ["--tokenizer", tok, "--concurrency", str(a.concurrency)]
    cmd += ["--request-count", str(a.requests), "--output-artifact-dir", str(art)]
    cmd += ["--prompt-input-tokens-mean", str(a.prompt_tokens), "--prompt-input-tokens-stddev", "0"]
    cmd += ["--prompt-output-tokens-mean", str(a.output_tokens)]
    cmd += ["--prompt-output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true"]
    cmd += ["--random-seed", "0"]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # refuses local dirs
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out)
    wall = time.perf_counter() - t0
    (out / "aiperf.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"aiperf failed ({proc.returncode}): {proc.stderr[-2000:]}")
    d = json.loads((art / "profile_export_aiperf.json").read_text())
    # the prompts it sent (inputs.json, by session) against the server's count of each
    sent = {
        s["session_id"]: s["payloads"][0]
        for s in json.loads((art / "inputs.json").read_text())["data"]
    }
    exact = 0
    for line in (art / "profile_export.jsonl").read_text().splitlines():
        rec = json.loads(line)
        payload = sent.get(rec["metadata"].get("conversation_id"))
        server = rec["metrics"].get("usage_prompt_tokens", {}).get("value")
        exact += payload is not None and server == _payload_tokens(payload)

    def stat(key: str) -> dict[str, float]:
        s = d[key]
        return {"min": s["min"], "median": s["p50"], "p95": s["p95"], "max": s["max"]}

    return {
        "tool": "aiperf" if endpoint == "chat" else f"aiperf {endpoint}",
        "ok": int(d["request_count"]["avg"]),
        "errors": int(d["request_count"]["avg"]) - int(d["completed_request_count"]["avg"])
        if "completed_request_count" in d
        else 0,
        "output_tokens": stat("output_sequence_length"),
        "server_output_tokens": stat("usage_completion_tokens"),
        "client_prompt_tokens": stat("input_sequence_length"),
        "server_prompt_tokens": stat("usage_prompt_tokens"),
        "server_prompt_exact": exact,
        "osl_mismatch_count": d.get("osl_mismatch_count", {}).get("avg"),
        "usage_discrepancy_count": d.get("usage_discrepancy_count", {}).get("avg"),
        "ttft_ms": stat("time_to_first_token"),
        "itl_ms": stat("inter_token_latency"),
        "wall_s": round(wall, 1),
    }


async def _sdk_one(client: Any, a: argparse.Namespace, i: int) -> dict[str, Any]:
    words = ("share the plan and vote on the next step " * 400).split()
    messages = [{"role": "user", "content": f"{i} " + " ".join(words[: a.prompt_tokens - 1])}]
    t0 = time.perf_counter()
    stamps: list[float] = []
    text = []
    usage = None
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=a.output_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append(time.perf_counter())
            text.append(chunk.choices[0].delta.content)
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None
    from agentlab.llm.tokens import count_text_tokens

    return {
        "client_out": count_text_tokens("".join(text), tokenizer="llama3"),
        "server_out": usage.completion_tokens,
        "client_prompt": count_text_tokens(messages[0]["content"], tokenizer="llama3"),
        "server_prompt": usage.prompt_tokens,
        "exact": usage.prompt_tokens == _prompt_tokens(messages),
        "ttft_ms": (stamps[0] - t0) * 1e3,
        "itl_ms": (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1) * 1e3,
    }


def run_sdk(url: str, a: argparse.Namespace) -> dict[str, Any]:
    """The openai SDK, streaming with ``include_usage``, ``ignore_eos`` in ``extra_body``."""
    import openai

    async def go() -> list[dict[str, Any]]:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        sem = asyncio.Semaphore(a.concurrency)

        async def one(i: int) -> dict[str, Any]:
            async with sem:
                return await _sdk_one(client, a, i)

        return await asyncio.gather(*(one(i) for i in range(a.requests)))

    t0 = time.perf_counter()
    rows = asyncio.run(go())
    return _summary("openai SDK", rows, time.perf_counter() - t0)


def run_litellm(url: str, a: argparse.Namespace) -> dict[str, Any]:
    """litellm ``acompletion`` (``hosted_vllm/``), non-streaming, ``ignore_eos``."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    from agentlab.llm.tokens import count_text_tokens

    async def one(i: int) -> dict[str, Any]:
        messages = [{"role": "user", "content": f"request {i}: summarise the thread " * 20}]
        t0 = time.perf_counter()
        r = await litellm.acompletion(
            model=f"hosted_vllm/{MODEL}",
            api_base=url + "/v1",
            api_key="none",
            messages=messages,
            max_tokens=a.output_tokens,
            extra_body={"ignore_eos": True},
        )
        latency = (time.perf_counter() - t0) * 1e3
        return {
            "client_out": count_text_tokens(r.choices[0].message.content, tokenizer="llama3"),
            "server_out": r.usage.completion_tokens,
            "client_prompt": count_text_tokens(messages[0]["content"], tokenizer="llama3"),
            "server_prompt": r.usage.prompt_tokens,
            "exact": r.usage.prompt_tokens == _prompt_tokens(messages),
            "ttft_ms": latency,  # non-streaming: the whole reply
            "itl_ms": 0.0,
        }

    async def go() -> list[dict[str, Any]]:
        return await asyncio.gather(*(one(i) for i in range(max(2, a.requests // 4))))

    t0 = time.perf_counter()
    return _summary("litellm", asyncio.run(go()), time.perf_counter() - t0)


def _summary(tool: str, rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    return {
        "tool": tool,
        "ok": len(rows),
        "errors": 0,
        "output_tokens": _dist([r["client_out"] for r in rows]),
        "server_output_tokens": _dist([r["server_out"] for r in rows]),
        "client_prompt_tokens": _dist([r["client_prompt"] for r in rows]),
        "server_prompt_tokens": _dist([r["server_prompt"] for r in rows]),
        "server_prompt_exact": sum(r["exact"] for r in rows),
        "ttft_ms": _dist([r["ttft_ms"] for r in rows]),
        "itl_ms": _dist([r["itl_ms"] for r in rows]),
        "wall_s": round(wall, 1),
    }


def check(rows: list[dict[str, Any]], a: argparse.Namespace) -> list[str]:
    """What does not hold: every request answered, the asked length delivered (the server's
    count exactly; the client's within one token: the Llama-3 vocabulary splits 4 of the
    simulator's 110 words in two when they start a reply, capitalised), the server's prompt
    count exact where the prompt is known."""
    problems = []
    for r in rows:
        tool = r["tool"]
        if r["errors"] or r["ok"] == 0:
            problems.append(f"{tool}: {r['errors']} failed requests")
        so = r["server_output_tokens"]
        if not so["min"] == so["max"] == a.output_tokens:
            problems.append(f"{tool}: server delivered {so} tokens, asked {a.output_tokens}")
        co = r["output_tokens"]
        if co["min"] < a.output_tokens or co["max"] > a.output_tokens + 1:
            problems.append(f"{tool}: client counted {co} tokens, asked {a.output_tokens}")
        if "server_prompt_exact" in r and r["server_prompt_exact"] != r["ok"]:
            problems.append(
                f"{tool}: server prompt count exact for {r['server_prompt_exact']} of {r['ok']}"
            )
    return problems


def _fmt(d: dict[str, float]) -> str:
    return f"{d['median']:.0f} ({d['min']:.0f}-{d['max']:.0f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="under a minute: the chat API only (guidellm, aiperf, openai SDK, litellm), "
        "4 requests of 64 output tokens per client (each client's own start is ~15 s)",
    )
    p.add_argument("--requests", type=int, default=None, help="per client (16; --quick 4)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--output-tokens", type=int, default=None, help="asked (256; --quick 64)")
    p.add_argument("--profile", default="vllm-3b")
    p.add_argument("--set", action="append", default=[], help="sim-serve --set FIELD=VALUE")
    p.add_argument(
        "--clients",
        default=None,
        help="comma-separated (all six; --quick: guidellm,aiperf,sdk,litellm)",
    )
    p.add_argument("--guidellm-workers", type=int, default=2, help="its worker processes")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--keep", default=None, help="keep the clients' reports in this directory")
    a = p.parse_args()
    if a.requests is None:
        a.requests = 4 if a.quick else 16
    if a.output_tokens is None:
        a.output_tokens = 64 if a.quick else 256
    if a.clients is None:
        a.clients = QUICK_CLIENTS if a.quick else ALL_CLIENTS
    paths = peer_paths()
    wanted = a.clients.split(",")
    unknown = sorted(set(wanted) - set(ALL_CLIENTS.split(",")))
    if unknown:
        p.error(f"unknown client(s) {', '.join(unknown)}; valid: {ALL_CLIENTS}")
    out = Path(a.keep or tempfile.mkdtemp(prefix="peer-clients-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with sim_serve(a.profile, a.set) as url:
        tok = paths["PEER_TOKENIZER"]
        if "guidellm" in wanted:
            rows.append(run_guidellm(paths["GUIDELLM"], tok, url, a, out))
        if "guidellm-completions" in wanted:
            rows.append(run_guidellm(paths["GUIDELLM"], tok, url, a, out, "completions"))
        if "aiperf" in wanted:
            rows.append(run_aiperf(paths["AIPERF"], tok, url, a, out))
        if "aiperf-completions" in wanted:
            rows.append(run_aiperf(paths["AIPERF"], tok, url, a, out, "completions"))
        if "sdk" in wanted:
            rows.append(run_sdk(url, a))
        if "litellm" in wanted:
            rows.append(run_litellm(url, a))
    print(
        f"sim-serve --profile {a.profile} {' '.join(a.set)}: {a.requests} requests per "
        f"client at concurrency {a.concurrency}, {a.prompt_tokens} prompt tokens, "
        f"{a.output_tokens} output tokens asked (ignore_eos)"
    )
    head = ("client", "ok", "out tok client", "out tok server", "prompt client",
            "prompt server", "exact", "TTFT ms", "ITL ms", "wall s")  # fmt: skip
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([
            r["tool"], str(r["ok"]), _fmt(r["output_tokens"]), _fmt(r["server_output_tokens"]),
            _fmt(r["client_prompt_tokens"]), _fmt(r["server_prompt_tokens"]),
            str(r.get("server_prompt_exact", "-")),
            f"{r['ttft_ms']['median']:.0f} (p95 {r['ttft_ms']['p95']:.0f})",
            f"{r['itl_ms']['median']:.1f}", str(r["wall_s"]),
        ]))  # fmt: skip
    problems = check(rows, a)
    for line in problems:
        print("FAIL:", line)
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "problems": problems}, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
