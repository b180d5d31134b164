"""A provider model with no API key fails at once, saying so (it was retried 4 times, 6 s a
call, as a server error: litellm reports the SDK's missing-credentials refusal as a 500)."""

from __future__ import annotations

import pytest

from agentlab.errors import ProviderError
from agentlab.llm import LLMClient


@pytest.mark.slow  # litellm's import, when it is the first in the session: ~7-10 s
async def test_a_missing_api_key_is_not_retried_and_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    llm = LLMClient("openai/gpt-4o-mini", seed=0, max_retries=3)
    with pytest.raises(ProviderError, match="no API key: set the provider's key variable") as e:
        await llm.complete([{"role": "user", "content": "hi"}])
    assert e.value.retryable is False
    record = getattr(e.value, "record", None)
    assert record is not None and record.attempts == 1
