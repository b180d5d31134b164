"""The simulator plays along with tools: contextual arguments, code and plans for routers.

A real model fills ``like(post_id)`` with an id it saw, ``follow(user)`` with someone
mentioned, and answers a code-generation prompt with code. :func:`play_along` rewrites the
simulator's content for one request the same way, from what is in the request itself:

- **tool calls** — the tool is picked among those whose required arguments can be filled
  from the context (ids, ``@names`` and ``"author"`` values in the messages, enum values in
  the schema); free text gets generated text. With probability ``sim_p_invalid_args``
  (default :data:`INVALID_ARGS_P`, 0: schema-valid; the demo uses 0.05) one argument is
  wrong on purpose (an unknown id, a
  made-up user, a value outside the enum, a missing required argument), or a tool whose
  arguments the context cannot fill is called anyway: a realistic, small error share;
- **code-generation prompts** (:class:`~agentlab.env.routers.CodeGenRouter`) — a short
  program calling the offered functions (parsed from the prompt's signatures) with such
  arguments;
- **plan prompts** (:class:`~agentlab.env.routers_plan.PlanRouter`) — a JSON plan.

Deterministic: everything is drawn from the request's own :class:`Rng`.
"""

from __future__ import annotations

import functools
import json
import re
from itertools import compress
from typing import Any, NamedTuple

from agentlab.llm.sim_content import Rng, gen_value
from agentlab.llm.sim_slots import (
    FIELD,
    ITEM,
    LINEAGE,
    PrefixSlots,
    hashable_contents,
    holds_separator,
    vouched,
)
from agentlab.llm.tokens import dumps_acyclic

__all__ = ["INVALID_ARGS_P", "asks_for_program", "play_along", "play_along_reply"]

#: default share of tool calls with a wrong argument (``sim_p_invalid_args`` overrides it)
INVALID_ARGS_P = 0.0

CODEGEN_MARK = "Write a few lines of Python that carry out the request"
PLAN_MARK = "Reply with a JSON list only"

_ID = re.compile(r"(?<![\w@])(?=[\w-]*\d)[\w-]+(?:\.[\w-]+)+(?![\w.])")
_ID_DOT = re.compile(r"\.[\w-]")  # in every _ID match; searched for first (a literal lead)
_ID_FIELD = re.compile(r"\"id\"\s*:\s*\"([^\"]{1,80})\"")
_WRITTEN = re.compile(r"\"\w+_id\"\s*:\s*\"([^\"]{1,80})\"")
_MENTION = re.compile(r"@([A-Za-z_][\w-]*)")
_AUTHOR = re.compile(r"\"(?:author|user|agent_id|from|to)\"\s*:\s*\"([^\"]{1,64})\"")
_SELF = re.compile(r"You are @([\w-]+)")
_SIG = re.compile(r"^- (\w+)\((.*?)\):", re.M)
_USER_WORDS = ("user", "author", "agent", "name", "recipient", "friend", "target", "to")


class _Scan(NamedTuple):
    """What the context regexes found in a conversation prefix, in order of first sight."""

    me: str | None  # the first ``You are @name``
    id_fields: tuple[str, ...]  # ``"id": ...`` values
    written: frozenset[str]  # ``"<x>_id": ...`` values (references a write returned)
    ids: tuple[str, ...]  # any id-looking token
    authors: tuple[str, ...]  # ``"author"``/``"user"``/... values
    mentions: tuple[str, ...]  # ``@names``


_EMPTY_SCAN = _Scan(None, (), frozenset(), (), (), ())
#: the scan of each conversation seen last (see :mod:`agentlab.llm.sim_slots`): a call that
#: extends one scans only its new messages
_scans = PrefixSlots()


def _other_text(c: Any) -> str:
    """The text of a message content that is not a string (as the whole-text scan joined it)."""
    return "null" if c is None else json.dumps(c)


