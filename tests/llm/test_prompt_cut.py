"""The serving front end's prompt cut (``SimProfile.truncate_to_len`` / ``truncate_margin``).

The agentraffic paper's ``llm/serve_llm.py`` cuts a chat-templated prompt longer than
``max_model_len - max_tokens - margin`` tokens to that many (its head kept), and reports the
tokens after the cut; ``sim/vllm-3b`` carries its 11,200 / 128 (4,928 prompt tokens for a
call at the 6,144-token default).
"""

from __future__ import annotations

import pytest

from agentlab.core.clock import VirtualClock
from agentlab.llm import get_profile
from agentlab.llm.sim_backend import SimServer
from agentlab.llm.sim_profiles import SimProfile

# "chars:4": a message of 4,000 characters counts 4 + 4,000 / 4 = 1,004 tokens
LONG = [{"role": "user", "content": "x" * 4000}]
SHORT = [{"role": "user", "content": "x" * 400}]  # 104 tokens


def _server(**kw: object) -> SimServer:
    prof = SimProfile(name="cut", tokenizer="chars:4", max_completion=500, slots=4,
                      prefill_tps=1e4, decode_tps=100.0, **kw)  # type: ignore[arg-type]  # fmt: skip
    return SimServer(prof, 0, VirtualClock())


def test_a_long_prompt_is_cut_to_the_context_less_the_reply_and_the_margin() -> None:
    s = _server(truncate_to_len=1000, truncate_margin=100)
    assert s.plan(LONG).prompt_tokens == 1000 - 500 - 100  # max_completion is the reply's room
    assert s.plan(LONG, params={"max_tokens": 200}).prompt_tokens == 1000 - 200 - 100
    assert s.plan(LONG, params={"max_completion_tokens": 300}).prompt_tokens == 600
    assert s.plan(SHORT).prompt_tokens == 104  # under the limit: as counted
    assert s.prompt_tokens_total == 400 + 700 + 600 + 104


def test_no_cut_by_default_and_at_least_one_token_kept() -> None:
    assert _server().plan(LONG).prompt_tokens == 1004
    tight = _server(truncate_to_len=500, truncate_margin=100)  # 500 - 500 - 100 < 1
    assert tight.plan(LONG).prompt_tokens == 1


def test_the_cut_prompt_is_what_the_engine_prefills() -> None:
    """The engine request carries the tokens kept: the prefill of a cut prompt takes 400
    tokens' time, not 1,004 (idle server, no prefix cache, no overhead)."""
    s = _server(truncate_to_len=1000, truncate_margin=100)
    res = s.plan(LONG)
    assert res.req is not None and res.req.prompt == 400


def test_vllm_3b_cuts_at_the_papers_4928_tokens() -> None:
    prof = get_profile("vllm-3b")
    assert (prof.truncate_to_len, prof.truncate_margin, prof.max_completion) == (11200, 128, 6144)
    s = SimServer(prof, 0, VirtualClock())
    huge = [{"role": "user", "content": "word " * 8000}]
    assert s.plan(huge).prompt_tokens == 11200 - 6144 - 128 == 4928
    assert s.plan(huge, params={"max_tokens": 2048}).prompt_tokens == pytest.approx(8000, abs=40)


def test_sim_serve_stands_in_for_vllm_and_does_not_cut() -> None:
    """vLLM's OpenAI server never cuts a prompt: sim-serve of sim/vllm-3b counts a
    6,000-token prompt whole, unless the cut is asked for by name."""
    from agentlab.llm.sim_serve import SIM_KEY, build_app

    huge = [{"role": "user", "content": "word " * 6000}]
    plain = build_app("sim/vllm-3b")[SIM_KEY]
    assert plain.profile.truncate_to_len == 0
    assert plain.plan(huge).prompt_tokens > 6000
    cut = build_app("sim/vllm-3b", truncate_to_len=11200)[SIM_KEY]
    assert cut.plan(huge).prompt_tokens == 4928
