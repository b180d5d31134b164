"""The ``search`` router: retrieve the few relevant tools, then a ReAct loop over them.

For an env with many ``@tool`` methods, showing the model every signature costs prompt
tokens on every call. :class:`SearchRouter` keeps a BM25F index over each tool's fields --
name, the ``keywords`` its author declared (``@tool(keywords=...)``), description, and
parameter names/descriptions/enum values -- (:class:`ToolIndex`, built once per env class
and cached), retrieves the top ``k`` tools for the request text, and runs the ReAct loop
with only those schemas offered. Recall@5 on the benchmark's 60-tool env (keywords / none):
93.8 / 91.7 % on its first 48 requests, 86.7 / 78.3 % on 60 held-out ones, 97.5 / 90.0 %
on 40 blind ones. ``expand="glove"`` (optional, the ``search-vectors`` extra) also
matches words by meaning: 97.9 / 91.7 / 100 % with keywords
(:mod:`agentlab.env.search_vectors`).

Counters (``router.stats`` and the ``routers`` column of ``timeline`` via
``RouteResult.search``): ``search_hits`` — the model called a tool it was offered;
``search_misses`` — it called none, or one outside the offered set; ``search_top1`` — the
tool it called was the best-ranked one.

Why a tiny pure-Python BM25 (measured with ``benchmarks/search_router.py --compare`` on
the 60-tool env): build 1.6 ms, query 165 µs, recall@5 91.7 %; ``rank-bm25`` 0.6 ms /
55 µs / 89.6 % and ``bm25s`` 2.6 ms / 118 µs / 89.6 % (no partial-word match, numpy);
DuckDB FTS needs an extension downloaded at first use (absent offline). Sub-millisecond
next to an LLM call, so no new dependency.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from typing import Any, ClassVar

from agentlab.env.base import EnvBase
from agentlab.env.routers import LLMLike, ReActRouter, RouteResult, register_router
from agentlab.env.search_vectors import EXPANSIONS, VectorExpansion, WordVectors
from agentlab.errors import ConfigError, UnknownNameError

__all__ = ["FIELD_WEIGHTS", "SearchRouter", "ToolIndex", "tokenize"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "with",
        "me",
        "my",
        "i",
        "you",
        "your",
        "we",
        "our",
        "please",
        "can",
        "could",
        "would",
        "some",
        "any",
    ]
)


_SUFFIXES = ("ations", "ation", "ments", "ment", "ness", "ers", "ies", "ing", "er", "ed", "es", "s")


def _stem(word: str) -> str:
    """A light suffix stripper: ``posts``/``posting``/``posted`` -> ``post``,
    ``payments`` -> ``pay``, ``vaccination``/``vaccines`` -> ``vaccin``; words of four
    letters or fewer are kept (``bus``, ``news``)."""
    if len(word) <= 4:
        return word
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def tokenize(text: str) -> list[str]:
    """Lower-case words (``snake_case`` split), stop words dropped, lightly stemmed."""
    return [_stem(w) for w in _words(text)]


def _words(text: str) -> list[str]:
    """The words of ``text`` as written (lower-cased, ``snake_case`` split, no stop words)."""
    return [w for w in _WORD.findall(text.lower().replace("_", " ")) if w not in _STOP]


#: BM25F field weights: a term in the tool's name counts twice (the most specific text a
#: tool has); not tuned: 1-3 for the name, 0.5-1 for parameters move recall by one request
FIELD_WEIGHTS = {"name": 2.0, "keywords": 1.0, "description": 1.0, "parameters": 1.0}


def _tool_fields(spec: Any) -> dict[str, str]:
    """The text a tool is found by, per field: name, author keywords, description (summary
    and returns), parameters (names, descriptions, enum values)."""
    props = (spec.parameters or {}).get("properties") or {}
    params = []
    for n, p in props.items():
        params += [n, str(p.get("description", ""))]
        params += [str(v) for v in p.get("enum", ())]
    return {
        "name": spec.name,
        "keywords": " ".join(getattr(spec, "keywords", ()) or ()),
        "description": spec.description,
        "parameters": " ".join(params),
    }


def _tool_text(spec: Any) -> str:
    """All of a tool's searchable text in one string (for the ``--compare`` libraries)."""
    return " ".join(_tool_fields(spec).values())