def _extend(scan: _Scan, text: str) -> _Scan:
    """``scan`` extended by one message's text. Each regex runs only where its anchor
    characters occur (exact: a pattern cannot match without them)."""
    quoted = '"' in text
    at = "@" in text
    me = scan.me
    if me is None and at and "You are @" in text:
        found = _SELF.findall(text)
        me = found[0] if found else None
    id_fields = _ID_FIELD.findall(text) if quoted and '"id"' in text else ()
    written = _WRITTEN.findall(text) if quoted and '_id"' in text else ()
    ids = _ids(text)
    authors = _AUTHOR.findall(text) if quoted else ()
    mentions = _MENTION.findall(text) if at else ()
    return _Scan(
        me,
        _unique_t(scan.id_fields, id_fields) if id_fields else scan.id_fields,
        scan.written.union(written) if written else scan.written,
        _unique_t(scan.ids, ids) if ids else scan.ids,
        _unique_t(scan.authors, authors) if authors else scan.authors,
        _unique_t(scan.mentions, mentions) if mentions else scan.mentions,
    )


def _ids(text: str) -> list[str]:
    """``_ID.findall(text)``, run on the whitespace-separated words holding a dot only
    (none when no dot is followed by a word character: every match holds one).

    Exact: a match holds no whitespace, and whitespace is neither ``\\w``, ``@`` nor ``.``,
    so a word's ends look to the pattern's look-behind and look-ahead as the text's
    whitespace did. Scanning the whole text cost ~25 us per 500 characters (the look-behind
    tried at every position); the words with a dot are a few short ones.
    """
    if "." not in text or _ID_DOT.search(text) is None:
        return []
    # The same words recur across calls (a post's id in every feed listing that shows it,
    # a sentence's last word): each word's matches are kept, ~0.1 us a word instead of a
    # findall's ~0.8 us (issue 22: most of a feed result's scan).
    known = _WORD_IDS
    if len(known) > _WORD_IDS_MAX:
        known.clear()
    out: list[str] = []
    for w in text.split():
        if "." in w:
            got = known.get(w)
            if got is None:
                got = known[w] = tuple(_ID.findall(w))
            if got:
                out += got
    return out


#: ``_ID.findall(word)`` per whitespace-separated word with a dot (cleared whole when full)
_WORD_IDS: dict[str, tuple[str, ...]] = {}
_WORD_IDS_MAX = 1 << 16


def _unique_t(seen: tuple[str, ...], new: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*seen, *new)))


def _encode(scan: _Scan) -> str:
    """The scan as one payload string (no value holds a separator: see ``_scan``)."""
    return FIELD.join(
        (
            scan.me or "",
            ITEM.join(scan.id_fields),
            ITEM.join(sorted(scan.written)),
            ITEM.join(scan.ids),
            ITEM.join(scan.authors),
            ITEM.join(scan.mentions),
        )
    )


def _decode(payload: str) -> _Scan:
    me, id_fields, written, ids, authors, mentions = payload.split(FIELD)

    def items(s: str) -> tuple[str, ...]:  # every regex group is non-empty: "" = none
        return tuple(s.split(ITEM)) if s else ()

    return _Scan(
        me or None,
        items(id_fields),
        frozenset(items(written)),
        items(ids),
        items(authors),
        items(mentions),
    )


def _scan(messages: list[dict[str, Any]]) -> _Scan:
    """The scan of the whole conversation, reusing the longest cached prefix: a call that
    adds k messages to a conversation seen before runs the regexes over those k only.

    Equal to one scan of the contents joined by newlines (what ``_Context`` did before):
    no pattern matches across a newline except the JSON-field ones (``"id": "..."``) in a
    JSON value split between two messages, which no message holds. A
    :class:`~agentlab.llm.sim_slots.KnownPrefix` is keyed by its lineage up to its
    committed messages (no pass over the conversation to hash it)."""
    v = vouched(messages)
    if v is None:
        return _content_scan(messages)[0]
    lineage, c = v
    key = hash((LINEAGE, lineage))
    payload = _scans.get(key)  # "k" FIELD scan of the lineage's first k messages
    k = -1
    if payload is not None:
        head, _, rest = payload.partition(FIELD)
        k = int(head)
    if k < 0 or k > c:  # a new lineage (or its entry replaced): by content
        scan, cacheable = _content_scan(messages[:c], keep=False)
    else:
        scan, cacheable = _extend_all(_decode(rest), messages, k, c)
    if k != c and cacheable:  # else a value could hold a separator: scanned afresh next time
        _scans.put(key, f"{c}{FIELD}{_encode(scan)}")
    return _extend_all(scan, messages, c, len(messages))[0]


