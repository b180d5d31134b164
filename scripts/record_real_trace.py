"""Record a real server's traffic at several concurrency levels and prompt sizes.

``python scripts/record_real_trace.py --base-url http://127.0.0.1:P/v1 --out trace.csv``
(main ``.venv``; start the server with ``scripts/real_server.sh``). For each concurrency
level ``c``, ``c`` closed-loop clients each send requests back to back through
``LLMClient`` → litellm (streaming, so TTFT is observed), cycling through short, medium
and long prompts; every call becomes one row of ``llm_calls``-like columns plus
``concurrency`` and ``prompt_size``. Levels run one after another (never overlapping).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import pandas as pd

from agentlab.llm import LLMClient

_TOPICS = ["rivers", "bridges", "markets", "forests", "trains", "music", "bread", "stars"]
_FILLER = (
    "Background notes from the previous discussion round: the team compared options, "
    "listed risks, and asked each member to summarise their view in plain words. "
)
SIZES = {"short": 0, "medium": 3, "long": 9}  # filler repetitions (~33 tokens each)


def prompt(i: int, size: str) -> list[dict[str, str]]:
    topic = _TOPICS[i % len(_TOPICS)]
    body = _FILLER * SIZES[size] + f"Now write a short paragraph about {topic} (request {i})."
    return [{"role": "user", "content": body}]


async def level(client: LLMClient, c: int, per_client: int, seed0: int) -> list[dict]:
    """``c`` closed-loop clients, ``per_client`` calls each."""
    rows: list[dict] = []
    sizes = list(SIZES)

    async def worker(w: int) -> None:
        for k in range(per_client):
            i = seed0 + w * per_client + k
            size = sizes[(w + k) % len(sizes)]
            r = await client.complete(
                prompt(i, size), stream=True, seed=i, labels={"stage": f"paragraph-{size}"}
            )
            d = r.record.to_dict()
            d.update(concurrency=c, prompt_size=size, finish_reason=r.finish_reason)
            d.update(round=seed0 // 100_000, client=f"r{seed0 // 100_000}-c{c}-w{w}")
            d["stage"] = d.pop("labels", {}).get("stage")
            rows.append(d)

    await asyncio.gather(*(worker(w) for w in range(c)))
    return rows


async def main(a: argparse.Namespace) -> None:
    client = LLMClient(
        "openai/smollm2",
        base_url=a.base_url,
        timeout=600.0,
        max_retries=0,
        temperature=0.7,
        max_tokens=a.max_tokens,
        concurrency=64,  # fixed: the AIMD limiter would back off as queueing grows
    )
    # one untimed call first: the server's first request pays one-off start-up costs
    await client.complete(prompt(0, "short"), max_tokens=4)
    rows: list[dict] = []
    # Rounds interleave the levels, so a change in the (shared) machine's load over the
    # recording spreads over every level instead of biasing one.
    for rnd in range(a.rounds):
        for c in [int(x) for x in a.levels.split(",")]:
            t0 = time.time()
            per = max(1, a.calls // c)
            rows += await level(client, c, per, seed0=100_000 * rnd + 1000 * c)
            print(f"round {rnd} concurrency {c}: {per * c} calls in {time.time() - t0:.1f} s", flush=True)
            await asyncio.sleep(0.5)
    df = pd.DataFrame(rows)
    keep = ["request_id", "start", "first_token", "end", "prompt_tokens", "completion_tokens",
            "outcome", "finish_reason", "stage", "concurrency", "prompt_size", "round", "client"]  # fmt: skip
    df = df[[c for c in keep if c in df.columns]]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out, index=False, float_format="%.6f")
    print(f"wrote {len(df)} calls to {a.out}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--calls", type=int, default=8, help="calls per level per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=24)
    asyncio.run(main(ap.parse_args()))
