"""ShareGPT-style JSON for ``vllm bench serve --dataset-name sharegpt``, output lengths kept.

vLLM's reader (``vllm/benchmarks/datasets/sharegpt.py``, ``ShareGPTDataset``) takes the
file as one JSON list (``json.load``); keeps the entries whose ``conversations`` has at
least two turns; takes ``conversations[0]["value"]`` as the prompt and
``conversations[1]["value"]`` as the completion; and asks the server for
``len(tokenizer(completion).input_ids)`` output tokens (unless ``--sharegpt-output-len``
overrides every one). There is no per-entry length field: **the completion's token count
is the output length.** So each entry's completion here is filler text whose token count
under the profile's tokenizer (:mod:`agentlab.llm.tokens`), plus the special tokens the
server's tokenizer adds to a text (``<|begin_of_text|>`` for Llama 3: 1), equals the call's
recorded ``completion_tokens``; the prompt likewise has ``prompt_tokens`` tokens. Prompts
are synthetic (word order drawn per call, so no two share a prefix); only sizes are kept.

The reader also drops, by default, entries with fewer than 4 prompt or output tokens, more
than 1024 prompt tokens, or more than 2048 together (``is_valid_sequence``): agent prompts
often exceed that. :func:`export_sharegpt` counts them (``vllm_drops``) and warns.

```bash
vllm bench serve --model meta-llama/Llama-3.2-3B-Instruct --backend vllm \
    --dataset-name sharegpt --dataset-path out/sharegpt.json --num-prompts 640 \
    --ignore-eos          # the server then writes exactly the recorded lengths
```
"""

from __future__ import annotations

import json
import os
import random
import warnings
from pathlib import Path
from typing import Any

from agentlab.analysis.traffic_calls import traffic_trace
from agentlab.llm.tokens import Tokenizer, get_tokenizer

__all__ = ["VLLM_LIMITS", "export_sharegpt", "text_of_tokens", "vllm_keeps"]

#: vLLM's default ShareGPT filter (``is_valid_sequence``): min tokens, max prompt, max total
VLLM_LIMITS = (4, 1024, 2048)
_WORDS = str.split(  # one Llama-3 token each, with or without a leading space
    "the of and to in is that for it as with was on be by at this from or an are not have "
    "but which they you all were can their one has more been will there when would who so "
    "about out up into than them some time only new over also what other its may after"
)


def vllm_keeps(prompt_len: int, output_len: int, *, fixed_output_len: bool = False) -> bool:
    """Whether vLLM's ShareGPT reader keeps an entry of these token counts (its default
    ``is_valid_sequence`` rule; ``fixed_output_len``: ``--sharegpt-output-len`` given)."""
    min_len, max_prompt, max_total = VLLM_LIMITS
    return not (
        prompt_len < min_len
        or (not fixed_output_len and output_len < min_len)
        or prompt_len > max_prompt
        or prompt_len + output_len > max_total
    )


def text_of_tokens(n: int, tokenizer: str | Tokenizer, seed: str) -> str:
    """Filler text of exactly ``n`` tokens under ``tokenizer`` (``""`` for ``n <= 0``).

    Raises:
        ValueError: no prefix of the filler has exactly ``n`` tokens (not seen with the
            ``llama3`` and ``chars:R`` tokenizers).
    """
    if n <= 0:
        return ""
    tok = get_tokenizer(tokenizer)
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while tok.count(" ".join(parts)) < n:  # enough words (usually one token each)
        for _ in range(max(1, n - size)):
            parts.append(rng.choice(_WORDS))
        size = len(parts)
    text = " ".join(parts)
    lo, hi = 1, len(text)  # the shortest prefix with >= n tokens
    while lo < hi:
        mid = (lo + hi) // 2
        if tok.count(text[:mid]) >= n:
            hi = mid
        else:
            lo = mid + 1
    for end in (lo, lo + 1, lo - 1):
        cut = text[:end].rstrip()
        if tok.count(cut) == n:
            return cut
    raise ValueError(f"no filler of exactly {n} tokens under {tok.name}")


def export_sharegpt(
    run: Any,
    path: str | os.PathLike[str],
    *,
    tokenizer: str | Tokenizer = "llama3",
    special_tokens: int | None = None,
) -> dict[str, Any]:
    """Write the run's LLM calls as a ShareGPT JSON list for ``vllm bench serve``.

    Args:
        run: a run directory or an opened run.
        path: the ``.json`` file to write.
        tokenizer: the tokenizer the lengths are counted with (the server's vocabulary:
            ``"llama3"`` for ``sim/vllm-3b``'s Llama-3.2-3B).
        special_tokens: tokens the server's tokenizer adds to every text
            (``tokenizer(text).input_ids``); default 1 for ``llama3`` (its BOS), else 0.

    Returns:
        ``{"path", "entries", "vllm_drops", "inexact"}``: entries written, how many vLLM's
        default filter would drop, and calls whose length could not be kept (fewer
        recorded tokens than the special tokens alone).
    """
    tok = get_tokenizer(tokenizer)
    extra = special_tokens if special_tokens is not None else int(tok.name == "llama3")
    entries, drops, inexact = [], 0, 0
    for c in traffic_trace(run):
        p, o = int(c["prompt_tokens"]), int(c["completion_tokens"])
        inexact += (p < extra) + (o < extra)
        drops += not vllm_keeps(max(p, extra), max(o, extra))
        entries.append({"id": c["id"], "conversations": [
            {"from": "human", "value": text_of_tokens(p - extra, tok, f"{c['id']}/p")},
            {"from": "gpt", "value": text_of_tokens(o - extra, tok, f"{c['id']}/c")},
        ]})  # fmt: skip
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entries))
    if drops:
        warnings.warn(
            f"{out}: vLLM's ShareGPT reader drops {drops} of {len(entries)} entries by "
            f"default (prompt > {VLLM_LIMITS[1]} or total > {VLLM_LIMITS[2]} tokens, or "
            f"< {VLLM_LIMITS[0]} tokens): their sizes are outside its filter",
            stacklevel=2,
        )
    return {"path": out, "entries": len(entries), "vllm_drops": drops, "inexact": inexact}