def _extend_all(scan: _Scan, messages: list[dict[str, Any]], k: int, n: int) -> tuple[_Scan, bool]:
    """``scan`` (of ``messages[:k]``) extended to ``messages[:n]``, and whether no text
    added holds a payload separator (else it cannot be stored)."""
    cacheable = True
    for m in messages[k:n]:
        text = c if type(c := m.get("content")) is str else _other_text(c)
        scan = _extend(scan, text)
        cacheable = cacheable and not holds_separator(text)
    return scan, cacheable


def _content_scan(messages: list[dict[str, Any]], keep: bool = True) -> tuple[_Scan, bool]:
    """:func:`_scan` keyed by the messages' contents (hashes of whole prefixes), and whether
    the scan can be stored (no text holds a payload separator). ``keep=False``: looked up,
    not stored (a lineage's start: the lineage's own entry is the one its calls use, and a
    second padded slot per idle conversation would stay resident)."""
    contents = hashable_contents(messages)
    if contents is None:  # content parts (lists) are unhashable
        contents = tuple(
            c if type(c := m.get("content")) is str else _other_text(c) for m in messages
        )

    def key_of(k: int) -> int:
        return hash(contents[:k])

    n = len(contents)
    k, key, payload = _scans.lookup(key_of, n)
    scan = _EMPTY_SCAN if payload is None else _decode(payload)
    if k == n:
        return scan, True
    cacheable = True
    for c in contents[k:]:
        text = c if type(c) is str else _other_text(c)
        scan = _extend(scan, text)
        cacheable = cacheable and not holds_separator(text)
    if cacheable and keep:  # else a value could hold a separator: scanned afresh next time
        _scans.put(key_of(n), _encode(scan), key if k else None)
    return scan, cacheable


class _Context:
    """Values a model could copy from the request: ids, users, the asking agent.

    ``lazy``: the conversation is scanned on the first read of ``me``, ``ids`` or
    ``users``, not before: a call whose tools take no id or user argument (a search
    ``query``) reads none of them and scans nothing (issue 26: ~118 k instructions per
    tool-calling call). The values are the same either way (the scan is exact whenever
    it runs; a skipped one only leaves the prefix cache behind, which the next scan
    catches up on)."""

    __slots__ = ("_ids", "_me", "_messages", "_users", "request")

    def __init__(self, messages: list[dict[str, Any]], *, lazy: bool = False) -> None:
        self._messages: list[dict[str, Any]] | None = messages
        self._me: str | None = None
        self._ids: list[str] = []
        self._users: list[str] = []
        self.request = ""  # the last user message's text
        for m in map(messages.__getitem__, range(len(messages) - 1, -1, -1)):  # no generator
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                self.request = m["content"]
                break
        if not lazy:
            self._load()

    def _load(self) -> None:
        messages, self._messages = self._messages, None
        if messages is None:  # scanned already
            return
        scan = _scan(messages)
        self._me = scan.me
        # Ids of listed entities (``"id": ...``) first; else any id-looking token except
        # references a write returned (``"post_id": ...``: maybe not visible yet).
        self._ids = list(scan.id_fields) or [i for i in scan.ids if i not in scan.written]
        users = _unique([*scan.authors, *scan.mentions])
        self._users = [u for u in users if u != self._me]

    @property
    def me(self) -> str | None:
        """The asking agent (the first ``You are @name``), if any."""
        if self._messages is not None:
            self._load()
        return self._me

    @property
    def ids(self) -> list[str]:
        """Ids seen in the conversation, in order of first sight."""
        if self._messages is not None:
            self._load()
        return self._ids

    @property
    def users(self) -> list[str]:
        """Users seen in the conversation (not the asking agent), in order of first sight."""
        if self._messages is not None:
            self._load()
        return self._users

    def fill(self, name: str, schema: dict[str, Any], rng: Rng) -> tuple[bool, Any]:
        """``(found, value)`` for one parameter: an id or user parameter takes a value seen
        in the context (found=False: none seen, a schema-valid guess instead); any other
        parameter a schema-valid value (enum member, number in bounds, generated text)."""
        value = gen_value(schema, rng)
        pool = self._pool(name, schema)
        if pool is None:
            return True, value
        return (True, pool[rng.randint(len(pool))]) if pool else (False, value)

    def _pool(self, name: str, schema: dict[str, Any]) -> list[str] | None:
        """The values seen in the context a parameter takes one of (``None``: it takes
        a generated value): ids for an id parameter, users for a user parameter."""
        if schema.get("type", "string") != "string" or "enum" in schema or "const" in schema:
            return None
        kind = _kind(name)
        return self.ids if kind == "ids" else self.users if kind == "users" else None

    def can_fill(self, name: str, schema: dict[str, Any]) -> bool:
        """``fill(name, schema, rng)[0]`` without drawing the value."""
        pool = self._pool(name, schema)
        return pool is None or bool(pool)

    def invalid(self, name: str, schema: dict[str, Any], rng: Rng) -> Any:
        """A plausible but wrong value for one parameter."""
        if "enum" in schema:
            return "everything"
        if schema.get("type") in ("integer", "number"):
            return -1
        if name.lower() == "id" or name.lower().endswith("_id"):
            return f"{rng.randint(90) + 10}.nobody.{rng.randint(9)}"
        return f"someone{rng.randint(1000)}"


