"""Token ids of prompts as the served model's tokenizer produces them: what vLLM's
``POST /tokenize`` and ``POST /detokenize`` answer (``agentlab sim-serve`` serves both).

The simulator only ever *counts* tokens (:mod:`agentlab.llm.tokens`); a researcher checking
that count, or a client that asks the server for token ids, needs the ids themselves. Here
a chat prompt is laid out as the pieces :meth:`Llama3Tokenizer.prompt_tokens` counts, in
order — the template's special tokens and headers, then each text, each encoded on its
own — so ``len(chat_token_ids(...))`` is the count the simulator charges, by construction
of the same layout (``tests/llm/test_serve_tokenize.py`` and ``test_tokens_additive.py``
hold the ids equal to the whole rendered prompt encoded at once, on conversations with
tools, tool calls, tool results, content parts and system prompts, and on the persona
agents' own prompts). Texts are encoded as ordinary text, as the count does: a
message holding the literal ``<|eot_id|>`` counts its characters, where vLLM's Hugging
Face tokenizer would read one special token (no agent writes such text).

Only an exact vocabulary has ids: a ``chars:R`` profile estimates counts, and asking it for
ids raises :class:`~agentlab.errors.ConfigError` (sim-serve then answers with the count and
``tokens: null``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentlab.errors import ConfigError
from agentlab.llm.tokens import Llama3Tokenizer, Tokenizer, message_text, tool_calls_text

__all__ = ["chat_pieces", "chat_token_ids", "decode_ids", "raw_token_ids", "token_strings"]

#: (text, special): a piece of a rendered prompt, encoded with special tokens read as such
#: (the template's own) or as ordinary text (what a message says)
Piece = tuple[str, bool]


def _llama3(tok: Tokenizer) -> Llama3Tokenizer:
    if not isinstance(tok, Llama3Tokenizer):
        raise ConfigError(
            f"tokenizer {tok.name!r} estimates token counts; it has no token ids "
            "(a profile with tokenizer='llama3' has them)"
        )
    return tok


def chat_pieces(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> list[Piece]:
    """The Llama 3.1 / 3.2 Instruct chat prompt, in the pieces
    :meth:`~agentlab.llm.tokens.Llama3Tokenizer.prompt_tokens` counts, in order."""
    t = Llama3Tokenizer  # the layout's texts, one place with the count's (tokens.py)
    header, eot = t.header, (t.EOT, True)
    msgs = list(messages)
    out: list[Piece] = [(t.BOS + header("system"), True)]
    if tools:
        out.append((t.IPYTHON_ENV, True))
    out.append((t.DATES, True))
    if msgs and msgs[0].get("role") == "system":
        out.append((message_text(msgs[0].get("content")).strip(), False))
        msgs = msgs[1:]
    out.append(eot)
    if tools:
        first = message_text(msgs[0].get("content")).strip() if msgs else ""
        msgs = msgs[1:]
        out += [(header("user"), True), (t.tools_block(tools), False), (first, False), eot]
    for m in msgs:
        role = str(m.get("role", "user"))
        if m.get("tool_calls"):
            out += [(header("assistant"), True), (tool_calls_text(m["tool_calls"]), False)]
        elif role in ("tool", "ipython"):
            c = m.get("content")
            text = c if isinstance(c, str) else json.dumps(c, ensure_ascii=False, default=str)
            if text[:1].isspace():  # not stripped: its whitespace joins the header's "\n\n"
                out += [(header("ipython")[:-2], True), ("\n\n" + text, False)]
            else:
                out += [(header("ipython"), True), (text, False)]
        else:
            out += [(header(role), True), (message_text(m.get("content")).strip(), False)]
        out.append(eot)
    if add_generation_prompt:
        out.append((header("assistant"), True))
    return out


def _encode(tok: Llama3Tokenizer, pieces: Sequence[Piece]) -> list[int]:
    enc = tok.encoding
    ids: list[int] = []
    for text, special in pieces:
        if text:
            ids += enc.encode(text, allowed_special="all") if special else enc.encode_ordinary(text)
    return ids


def chat_token_ids(
    tok: Tokenizer,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> list[int]:
    """The token ids of a chat prompt (template, tool schemas and generation prompt), as
    :meth:`~agentlab.llm.tokens.Llama3Tokenizer.prompt_tokens` counts them.

    Raises:
        ConfigError: ``tok`` estimates counts (``chars:R``): no ids.
    """
    return _encode(_llama3(tok), chat_pieces(messages, tools, add_generation_prompt))


def raw_token_ids(tok: Tokenizer, text: str, *, add_special_tokens: bool = True) -> list[int]:
    """The token ids of a raw-text prompt (``/v1/completions``): ``<|begin_of_text|>``
    first when ``add_special_tokens`` (vLLM's default), then the text.

    Raises:
        ConfigError: ``tok`` estimates counts (``chars:R``): no ids.
    """
    bos = Llama3Tokenizer.BOS if add_special_tokens else ""
    return _encode(_llama3(tok), [(bos, True), (text, False)])


def _check_ids(tok: Llama3Tokenizer, ids: Sequence[int]) -> None:
    top = tok.encoding.n_vocab
    bad = [i for i in ids if not 0 <= i < top]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the vocabulary (0 to {top - 1})")


def decode_ids(tok: Tokenizer, ids: Sequence[int]) -> str:
    """The text of ``ids`` (special tokens spelled out, as vLLM's ``/detokenize``).

    Raises:
        ConfigError: ``tok`` estimates counts (``chars:R``): no ids.
        ValueError: an id outside the vocabulary.
    """
    t = _llama3(tok)
    _check_ids(t, ids)
    return str(t.encoding.decode(list(ids)))


def token_strings(tok: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Each id's text (invalid UTF-8 of a partial character replaced), for ``/tokenize``'s
    ``return_token_strs``."""
    t = _llama3(tok)
    _check_ids(t, ids)
    one = t.encoding.decode_single_token_bytes
    return [one(i).decode("utf-8", "replace") for i in ids]
