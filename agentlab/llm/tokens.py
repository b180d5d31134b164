"""Prompt tokens as a real server counts them.

A simulated server charges prefill time per prompt token, so the count decides TTFT. A
:class:`SimProfile` names its tokenizer (``SimProfile.tokenizer``):

- ``"llama3"``: the exact Llama-3 byte-level BPE vocabulary (128,256 tokens, shipped in the
  ``quicktok-v1`` wheel, MIT code; the vocabulary itself is Meta's, under the Meta Llama 3
  Community License) and Llama 3.1 / 3.2 Instruct's chat template as vLLM renders it: the
  ``<|begin_of_text|>``, the system block with its "Cutting Knowledge Date" lines (always
  there, even without a system message), a header and ``<|eot_id|>`` around every message,
  tool schemas as ``json.dumps(tool, indent=4)`` in the first user message with the
  template's instructions, and the assistant header of the generation prompt.
- ``"chars:R"``: an estimate of ``len(text) / R`` tokens per text and 4 per message (the
  generic overhead of a chat template), for servers whose vocabulary is not at hand.
  ``"chars:4"`` is what the simulator counted before tokenizers existed.

Every message's text counts: string content, content parts (the ``text`` of each
``{"type": "text"}`` part, joined by a newline as vLLM joins them for a text-only model;
other parts by their JSON), assistant ``tool_calls`` and ``tool`` results. Counts of
message texts are cached per string, so a growing conversation costs one tokenisation per
new message (a 6,000-character message costs ~45 µs to tokenise once, then a dict lookup).

>>> from agentlab.llm.tokens import count_prompt_tokens, count_text_tokens
>>> count_text_tokens("Hello world, how are you?", tokenizer="llama3")
7
>>> count_prompt_tokens([{"role": "user", "content": "hi"}], tokenizer="chars:4")
4
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import orjson

from agentlab.errors import ConfigError

__all__ = [
    "CharsTokenizer",
    "Llama3Tokenizer",
    "Tokenizer",
    "check_tokenizer_name",
    "count_prompt_tokens",
    "count_text_tokens",
    "dumps_acyclic",
    "get_tokenizer",
    "message_text",
    "tool_calls_text",
]

_CACHE_MAX = 16384  # cached message texts per tokenizer (cleared whole when full)


class Tokenizer(Protocol):
    """What the simulator needs of a tokenizer: texts and whole prompts counted."""

    name: str

    def count(self, text: str) -> int:
        """Tokens of ``text`` alone (no template)."""
        ...

    def prompt_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int:
        """Tokens of the rendered chat prompt, generation prompt included."""
        ...

    def raw_prompt_tokens(self, text: str) -> int:
        """Tokens of a prompt sent as raw text (``/v1/completions``): no chat template, the
        text and the special tokens the server adds in front of it."""
        ...

    def block_segments(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[tuple[str | None, int]]:
        """The rendered chat prompt as pieces ``(identity text, tokens)`` in the order the
        template lays them out, tokens summing to :meth:`prompt_tokens`: where the prefix
        cache's blocks begin and end (``sim_kv.chain_segments``). ``None`` stands for the
        tools list (the caller names it)."""
        ...


def message_text(content: Any) -> str:
    """The text a text-only model sees for one message's ``content``.

    A string is itself; ``None`` is empty; content parts are the ``text`` of each text part
    joined by ``"\\n"`` (vLLM's join for string-content chat templates), other parts (an
    image, audio) by their JSON, which a text-only server would reject anyway.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                texts.append(json.dumps(part, ensure_ascii=False, default=str))
        return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, default=str)


# json.dumps builds a JSONEncoder, a C encoder and a dict for cycle checks on every call:
# more than encoding a tool call's few arguments costs. The same C encoders, built once.
def _c_encoder(ensure_ascii: bool) -> Any:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C encoder
        return None
    quote = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    return make(None, json.JSONEncoder().default, quote, None, ": ", ", ", False, False, True)


_ASCII_ENCODER = _c_encoder(True)
_UTF8_ENCODER = _c_encoder(False)


def dumps_acyclic(value: Any, *, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, ensure_ascii=...)``, exactly, for acyclic values (generated
    tool-call arguments and plans, what ``json.loads`` returned): no cycle check."""
    enc = _ASCII_ENCODER if ensure_ascii else _UTF8_ENCODER
    if enc is None:
        return json.dumps(value, ensure_ascii=ensure_ascii)
    return "".join(enc(value, 0))


def loads_like_json(text: str) -> Any:
    """``json.loads(text)``: orjson's parse (~10x cheaper for a call's few arguments; the same
    values for any JSON both accept), ``json``'s where orjson refuses what ``json`` takes
    (``NaN``, integers past 64 bits, lone surrogates) or raises its error."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def tool_calls_text(calls: Any) -> str:
    """Llama 3's rendering of an assistant message's tool calls (one JSON object each)."""
    out = []
    for call in calls if isinstance(calls, list) else [calls]:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", {})
        text = None
        if isinstance(args, str):
            try:
                text = dumps_acyclic(loads_like_json(args), ensure_ascii=False)
            except ValueError:
                pass
        if text is None:  # a string that is no JSON, or arguments given as an object
            text = json.dumps(args, ensure_ascii=False)
        out.append('{"name": "' + str(fn.get("name", "")) + '", "parameters": ' + text + "}")
    return "".join(out)