@functools.lru_cache(maxsize=4096)  # a handful of parameter names, asked on every call
def _kind(name: str) -> str:
    """``"ids"`` (an id parameter), ``"users"`` (a user parameter) or ``""`` (neither)."""
    low = name.lower()
    if low == "id" or low.endswith(("_id", "_ids")):
        return "ids"
    if any(w in low.split("_") or low.endswith(w) for w in _USER_WORDS):
        return "users"
    return ""


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _params(fn: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    schema = fn.get("parameters") or {}
    props = schema.get("properties") or {}
    return props, list(schema.get("required") or [])


def _arguments(
    ctx: _Context, fn: dict[str, Any], rng: Rng, invalid_p: float
) -> tuple[bool, dict[str, Any]]:
    """``(fillable, args)``: schema-valid arguments, ids and users copied from the context,
    and with probability ``invalid_p`` one wrong (or missing) argument."""
    schema = fn.get("parameters") or {"type": "object", "properties": {}}
    props, required = _params(fn)
    drawn = gen_value(schema, rng)
    args: dict[str, Any] = dict(drawn) if isinstance(drawn, dict) else {}
    fillable = True
    for name in list(args):  # ctx.fill, inlined (a call fewer per argument)
        sub = props.get(name, {})
        value = gen_value(sub, rng)
        pool = ctx._pool(name, sub)
        if pool:
            value = pool[rng.randint(len(pool))]
        elif pool is not None:  # an id or user nobody has shown: the guess stays
            fillable = fillable and name not in required
        args[name] = value
    if invalid_p > 0 and props and rng.random() < invalid_p:
        name = list(props)[rng.randint(len(props))]
        if name in required and rng.random() < 0.3:
            args.pop(name, None)
        else:
            args[name] = ctx.invalid(name, props[name], rng)
    return fillable, args


def _fillable(ctx: _Context, fn: dict[str, Any]) -> bool:
    """``all(ctx.can_fill(p, props.get(p, {})) for p in required)``, written out (the same
    look-ups in the same order): asked for every offered tool on every tool call."""
    props, required = _params(fn)
    for p in required:
        schema = props.get(p, {})
        if schema.get("type", "string") != "string" or "enum" in schema or "const" in schema:
            continue  # a generated value (_Context._pool: None)
        kind = _kind(p)
        if (kind == "ids" and not ctx.ids) or (kind == "users" and not ctx.users):
            return False
    return True


@functools.lru_cache(maxsize=4096)  # a handful of tool names, asked on every call
def _name_words(name: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """For each ``_``-separated word of a tool name made of ``a``-``z`` only, the word and a
    pattern finding it as a whole ``[a-z]+`` word (other words never equal one:
    :func:`_pick`)."""
    words = set(name.lower().split("_"))
    return tuple(
        (w, re.compile(re.escape(w) + f"(?<![a-z]{re.escape(w)})(?![a-z])"))
        for w in sorted(words)
        if w.isascii() and w.isalpha() and w.islower()
    )


def _names(fn: dict[str, Any], low: str) -> bool:
    """Whether the lower-cased request ``low`` names ``fn``: one of its name's words is a
    whole word of it (a word that is no substring of ``low`` is not searched for)."""
    for w, pattern in _name_words(str(fn.get("name", ""))):
        if w in low and pattern.search(low) is not None:
            return True
    return False


def _named(fns: list[dict[str, Any]], request: str) -> list[dict[str, Any]]:
    """The tools a request names: a word of the name (split at ``_``) is one of the
    request's lower-cased ``[a-z]+`` words. Each name word is searched for (literal-led
    patterns) instead of listing every word of the request (~15 us for 500 characters)."""
    low = request.lower()
    return [f for f in fns if _names(f, low)]


#: _named_at's answers per (request, tool names), cleared whole when full
_NAMED_AT: dict[tuple[str, tuple[str, ...]], tuple[int, ...]] = {}
_NAMED_AT_MAX = 2048


def _named_at(request: str, fns: list[dict[str, Any]]) -> tuple[int, ...]:
    """The indices of the tools ``request`` names (:func:`_named`), remembered per request and
    names as _names reads them: an agent-step's later calls ask with the same user message."""
    hit = _NAMED_AT.get(key := (request, tuple([str(f.get("name", "")) for f in fns])))
    if hit is None:
        low = request.lower()
        hit = tuple([i for i, f in enumerate(fns) if _names(f, low)])
        if len(_NAMED_AT) >= _NAMED_AT_MAX:
            _NAMED_AT.clear()
        _NAMED_AT[key] = hit
    return hit


def _pick(
    ctx: _Context, fns: list[dict[str, Any]], rng: Rng, invalid_p: float, *, reads: bool = False
) -> dict[str, Any]:
    """A tool as a model would choose it: one the request names and the context can fill,
    else any the context can fill; with probability ``invalid_p`` the named one anyway.
    ``reads``: a tool that needs an id nobody has shown yet is fine (code can read first)."""
    named = _named_at(ctx.request, fns)  # indices into fns
    if rng.random() < invalid_p:
        pool = [fns[i] for i in named] or fns
    elif not named:  # the usual request names no tool: the pools below, without lists
        pool = fns if reads else list(compress(fns, [_fillable(ctx, f) for f in fns])) or fns
    else:
        can = [reads or _fillable(ctx, f) for f in fns]
        ok = list(compress(fns, can))
        # "a named tool in ok": a fillable one is (itself); another only if it equals one
        # in ok (the value comparison of the list's `in`, kept for those)
        pool = [fns[i] for i in named if can[i] or fns[i] in ok] or ok
        pool = pool or [fns[i] for i in named] or fns
    return pool[rng.randint(len(pool))]


def _tool_calls(
    ctx: _Context, tools: list[dict[str, Any]], calls: list[tuple[str, str, str]], rng: Rng,
    invalid_p: float, forced: bool,
) -> list[tuple[str, str, str]]:  # fmt: skip
    fns = [t.get("function", t) for t in tools]
    out = []
    for call_id, name, _raw in calls:
        fn = next((f for f in fns if f.get("name") == name), None) if forced else None
        if fn is None:  # not forced (or the forced name is not offered): chosen
            fn = _pick(ctx, fns, rng, invalid_p)
        _, args = _arguments(ctx, fn, rng, invalid_p)
        out.append((call_id, str(fn.get("name")), dumps_acyclic(args)))
    return out


def _signature_fns(system: str) -> list[dict[str, Any]]:
    """Tool schemas recovered from a code-generation prompt's ``- name(p: type = d): ...``."""
    fns = []
    for name, params in _SIG.findall(system):
        props: dict[str, Any] = {}
        required = []
        for part in re.findall(r"(\w+): (Literal\[[^\]]*\]|[^=,]+)(?: = ('[^']*'|[^,]+))?", params):
            pname, ptype, default = part[0], part[1].strip(), part[2].strip()
            sub: dict[str, Any] = {"type": {"int": "integer", "float": "number",
                                            "bool": "boolean"}.get(ptype, "string")}  # fmt: skip
            enum = re.findall(r"'([^']*)'", ptype) if ptype.startswith("Literal") else []
            if enum:
                sub["enum"] = enum
            props[pname] = sub
            if not default:
                required.append(pname)
        fns.append({"name": name, "parameters": {"properties": props, "required": required}})
    return fns


def _code(ctx: _Context, fns: list[dict[str, Any]], rng: Rng, invalid_p: float) -> str:
    # A program as a model writes one: when the call needs an id nobody has shown, read
    # a listing first and take the id from it; else call the tool with copied values.
    first = _pick(ctx, fns, rng, invalid_p, reads=True)
    readers = [f for f in fns if str(f.get("name", "")).startswith(("read", "list", "search"))]
    _, args = _arguments(ctx, first, rng, invalid_p)
    required = _params(first)[1]
    ids = [p for p in required if (p == "id" or p.endswith("_id")) and not ctx.ids]
    lines = []
    if ids and readers and first not in readers:
        lines.append(f"items = {readers[0]['name']}()")
        for p in ids:
            args[p] = _Expr("items[0]['id']")
        call = ", ".join(f"{k}={v!r}" for k, v in args.items())
        lines.append(f"result = {first['name']}({call}) if items else None")
    else:
        call = ", ".join(f"{k}={v!r}" for k, v in args.items())
        lines.append(f"result = {first['name']}({call})")
    lines.append("result")
    return "```python\n" + "\n".join(lines) + "\n```"


class _Expr(str):
    """Source text that ``repr`` leaves as it is (an expression inside generated code)."""

    def __repr__(self) -> str:
        return str(self)


def _plan(ctx: _Context, fns: list[dict[str, Any]], rng: Rng, invalid_p: float) -> str:
    steps = []
    for _ in range(1 + (rng.random() < 0.3)):
        fn = _pick(ctx, fns, rng, invalid_p)
        steps.append({"tool": fn["name"], "arguments": _arguments(ctx, fn, rng, invalid_p)[1]})
    return dumps_acyclic(steps)


def _first_system(messages: list[dict[str, Any]]) -> str:
    """The first system message's text ("" if none, or not text)."""
    for m in messages:  # a loop: cheaper than next(genexpr)
        if m.get("role") == "system":
            return system if isinstance(system := m.get("content"), str) else ""
    return ""


def asks_for_program(messages: list[dict[str, Any]]) -> bool:
    """Whether :func:`play_along` may answer these messages (offered no tools) with a
    program or plan instead of prose: a code-generation or plan prompt."""
    for m in messages:  # _first_system inlined: checked on every simulated free-text call
        if m.get("role") == "system":
            system = m.get("content")
            return isinstance(system, str) and (CODEGEN_MARK in system or PLAN_MARK in system)
    return False


def play_along(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    params: dict[str, Any],
    rng: Rng,
    text: str,
    calls: list[tuple[str, str, str]],
    n: int,
    malformed: bool,
) -> tuple[str, list[tuple[str, str, str]], int]:
    """The simulator's ``(text, tool calls, completion tokens)``, made contextual."""
    if malformed or not messages or (tools and not calls):
        return text, calls, n
    invalid_p = float(params.get("sim_p_invalid_args", INVALID_ARGS_P))
    if calls and tools:
        choice = params.get("tool_choice")
        ctx = _Context(messages, lazy=True)
        return text, _tool_calls(ctx, tools, calls, rng, invalid_p, isinstance(choice, dict)), n
    if tools:  # a program or plan answers only a prompt offering no tools
        return text, calls, n
    system = _first_system(messages)  # a pass over the messages: after the tools' test
    if CODEGEN_MARK in system or PLAN_MARK in system:
        fns = _signature_fns(system)
        if fns:
            ctx = _Context(messages, lazy=True)
            out = (_code if CODEGEN_MARK in system else _plan)(ctx, fns, rng, invalid_p)
            return out, [], max(1, len(out) // 4)
    return text, calls, n


def play_along_reply(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    params: dict[str, Any],
    rng: Rng,
    content: tuple[str, list[tuple[str, str, str]], int, str],
    malformed: bool,
) -> tuple[str, list[tuple[str, str, str]], int, str]:
    """:func:`play_along` on a whole reply ``(text, tool calls, completion tokens, finish
    reason)``: a program or plan that replaces the prose is complete (finish ``stop``)."""
    text, calls, n, finish = content
    new_text, new_calls, new_n = play_along(messages, tools, params, rng, text, calls, n, malformed)
    if new_text is not text:  # a program or plan instead of prose: complete, not cut
        finish = "stop"
    return new_text, new_calls, new_n, finish