class ToolIndex:
    """BM25F (Okapi, ``k1=1.2``, ``b=0.75``) over tool documents.

    Args:
        docs: ``{tool name: text}`` or ``{tool name: {field: text}}`` (fields of
            :data:`FIELD_WEIGHTS`).
        weights: per-field weights (default :data:`FIELD_WEIGHTS`).
        expand: ``"glove"``: also match request words to index words near in meaning
            (:mod:`agentlab.env.search_vectors`, the ``search-vectors`` extra); ``None``
            (default): words and their prefixes only.

    Raises:
        UnknownNameError: an unknown ``expand``.
        MissingExtraError: ``expand="glove"`` without the ``search-vectors`` extra.
    """

    def __init__(
        self,
        docs: dict[str, str] | dict[str, dict[str, str]],
        *,
        k1: float = 1.2,
        b: float = 0.75,
        weights: dict[str, float] | None = None,
        expand: str | None = None,
    ) -> None:
        if not docs:
            raise ConfigError("a tool index needs at least one tool")
        if expand is not None and expand not in EXPANSIONS:
            raise UnknownNameError("search expansion", expand, list(EXPANSIONS))
        weights = FIELD_WEIGHTS if weights is None else weights
        self.names = list(docs)
        self.k1, self.b = k1, b
        self._tf: list[dict[str, float]] = []
        written: dict[str, str] = {}  # the index's words as written -> their terms
        for name in self.names:
            doc = docs[name]
            fields = {"description": doc} if isinstance(doc, str) else doc
            counts: dict[str, float] = {}
            for fname, text in fields.items():
                if fname not in weights:
                    raise ConfigError(f"tool {name!r}: unknown index field {fname!r}")
                for w in _words(text):
                    t = written[w] = _stem(w)
                    counts[t] = counts.get(t, 0.0) + weights[fname]
            self._tf.append(counts)
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg = sum(self._len) / len(self._len) or 1.0
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(self.names)
        self._idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self._expand: dict[str, list[tuple[str, float]]] = {}
        self.expand = expand
        self.vectors: VectorExpansion | None = (
            None if expand is None else VectorExpansion(written, WordVectors.glove())
        )

    def _terms(self, term: str) -> list[tuple[str, float]]:
        """Index terms a query term matches, with a weight: itself (1.0), and the index
        words containing it (0.5; ``mail`` in ``email``/``mailbox``) — a wildcard match."""
        hit = self._expand.get(term)
        if hit is None:
            hit = [(term, 1.0)] if term in self._idf else []
            if len(term) >= 4:
                hit += [
                    (w, 0.5)
                    for w in self._idf
                    if w != term and (term in w or (len(w) >= 5 and w[:5] == term[:5]))
                ]
            if len(self._expand) < 10_000:
                self._expand[term] = hit
        return hit

    @classmethod
    def for_env(cls, env: EnvBase, expand: str | None = None) -> ToolIndex:
        """The index of ``env``'s tools, built once per env class (tool specs are per class)
        and ``expand``."""
        key = (type(env), expand)
        with _LOCK:
            index = _INDEXES.get(key)
            if index is None:
                specs = env.tool_specs()
                index = cls({name: _tool_fields(s) for name, s in specs.items()}, expand=expand)
                _INDEXES[key] = index
        return index

    def scores(self, query: str) -> dict[str, float]:
        """BM25 score of every tool for ``query``."""
        words = _words(query)
        q = [m for w in words for m in self._terms(_stem(w))]
        if self.vectors is not None:
            q += self.vectors.terms([(w, _stem(w)) for w in words])
        out = {}
        for name, tf, dl in zip(self.names, self._tf, self._len, strict=True):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * dl / self._avg)
            for t, weight in q:
                f = tf.get(t)
                if f:
                    s += weight * self._idf[t] * f * (self.k1 + 1) / (f + norm)
            out[name] = s
        return out

    def top(self, query: str, k: int, among: list[str] | None = None) -> list[str]:
        """The ``k`` best tools for ``query`` (ties: declaration order), ``among`` a subset."""
        scores = self.scores(query)
        names = self.names if among is None else [n for n in self.names if n in set(among)]
        ranked = sorted(names, key=lambda n: (-scores[n], self.names.index(n)))
        return ranked[:k]


_INDEXES: dict[tuple[type, str | None], ToolIndex] = {}
_LOCK = threading.Lock()


@register_router
class SearchRouter(ReActRouter):
    """ReAct over the top-``k`` tools that BM25 retrieves for the request.

    Args:
        k: tools offered per request (default 5).
        expand: ``"glove"``: match words by meaning too (:class:`ToolIndex`; the
            ``search-vectors`` extra); ``None`` (default): off.
        max_iterations, system_prompt: as for :class:`ReActRouter`.
    """

    kind: ClassVar[str] = "search"

    def __init__(
        self,
        env: EnvBase,
        *,
        llm: LLMLike | None = None,
        k: int = 5,
        expand: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(env, llm=llm, **kwargs)
        if not isinstance(k, int) or k < 1:
            raise ConfigError(f"search router k must be a positive int, got {k!r}")
        self.k = k
        self.expand = expand
        self.index = ToolIndex.for_env(env, expand)
        self.search_stats = {"search_hits": 0, "search_misses": 0, "search_top1": 0}
        self.chosen: Counter[str] = Counter()

    def _options(self) -> dict[str, Any]:
        return {**super()._options(), "k": self.k, "expand": self.expand}

    def retrieve(self, request: str) -> list[str]:
        """The tools offered for ``request``, best first."""
        return self.index.top(request, self.k, among=self.tool_names)

    async def _route(self, request: Any, agent_id: str | None) -> RouteResult:
        offered = self.retrieve(str(request))
        try:
            result = await self._loop(request, agent_id, offered)
        except BaseException as exc:
            exc._agentlab_search = self._score(offered, getattr(exc, "_agentlab_calls", []))  # type: ignore[attr-defined]
            raise
        result.search = self._score(offered, result.calls)
        return result

    def _score(self, offered: list[str], calls: list[dict[str, Any]]) -> dict[str, Any]:
        chosen = calls[0]["tool"] if calls else None
        hit = chosen is not None and chosen in offered
        top1 = hit and chosen == offered[0]
        self.search_stats["search_hits" if hit else "search_misses"] += 1
        self.search_stats["search_top1"] += int(top1)
        if chosen is not None:
            self.chosen[chosen] += 1
        return {"offered": offered, "chosen": chosen, "hit": hit, "top1": top1}
