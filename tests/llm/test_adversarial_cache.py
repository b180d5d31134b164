"""Adversarial: the response cache of real-provider runs (``llm/cache_backend.py``) and
its replay (``cache:RUN``), through real HTTP servers, the lean client and real litellm.

A call the provider answered must be recorded and replay the same, whatever its text;
a run directory made again in the same process records into the new directory; a cache
in the old line format (``json.dumps``) replays.
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentlab.errors import ProviderError
from agentlab.llm import LLMClient
from agentlab.llm import cache_backend as cb
from tests.llm.test_openai_http_transport import MSGS, Scripted, _client, json_reply

# a reply whose text ends in half an emoji, as a Python server's json.dumps escapes it:
# json.loads (the openai SDK, litellm) reads it as a lone surrogate
CUT = "cut emoji \ud83d"
CUT_BODY = (
    b'{"choices":[{"message":{"role":"assistant","content":"cut emoji \\ud83d"},'
    b'"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}'
)


def _texts(n: int) -> Any:
    async def reply(i: int, w: asyncio.StreamWriter) -> bool:
        text = f"answer {i}".encode()
        body = CUT_BODY if i % n == 0 else CUT_BODY.replace(b"cut emoji \\ud83d", text)
        w.write(json_reply(body))
        await w.drain()
        return True

    return reply


def _auto(url: str, **kw: Any) -> LLMClient:
    """The lean client as most runs get it: ``transport`` left at ``"auto"``."""
    return LLMClient("openai/m", base_url=url, seed=0, max_retries=0, **kw)


async def _replay(run: Path, msgs: list[list[dict[str, Any]]]) -> list[str]:
    rep = LLMClient(f"cache:{run}", max_retries=0)
    return [(await rep.complete(m)).text for m in msgs]


async def test_a_lean_client_run_with_a_cut_emoji_reply_records_and_replays(
    tmp_path: Path,
) -> None:
    """Recorded through ``transport="lean"``, replayed by ``cache:RUN``: the replay used
    to refuse the recorded transport (ConfigError), and the lean client refused a reply
    litellm accepts (orjson rejects the lone surrogate escape): now both answer."""
    run = tmp_path / "run"
    msgs = [[{"role": "user", "content": f"q{i}"}] for i in range(4)]
    async with Scripted(_texts(2)) as srv:
        c = _client(srv.url).with_cache(str(run))
        got = [(await c.complete(m)).text for m in msgs]
    assert got == ["answer 1", CUT, "answer 3", CUT]
    assert await _replay(run, msgs) == got


async def test_a_prompt_with_a_lone_surrogate_is_an_llm_error_on_the_lean_client(
    tmp_path: Path,
) -> None:
    """litellm fails such a request as a provider error; the lean client raised a bare
    ``TypeError`` from orjson instead (not an ``LLMError``: no record, no retry rules)."""
    async with Scripted(_texts(2)) as srv:
        c = _client(srv.url).with_cache(str(tmp_path / "run"))
        with pytest.raises(ProviderError, match="cannot be sent as JSON") as info:
            await c.complete([{"role": "user", "content": "bytes \udc80 from a file"}])
        assert info.value.record.attempts == 1  # type: ignore[attr-defined]
        assert srv.requests == 0


@pytest.mark.slow  # litellm's import: ~7-10 s on this machine when it is the first
async def test_litellm_reply_with_a_lone_surrogate_is_recorded_not_a_crash(
    tmp_path: Path,
) -> None:
    """Through real litellm the reply is read (json.loads) and must then be recorded: the
    orjson line writer raised ``TypeError`` after the provider had answered."""
    run = tmp_path / "run"
    async with Scripted(_texts(1)) as srv:
        c = LLMClient("openai/m", base_url=srv.url, api_key_env="AGENTLAB_NO_KEY",
                      transport="litellm", max_retries=0).with_cache(str(run))  # fmt: skip
        r = await c.complete(MSGS)
    assert r.text == CUT
    assert await _replay(run, [MSGS]) == [CUT]
    # the import heap is frozen once per process, not again on every later import
    from agentlab.llm.litellm_backend import import_litellm

    frozen = gc.get_freeze_count()
    for _ in range(3):
        import_litellm()
    assert gc.get_freeze_count() == frozen


async def test_a_run_directory_deleted_and_made_again_records_into_the_new_one(
    tmp_path: Path,
) -> None:
    """A notebook deletes a run and creates it again in the same kernel: the recorder of
    the first (its file kept open) wrote the new run's attempts into the deleted file."""
    run = tmp_path / "run"
    async with Scripted(_texts(1000)) as srv:
        first = [(await _auto(srv.url).with_cache(str(run)).complete(MSGS)).text]
        shutil.rmtree(run)
        c = _auto(srv.url).with_cache(str(run))
        second = [(await c.complete([{"role": "user", "content": f"x{i}"}])).text for i in range(3)]
    assert first == ["answer 1"]
    assert await _replay(run, [[{"role": "user", "content": f"x{i}"}] for i in range(3)]) == second
    with pytest.raises(cb.CacheMissError):  # the deleted run's attempt is not in the new cache
        await _replay(run, [MSGS])


async def test_a_cache_in_the_old_line_format_and_two_clients_on_one_cache(
    tmp_path: Path,
) -> None:
    """Lines as the old code wrote them (``json.dumps``, sorted keys, ASCII escapes) replay
    the same; two clients of different settings recording into one run share its cache."""
    run = tmp_path / "run"
    async with Scripted(_texts(1000)) as srv:
        a = _auto(srv.url).with_cache(str(run))
        b = _auto(srv.url, temperature=0.5).with_cache(str(run))
        ask = [{"role": "user", "content": "ünï ✓"}]
        texts = [(await a.complete(ask)).text, (await b.complete(ask)).text]
        texts.append((await a.complete(ask)).text)  # the same request again: occurrence 1
    for r in cb._RECORDERS.values():
        r.close()
    files = sorted((run / cb.CACHE_DIR).glob("*.jsonl"))
    assert len(files) == 1
    for f in files:  # rewrite in the old format
        lines = [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines()]
        f.write_text("".join(json.dumps(e, sort_keys=True, default=str) + "\n" for e in lines))
    # the replay follows a's settings (the config of the first client to record)
    assert await _replay(run, [ask, ask]) == [texts[0], texts[2]]
    assert texts[1] != texts[0]
