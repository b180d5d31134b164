"""Deterministic content for the simulator: text, JSON for a schema, tool calls.

Everything is drawn from :class:`Rng`, a tiny 64-bit LCG seeded from a hash of the
request, so the same seed and request give the same output in every process (Python's
``hash`` of strings is salted per process; ``zlib.crc32`` is not).
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from itertools import accumulate
from operator import add
from typing import Any

__all__ = [
    "MAX_SCHEMA_ITEMS",
    "MAX_SCHEMA_STRING",
    "MAX_SCHEMA_VALUES",
    "Rng",
    "SchemaError",
    "append_marker",
    "cut_at_stop",
    "gen_json",
    "gen_reply",
    "gen_text",
    "gen_tool_call",
    "gen_value",
    "request_hash",
    "text_chars_per_token",
]

_MASK = (1 << 64) - 1
_MUL = 6364136223846793005
_INC = 1442695040888963407
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53: the top 53 bits of the state as a float
_sqrt, _log, _cos = math.sqrt, math.log, math.cos

# Short words: about four characters with the space, i.e. about one token each under the
# ~4 chars/token estimate used for prompts.
_WORDS = (  # noqa: SIM905 - a paragraph reads better than 110 quoted words
    "the a of to and in is it we you that for on are with as be at this have from or one "
    "had by but not what all were when can said there use an each which she do how their "
    "if will up other about out many then them these so some her would make like him "
    "into time has look two more go see way could no than first been call who its now "
    "find long down day did get come made may part plan vote agree yes ok idea share "
    "post task data note move next good best fair team rule goal step test"
).split()
_NW = len(_WORDS)


def request_hash(seed: int, messages: list[dict[str, Any]], extra: str = "") -> int:
    """A stable 32-bit hash of the seed, the conversation and ``extra`` (tools, schema)."""
    parts = [str(seed), extra]
    for m in messages:
        c = m.get("content")
        parts.append(m.get("role", ""))
        parts.append(c if isinstance(c, str) else repr(c))
    return zlib.crc32("\x1f".join(parts).encode("utf-8", "surrogatepass"))


class Rng:
    """A 64-bit linear congruential generator: fast, seedable, identical everywhere."""

    __slots__ = ("s",)

    def __init__(self, seed: int) -> None:
        self.s = (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK

    def random(self) -> float:
        """Uniform in [0, 1)."""
        self.s = (self.s * _MUL + _INC) & _MASK
        return (self.s >> 11) * _TO_UNIT

    def randint(self, n: int) -> int:
        """Uniform integer in [0, n)."""
        self.s = (self.s * _MUL + _INC) & _MASK
        return (self.s >> 33) % n

    def normal(self) -> float:
        """Standard normal (Box–Muller)."""
        # Two ``random()`` draws written out: the same floats as calling it twice, without
        # two method calls in every simulated completion's length draw.
        s = (self.s * _MUL + _INC) & _MASK
        u = (s >> 11) * _TO_UNIT or 1e-12
        self.s = s = (s * _MUL + _INC) & _MASK
        return _sqrt(-2.0 * _log(u)) * _cos(6.283185307179586 * ((s >> 11) * _TO_UNIT))


def _build_corpus(n_words: int = 16384) -> tuple[str, list[int]]:
    # A fixed pseudo-random word sequence; a completion is a slice of it at a seeded
    # offset, so producing text costs one string slice instead of a Python loop per word.
    rng = Rng(12345)
    words = [_WORDS[rng.randint(_NW)] for _ in range(n_words)]
    return " ".join(words) + " ", _word_starts(words)


def _word_starts(words: list[str]) -> list[int]:
    """Where each word of ``" ".join(words) + " "`` starts, and its end: word i starts
    after the i words before it and their spaces."""
    return list(map(add, accumulate(map(len, words), initial=0), range(len(words) + 1)))


_CORPUS, _STARTS = _build_corpus()
_CORPUS_WORDS = len(_STARTS) - 1
_HALF = _CORPUS_WORDS // 2  # the longest slice one draw takes


# Words of other lengths, each also one Llama-3 token with its leading space
# (tests/llm/test_sim_content.py checks every one): text with a chosen number of characters
# per token mixes them with the words above (see :func:`gen_text`'s ``chars_per_token``).
_SHORT_WORDS = (  # noqa: SIM905
    "a I to of in is it we be at on or as an by do if up so no us my me he go am ok"
).split()
_LONG_WORDS = (  # noqa: SIM905
    "information development implementation responsibilities communication requirements "
    "recommendation understanding performance environment significant particular "
    "technology architecture management experience constraints assumptions "
    "considerations alternatives distribution probability evaluation important different "
    "structure function variable strategy approach analysis solution problem proposal "
    "question process system project network security customer service quality resource "
    "schedule budget review support design should would because between through however "
    "therefore example results overall together consider ensure provide improve specific "
    "critical potential further additional possible currently available required "
    "including following several multiple individual"
).split()


def _mean_cpt(words: list[str] | tuple[str, ...]) -> float:
    return 1.0 + sum(map(len, words)) / len(words)  # the leading space counts


_CPT_LO, _CPT_MID, _CPT_HI = _mean_cpt(_SHORT_WORDS), _mean_cpt(_WORDS), _mean_cpt(_LONG_WORDS)
_CPT_STEP = 0.25  # one corpus per this many characters per token
_CORPORA: dict[int, tuple[str, list[int]]] = {}


def _corpus_at(level: int) -> tuple[str, list[int]]:
    """The corpus whose words average ``level * _CPT_STEP`` characters per token (the
    space included), mixing the short or long words into the common ones; built once."""
    hit = _CORPORA.get(level)
    if hit is not None:
        return hit
    cpt = min(max(level * _CPT_STEP, _CPT_LO), _CPT_HI)
    if cpt < _CPT_MID:
        other, p = _SHORT_WORDS, (_CPT_MID - cpt) / (_CPT_MID - _CPT_LO)
    else:
        other, p = _LONG_WORDS, (cpt - _CPT_MID) / (_CPT_HI - _CPT_MID)
    words, starts = _draw_words(Rng(12345 + level).s, other, p)
    _CORPORA[level] = out = (" ".join(words) + " ", starts)
    return out


@functools.cache
def _lcg_jumps() -> tuple[Any, Any]:
    """``(MUL**k, INC * (1 + MUL + ... + MUL**(k-1))) mod 2**64`` for k = 1 .. 2 x 16,384,
    as numpy uint64 arrays (the same for every corpus)."""
    import numpy as np

    a = np.cumprod(np.full(2 * _CORPUS_WORDS, _MUL, dtype=np.uint64))
    c = np.cumsum(np.concatenate(([np.uint64(1)], a[:-1]))) * np.uint64(_INC)
    return a, c


def _draw_words(
    s0: int, other: tuple[str, ...] | list[str], p: float
) -> tuple[list[str], list[int]]:
    """The corpus words of the generator at state ``s0``: per word, ``rng.random() < p``
    picks ``other[rng.randint(len(other))]``, else ``_WORDS[rng.randint(_NW)]``; and
    where each word starts in their join (as :func:`_word_starts`).

    All 2 x 16,384 states at once: the k-th state of an LCG is ``MUL**k * s0 + C_k`` (mod
    2**64, numpy's uint64 arithmetic wraps alike), the same integers as stepping
    :class:`Rng`, and ``(s >> 11) * 2**-53`` is exact in float64. ~60 corpora are built in
    a run's first ticks; stepping in Python took ~10 ms each, this ~1 ms. The words and
    their starts are gathered and summed by numpy too: a Python step per word cost 22.3 M
    instructions a corpus, this 9.4 M (the realistic path builds 8 in its timed ticks).
    """
    import numpy as np  # only here: the instant path never builds a corpus

    a, c = _lcg_jumps()
    states = a * np.uint64(s0) + c
    u = (states[0::2] >> np.uint64(11)).astype(np.float64) * _TO_UNIT
    r = states[1::2] >> np.uint64(33)
    n_other = len(other)
    idx = np.where(u < p, r % np.uint64(n_other), r % np.uint64(_NW) + np.uint64(n_other))
    vocab = np.array([*other, *_WORDS], dtype=object)
    sizes = np.array([len(w) + 1 for w in vocab], dtype=np.int64)  # a word and its space
    starts = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(sizes[idx], out=starts[1:])
    return vocab[idx].tolist(), starts.tolist()


def text_chars_per_token(rng: Rng, median: float, sigma: float) -> float:
    """One reply's characters per token: log-normal (``median``, ``sigma``), one draw.

    Real replies differ in how many characters a token carries (prose with long words,
    lists, numbers, code); a history cut to a number of *characters* then holds a varying
    number of tokens. ``sigma`` 0 gives ``median`` with no draw.
    """
    if sigma <= 0:
        return median
    return median * math.exp(sigma * rng.normal())


def gen_text(rng: Rng, n_tokens: int, chars_per_token: float = 0.0) -> str:
    """``n_tokens`` words of deterministic filler, sentence-cased, ending with a period.

    Every word is one token. ``chars_per_token`` (> 0) picks words that average that many
    characters per token, space included (rounded to 0.25, within about 2.9-9.8); 0 (default)
    uses the common short words (~4.4 characters per Llama-3 token).
    """
    if n_tokens <= 0:
        return ""
    if chars_per_token > 0:
        corpus, starts = _corpus_at(int(chars_per_token / _CPT_STEP + 0.5))
    else:
        corpus, starts = _CORPUS, _STARTS
    if n_tokens <= _HALF:  # one slice (every completion but the longest): no list, no join
        rng.s = s = (rng.s * _MUL + _INC) & _MASK  # rng.randint(_CORPUS_WORDS - n_tokens)
        off = (s >> 33) % (_CORPUS_WORDS - n_tokens)
        a = starts[off]
        return f"{corpus[a].upper()}{corpus[a + 1 : starts[off + n_tokens] - 1]}."
    parts = []
    while n_tokens > 0:
        k = min(n_tokens, _HALF)
        off = rng.randint(_CORPUS_WORDS - k)
        parts.append(corpus[starts[off] : starts[off + k] - 1])
        n_tokens -= k
    text = " ".join(parts)
    return text[:1].upper() + text[1:] + "."


def gen_reply(rng: Rng, n_tokens: int, cpt_median: float = 0.0, cpt_sigma: float = 0.0) -> str:
    """A free-text reply of ``n_tokens`` tokens: :func:`gen_text` at characters per token
    drawn by :func:`text_chars_per_token` (``cpt_median`` > 0; a profile's
    ``text_cpt_median`` / ``text_cpt_sigma``), or the common short words (0, no draw)."""
    if cpt_median <= 0:
        return gen_text(rng, n_tokens)
    return gen_text(rng, n_tokens, text_chars_per_token(rng, cpt_median, cpt_sigma))


def append_marker(text: str, rng: Rng, marker: str | None, p: float) -> str:
    """``text`` ending with ``marker`` with probability ``p`` (one draw from ``rng``).

    How a workflow gets free-text replies that carry a signal at a configured rate (the
    topology workflow's ``[CONSENSUS]`` / ``[APPROVED]`` markers, the evaluator's score):
    it sends the ``sim_marker`` / ``sim_marker_p`` overrides and parses the reply as it
    would a real model's. The draw comes from the request's own generator, so the same
    seed and request always give the same decision.
    """
    if not marker:
        return text
    if rng.random() < p:
        return f"{text} {marker}" if text else marker
    return text


def cut_at_stop(
    text: str, n: int, finish: str, stop: str | list[str], min_tokens: int = 0
) -> tuple[str, list[tuple[str, str, str]], int, str]:
    """``(text, [], tokens, finish)`` ended at the first stop string, as vLLM does.

    The stop string is removed and ``finish`` becomes ``"stop"``; tokens are those up to
    and including the stop string (generated, then cut). Stop strings are not looked for
    in the first ``min_tokens`` tokens (vLLM's ``min_tokens`` holds them back too). A
    reply with no stop string in it is returned as it is.
    """
    stops = [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str)]
    words = text.split(" ")
    start = len(" ".join(words[:min_tokens])) if min_tokens > 0 else 0
    hits = [(i, s) for s in stops if s and (i := text.find(s, start)) >= 0]
    if not hits:
        return text, [], n, finish
    i, s = min(hits)
    spent = len(text[: i + len(s)].split())  # one token per word, as gen_text writes them
    return text[:i], [], max(1, min(n, spent)), "stop"


# --- JSON for a schema -------------------------------------------------------------------

#: bounds of the work one schema may ask for (a request past them is refused, not served):
#: values generated, length of a ``minLength`` string, items of a ``minItems`` array
MAX_SCHEMA_VALUES = 20_000
MAX_SCHEMA_STRING = 100_000
MAX_SCHEMA_ITEMS = 10_000
_MAX_DEPTH = 64
_ITEMS_SPAN = 64  # an array gets at most this many items above its minItems


class SchemaError(ValueError):
    """A JSON schema the simulator refuses: a ``$ref`` cycle or a dangling ``$ref``, or
    more work than the bounds above (sim-serve answers HTTP 400)."""


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema must be an object, got {type(schema).__name__}")
    ref = schema.get("$ref")
    if ref is None:  # the usual schema: no set made for a cycle check
        return schema
    seen: set[str] = set()
    while isinstance(ref, str) and ref.startswith("#/"):
        if ref in seen:
            raise SchemaError(f"$ref cycle through {ref!r}")
        seen.add(ref)
        node: Any = root
        for part in ref[2:].split("/"):
            if not isinstance(node, dict) or part not in node:
                raise SchemaError(f"$ref {ref!r} points at nothing in the schema")
            node = node[part]
        if not isinstance(node, dict):
            raise SchemaError(f"$ref {ref!r} points at a {type(node).__name__}, not a schema")
        schema = node
        ref = schema.get("$ref")
    return schema


def _int_bound(schema: dict[str, Any], key: str, default: int, limit: int) -> int:
    v = schema.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise SchemaError(f"{key} must be a number, got {v!r}")
    if v > limit:
        raise SchemaError(f"{key} {v!r} is above the simulator's bound {limit}")
    return int(v)


#: keys of a leaf schema :func:`gen_value` draws directly (annotations it never reads)
_LEAF_KEYS = frozenset({"type", "enum", "description", "title", "default", "examples"})


def gen_value(
    schema: dict[str, Any],
    rng: Rng,
    *,
    bool_p: float = 0.5,
    root: dict[str, Any] | None = None,
    depth: int = 0,
    work: list[int] | None = None,
) -> Any:
    """A value valid under ``schema`` (the subset pydantic emits; see the module README).

    Handles ``$ref``/``$defs``, ``anyOf``/``oneOf`` (``Optional``), ``enum``/``const``
    (``Literal``), objects with ``required``, arrays with ``minItems``/``maxItems``,
    integers/numbers with bounds, strings with length bounds, booleans (true with
    probability ``bool_p``) and null.

    Bounded: at most :data:`MAX_SCHEMA_VALUES` values and 64 levels (``work`` counts them
    across the recursion), ``minLength`` up to :data:`MAX_SCHEMA_STRING`, ``minItems`` up
    to :data:`MAX_SCHEMA_ITEMS`; past a bound, or on a ``$ref`` cycle, raises
    :class:`SchemaError` (a recursive schema whose required fields never end is one).
    """
    root = schema if root is None else root
    if work is None:
        work = [0]
    work[0] += 1
    if work[0] > MAX_SCHEMA_VALUES or depth > _MAX_DEPTH:
        raise SchemaError(
            f"the schema asks for more than {MAX_SCHEMA_VALUES} values or {_MAX_DEPTH} "
            "levels (a $ref cycle through required fields?)"
        )
    if type(schema) is dict and schema.keys() <= _LEAF_KEYS:
        # the common leaves (a tool's parameters: a type and annotations the branches below
        # never read), drawn as those branches draw them: no $ref, bounds or format to
        # look up, no keyword dict for a recursion
        typ = schema.get("type")
        if "enum" in schema:
            opts = schema["enum"]
            return opts[rng.randint(len(opts))]
        if typ == "string":
            return _Free(gen_text(rng, 3 + rng.randint(6)))
        if typ == "integer":  # _bounds of no bounds: 0 .. 10
            return rng.randint(11)
    if type(schema) is not dict or "$ref" in schema:  # else _resolve returns it as it is
        schema = _resolve(schema, root)
    deeper = depth + 1  # the recursions' keywords written out: no keyword dict per call
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        opts = schema["enum"]
        return opts[rng.randint(len(opts))]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            opts = [_resolve(o, root) for o in schema[key]]
            non_null = [o for o in opts if o.get("type") != "null"]
            # Optional[X]: mostly X, so structured outputs carry content.
            pick = non_null if non_null and rng.random() < 0.9 else opts
            if not pick:
                raise SchemaError(f"{key} is empty")
            sub = pick[rng.randint(len(pick))]
            return gen_value(sub, rng, bool_p=bool_p, root=root, depth=deeper, work=work)
    if schema.get("allOf"):
        sub = schema["allOf"][0]
        return gen_value(sub, rng, bool_p=bool_p, root=root, depth=deeper, work=work)
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "null")
    if typ is None:
        typ = "object" if "properties" in schema else "string"
    if typ == "object":
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", props))
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or rng.random() < 0.5:
                out[name] = gen_value(sub, rng, bool_p=bool_p, root=root, depth=deeper, work=work)
        return out
    if typ == "array":
        lo = max(0, _int_bound(schema, "minItems", 1 if depth < 3 else 0, MAX_SCHEMA_ITEMS))
        hi = schema.get("maxItems", max(lo, 3 if depth < 3 else lo))
        hi = min(_int_bound(schema, "maxItems", hi, 1 << 62), lo + _ITEMS_SPAN)
        n = lo + rng.randint(max(0, hi - lo) + 1)
        items = schema.get("items", {"type": "string"})
        return [
            gen_value(items, rng, bool_p=bool_p, root=root, depth=deeper, work=work)
            for _ in range(n)
        ]
    if typ == "boolean":
        return rng.random() < bool_p
    if typ == "integer":
        lo_i, hi_i = _bounds(schema, integer=True)
        return int(lo_i + rng.randint(int(hi_i - lo_i) + 1))
    if typ == "number":
        lo_f, hi_f = _bounds(schema, integer=False)
        return round(lo_f + rng.random() * (hi_f - lo_f), 4)
    if typ == "null":
        return None
    # string
    lo_s = _int_bound(schema, "minLength", 0, MAX_SCHEMA_STRING)
    hi_s = _int_bound(schema, "maxLength", max(lo_s, 60), 1 << 62)
    text = gen_text(rng, 3 + rng.randint(6))
    if len(text) < lo_s:  # the same text as appending piece by piece, in linear time
        parts, size = [text], len(text)
        while size < lo_s:
            piece = gen_text(rng, 4)
            parts.append(piece)
            size += 1 + len(piece)
        text = " ".join(parts)
    if "maxLength" not in schema and not schema.get("format") and not schema.get("pattern"):
        return _Free(text)  # free text: gen_json may lengthen it to the target length
    return text[:hi_s]


class _Free(str):
    """A generated string with no length limit: a candidate for lengthening."""

    __slots__ = ()


def _free_slots(value: Any, out: list[tuple[Any, Any]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, _Free):
                out.append((value, k))
            else:
                _free_slots(v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, _Free):
                out.append((value, i))
            else:
                _free_slots(v, out)


def gen_json(
    schema: dict[str, Any], rng: Rng, target_tokens: int, *, bool_p: float = 0.5
) -> tuple[str, int]:
    """JSON valid under ``schema`` of about ``target_tokens`` tokens; returns (text, tokens).

    Free-text string fields (no ``maxLength``/``format``/``pattern``) are lengthened so the
    reply has the length the profile draws, as a real model's discussion turn packed in a
    JSON field would; a schema without such fields gives what it gives (a vote is short).
    Tokens are estimated at ~4 characters each, like prompts.
    """
    value = gen_value(schema, rng, bool_p=bool_p)
    text = json.dumps(value)
    slots: list[tuple[Any, Any]] = []
    _free_slots(value, slots)
    extra = target_tokens - len(text) // 4
    if slots and extra > 0:
        for i, (holder, key) in enumerate(slots):
            share = extra // len(slots) + (1 if i < extra % len(slots) else 0)
            if share > 0:
                holder[key] = str(holder[key]) + " " + gen_text(rng, share)
        text = json.dumps(value)
    return text, max(1, len(text) // 4)


def _bounds(schema: dict[str, Any], *, integer: bool) -> tuple[float, float]:
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    if "exclusiveMinimum" in schema:
        lo = schema["exclusiveMinimum"] + (1 if integer else 1e-6)
    if "exclusiveMaximum" in schema:
        hi = schema["exclusiveMaximum"] - (1 if integer else 1e-6)
    if lo is None:
        lo = 0 if hi is None else hi - 10
    if hi is None:
        hi = lo + 10
    if integer:
        return math.ceil(lo), math.floor(hi)
    return float(lo), float(hi)


# --- tool calls --------------------------------------------------------------------------


def gen_tool_call(
    tools: list[dict[str, Any]], rng: Rng, *, bool_p: float = 0.5, name: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Pick one offered tool (or the named one) and arguments valid for its parameters."""
    fns = [t.get("function", t) for t in tools]
    if name is not None:
        fns = [f for f in fns if f.get("name") == name] or fns
    fn = fns[rng.randint(len(fns))]
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    args = gen_value(params, rng, bool_p=bool_p)
    return str(fn.get("name", "tool")), args if isinstance(args, dict) else {}