def _per_tools(
    cache: dict[int, tuple[Any, Any, int]],
    tools: Sequence[dict[str, Any]],
    render: Callable[[Sequence[dict[str, Any]]], int],
) -> int:
    """``render(tools)``, cached in ``cache`` per tools list: ``id(tools) -> (the list, a
    deep copy of it, the count)``. Agents offer the same list on every call; checking it
    against the copy costs ~3 µs (an edited list is rendered again)."""
    hit = cache.get(id(tools))
    if hit is not None and hit[0] is tools and hit[1] == tools:
        return hit[2]
    n = render(tools)
    try:
        snapshot = copy.deepcopy(tools)
    except Exception:  # an object in a schema that does not copy: not cached
        return n
    if len(cache) >= 64:
        cache.clear()
    cache[id(tools)] = (tools, snapshot, n)
    return n


class CharsTokenizer:
    """``len(text) / chars_per_token`` tokens per text, 4 per message of template.

    For a server whose vocabulary is not at hand; ``chars_per_token`` should come from the
    workload's own published prompt lengths (its source in the profile).
    """

    __slots__ = ("_tools", "chars_per_token", "name")

    PER_MESSAGE = 4

    def __init__(self, chars_per_token: float) -> None:
        if not chars_per_token > 0:
            raise ConfigError(f"tokenizer chars:{chars_per_token}: need a ratio > 0")
        self.chars_per_token = float(chars_per_token)
        self._tools: dict[int, tuple[Any, Any, int]] = {}  # as Llama3Tokenizer's
        self.name = f"chars:{chars_per_token:g}"

    def count(self, text: str) -> int:
        return int(len(text) / self.chars_per_token)

    def raw_prompt_tokens(self, text: str) -> int:
        return self.count(text)  # (an estimate: no template, no special tokens)

    def prompt_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int:
        r = self.chars_per_token
        n = self.PER_MESSAGE * len(messages)
        for m in messages:
            c = m.get("content")
            n += int(len(c if type(c) is str else message_text(c)) / r)
            if m.get("tool_calls"):
                n += int(len(tool_calls_text(m["tool_calls"])) / r)
        if tools:
            n += int(len(json.dumps(list(tools), default=str)) / r)
        return n

    def extend_tokens(self, messages: Sequence[dict[str, Any]], k: int) -> int:
        """What ``messages[k:]`` add to the count of ``messages[:k]`` (a sum per message)."""
        return self.added_tokens(messages[k:], k)

    def added_tokens(self, added: Sequence[dict[str, Any]], k: int) -> int:
        """:meth:`extend_tokens` given ``added``, the messages after the first ``k`` (a
        caller that sliced them already: a slice of a still-encoded history decodes)."""
        return self.prompt_tokens(added)

    def tools_delta(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> int:
        """``prompt_tokens(messages, tools) - prompt_tokens(messages)`` (cached per tools
        list, as :meth:`Llama3Tokenizer._tools_tokens`: a thread offers one list per call)."""
        if not tools:
            return 0
        return _per_tools(self._tools, tools, lambda t: self.prompt_tokens((), t))

    def block_segments(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[tuple[str | None, int]]:
        """See :meth:`Tokenizer.block_segments`: the tools first (no template is known:
        where templates that put them in the system prompt have them), then each message."""
        r = self.chars_per_token
        out: list[tuple[str | None, int]] = [(None, self.tools_delta((), tools))] if tools else []
        for m in messages:
            c = m.get("content")
            text = c if type(c) is str else message_text(c)
            n = self.PER_MESSAGE + int(len(text) / r)
            if m.get("tool_calls"):
                calls = tool_calls_text(m["tool_calls"])
                n += int(len(calls) / r)
                text += "\x1f" + calls
            out.append((f"{m.get('role', '')}\x1f{text}", n))
        return out


class Llama3Tokenizer:
    """The exact Llama-3 vocabulary and the Llama 3.1 / 3.2 Instruct chat template."""

    __slots__ = ("_cache", "_enc", "_header", "_system", "_system_tools", "_tools", "name")

    #: the template's default date (vLLM renders without ``strftime_now`` unless asked)
    DATE = "26 Jul 2024"
    TOOLS_PREAMBLE = (
        "Given the following functions, please respond with a JSON for a function call "
        "with its proper arguments that best answers the given prompt.\n\n"
        'Respond in the format {"name": function name, "parameters": dictionary of '
        "argument name and its value}.Do not use variables.\n\n"
    )
    #: the system block's lines after its header (and ``Environment: ipython`` with tools)
    DATES = f"Cutting Knowledge Date: December 2023\nToday Date: {DATE}\n\n"
    BOS, EOT, IPYTHON_ENV = "<|begin_of_text|>", "<|eot_id|>", "Environment: ipython\n"

    @staticmethod
    def header(role: str) -> str:
        """The template's header of a message of ``role``."""
        return f"<|start_header_id|>{role}<|end_header_id|>\n\n"

    @classmethod
    def tools_block(cls, tools: Sequence[dict[str, Any]]) -> str:
        """The template's tool block (its instructions and every schema as
        ``json.dumps(tool, indent=4)``), in the first user message before its text."""
        return cls.TOOLS_PREAMBLE + "".join(
            json.dumps(t, indent=4, ensure_ascii=False, default=str) + "\n\n" for t in tools
        )

    def __init__(self) -> None:
        try:
            import quicktok  # 1.6 MB of vocabulary: loaded only when asked for
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise ConfigError(
                "tokenizer 'llama3' needs the quicktok-v1 package (pip install quicktok-v1), "
                "or name an estimate: tokenizer='chars:4.8'"
            ) from exc
        self.name = "llama3"
        self._enc = quicktok.get_encoding("llama3")
        self._cache: dict[tuple[int, int], int] = {}
        # id(tools) -> (the list, a deep copy of it, tokens of its schema block)
        self._tools: dict[int, tuple[Any, Any, int]] = {}
        special = self._special
        self._header = {
            role: special(self.header(role)) for role in ("system", "user", "assistant", "ipython")
        }
        # bos + system header + the dates (+ system text, counted apart) + eot
        self._system = special(self.BOS) + self._header["system"] + special(self.DATES) + 1
        self._system_tools = self._system + special(self.IPYTHON_ENV)

    @property
    def encoding(self) -> Any:
        """The ``quicktok`` encoding (ids: :mod:`agentlab.llm.token_ids`)."""
        return self._enc

    def _special(self, text: str) -> int:
        return len(self._enc.encode(text, allowed_special="all"))

    def count(self, text: str) -> int:
        # keyed by (hash, length), not the text: the cache holds no conversation alive
        key = (hash(text), len(text))
        n = self._cache.get(key)
        if n is None:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            try:
                n = self._enc.count(text)
            except TypeError:  # a lone surrogate (a JSON "\\ud83d"): counted as U+FFFD
                n = self._enc.count(
                    text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                )
            self._cache[key] = n
        return n

    def raw_prompt_tokens(self, text: str) -> int:
        # vLLM encodes a completions prompt with add_special_tokens: <|begin_of_text|> first
        return self.count(text) + 1

    def _tools_tokens(self, tools: Sequence[dict[str, Any]]) -> int:
        """Tokens of the template's tool block (instructions and every schema as
        ``json.dumps(tool, indent=4)``), cached per tools list.

        Agents offer the same list on every call; rendering it costs ~400 µs, checking it
        against a deep copy kept with the count ~3 µs (an edited list is rendered again).
        """
        return _per_tools(self._tools, tools, self._render_tools)

    def _render_tools(self, tools: Sequence[dict[str, Any]]) -> int:
        n: int = self._enc.count(self.tools_block(tools))
        return n

    def _header_of(self, role: str) -> int:
        n = self._header.get(role)
        if n is None:
            n = self._header[role] = self._special(self.header(role))
        return n

    def prompt_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int:
        # the template is laid out in one place, block_segments (the prefix cache's pieces)
        return sum([n for _, n in self.block_segments(messages, tools)])

    def _body(self, msgs: Sequence[dict[str, Any]]) -> int:
        """Tokens of messages laid out each in its own header and ``<|eot_id|>``."""
        part = self._part
        return sum([part(m)[2] for m in msgs])

    def _part(self, m: dict[str, Any]) -> tuple[str, str, int]:
        """One message in its header and ``<|eot_id|>``: ``(role, text as counted, tokens)``."""
        count = self.count
        if m.get("tool_calls"):
            text = tool_calls_text(m["tool_calls"])
            return "assistant", text, self._header["assistant"] + count(text) + 1
        role = str(m.get("role", "user"))
        c = m.get("content")
        if role in ("tool", "ipython"):
            text = c if isinstance(c, str) else json.dumps(c, ensure_ascii=False, default=str)
            if text[:1].isspace():  # not stripped: joins the header's "\n\n" token
                return role, text, self._header["ipython"] - 1 + count("\n\n" + text) + 1
            return role, text, self._header["ipython"] + count(text) + 1
        text = c.strip() if type(c) is str else message_text(c).strip()
        return role, text, self._header_of(role) + count(text) + 1

    def block_segments(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[tuple[str | None, int]]:
        """See :meth:`Tokenizer.block_segments`, in :meth:`prompt_tokens`' order: the system
        block (its fixed lines), the system text, the first user message's header and tool
        block (Llama 3.1 / 3.2 put the tools there, after the system text: prompts that
        differ in their system message share no block past the fixed lines), its text, every
        later message, the generation prompt."""
        count = self.count
        msgs = list(messages)
        head = (self._system_tools if tools else self._system) - 1  # (its eot: with the text)
        out: list[tuple[str | None, int]] = [("\x00llama3|tools" if tools else "\x00llama3", head)]
        text = ""
        if msgs and msgs[0].get("role") == "system":
            text = message_text(msgs[0].get("content")).strip()
            msgs = msgs[1:]
        out.append(("system\x1f" + text, count(text) + 1))
        if tools:
            # the block ends in "\n\n" and the stripped text after it starts with no
            # whitespace: no pre-token of Llama 3's splitter spans the seam, so the count
            # of block + text is the sum of the two counts
            first = message_text(msgs[0].get("content")).strip() if msgs else ""
            msgs = msgs[1:]
            out.append((None, self._header["user"] + self._tools_tokens(tools)))
            out.append(("user\x1f" + first, count(first) + 1))
        part = self._part
        for m in msgs:
            role, text, n = part(m)
            out.append((f"{role}\x1f{text}", n))
        out.append(("assistant\x1f", self._header["assistant"]))
        return out

    def extend_tokens(self, messages: Sequence[dict[str, Any]], k: int) -> int:
        """What ``messages[k:]`` add to the count of ``messages[:k]`` (no tools):
        ``prompt_tokens(messages) - prompt_tokens(messages[:k])``, counting only the new
        messages when the first ``k`` hold the system message (if there is one)."""
        if k <= 0 or not messages:
            return self.prompt_tokens(messages)
        return self.added_tokens(messages[k:], k)

    def added_tokens(self, added: Sequence[dict[str, Any]], k: int) -> int:
        """:meth:`extend_tokens` given ``added``, the messages after the first ``k``
        (``k <= 0``: the whole conversation; a caller that sliced them already)."""
        return self.prompt_tokens(added) if k <= 0 else self._body(added)

    def tools_delta(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> int:
        """``prompt_tokens(messages, tools) - prompt_tokens(messages)``: only the system
        message and the first message after it are laid out differently with tools."""
        if not tools:
            return 0
        head = list(messages[: 2 if messages and messages[0].get("role") == "system" else 1])
        first = head[-1] if head else None
        if (
            first is not None
            and first.get("role") == "user"
            and type(first.get("content")) is str
            and not first.get("tool_calls")
        ):
            # the first message a user's text: laid out with or without tools under the same
            # user header, so only the system lines and the tool block differ
            return self._system_tools - self._system + self._tools_tokens(tools)
        return self.prompt_tokens(head, tools) - self.prompt_tokens(head)


_TOKENIZERS: dict[str, Tokenizer] = {}


def check_tokenizer_name(name: str) -> str:
    """``name`` if it names a tokenizer :func:`get_tokenizer` knows (nothing is loaded).

    Raises:
        ConfigError: an unknown name or a bad ratio.
    """
    if name == "llama3":
        return name
    if name.startswith("chars:"):
        try:
            ratio = float(name[len("chars:") :])
        except ValueError:
            ratio = 0.0
        if ratio > 0:
            return name
        raise ConfigError(f"tokenizer {name!r}: expected chars:<characters per token > 0>")
    raise ConfigError(f"unknown tokenizer {name!r}; valid: 'llama3', 'chars:<ratio>'")


def get_tokenizer(name: str | Tokenizer) -> Tokenizer:
    """The tokenizer a profile names: ``"llama3"`` or ``"chars:R"`` (one instance per name).

    Raises:
        ConfigError: an unknown name or a bad ratio.
    """
    if not isinstance(name, str):
        return name
    tok = _TOKENIZERS.get(name)
    if tok is not None:
        return tok
    check_tokenizer_name(name)
    tok = Llama3Tokenizer() if name == "llama3" else CharsTokenizer(float(name[6:]))
    _TOKENIZERS[name] = tok
    return tok


def count_text_tokens(text: str, *, tokenizer: str | Tokenizer) -> int:
    """Tokens of one text under ``tokenizer`` (no chat template)."""
    return get_tokenizer(tokenizer).count(text)


def count_prompt_tokens(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    tokenizer: str | Tokenizer,
) -> int:
    """Prompt tokens of a chat request as the server counts them (template included)."""
    return get_tokenizer(tokenizer).prompt_tokens(messages, tools)
