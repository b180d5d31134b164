"""The KV cache of the simulated vLLM engine: blocks, automatic prefix caching, LRU eviction.

A model of vLLM v1's ``KVCacheManager`` / ``BlockPool`` at the level that changes timing:

- **Blocks.** KV memory is ``kv_blocks`` blocks of ``block_size`` tokens (``0`` blocks =
  unlimited). A request holds ``ceil(computed tokens / block_size)`` blocks; a step that
  cannot get the blocks it needs preempts (see :mod:`agentlab.llm.sim_engine`).
- **Prefix caching.** A full block of prompt tokens is identified by the hash chain of all
  tokens up to its end (:func:`prompt_block_hashes`). When a request has computed a full
  prompt block, the block is *cached* under that hash (unless another block already is).
  A newly scheduled request takes the longest prefix of its block hashes that is cached
  (in use by others or free) and skips computing those tokens; as in vLLM, the last
  prompt token is always computed, so at most ``(prompt - 1) // block_size`` blocks hit.
- **Free queue and eviction.** Freed blocks go to the tail of a free queue, a request's
  blocks in reverse order (its last block is evicted first); never-used blocks sit at the
  head. Allocation takes blocks from the head; taking a cached block evicts its hash. A
  cache hit on a free cached block takes it out of the queue. So cached prefixes are
  evicted least-recently-freed first (LRU), and only when memory is needed.

The engine passes token identities as block hashes: ``EngineRequest.hashes``. A server
computes them with :func:`chain_segments` from its prompt laid out as the chat template lays
it out, in pieces of known token counts (``Tokenizer.block_segments``), so block ``i`` covers
tokens ``[i * block_size, (i + 1) * block_size)`` as it does in vLLM; :func:`prompt_block_hashes`
is the same chain over one piece of text (engine tests).
"""

from __future__ import annotations

import math
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from agentlab.errors import ConfigError

__all__ = ["KVCache", "block_bytes", "chain_blocks", "chain_segments", "prompt_block_hashes"]


def block_bytes(block_size: int, chars_per_token: float = 4.0) -> int:
    """Bytes of prompt text per KV block in :func:`prompt_block_hashes`' layout."""
    return max(1, int(block_size * chars_per_token))


def prompt_block_hashes(
    text: str, prompt_tokens: int, *, block_size: int = 16, chars_per_token: float = 4.0
) -> tuple[int, ...]:
    """The hash chain of a prompt's full token blocks, from its text.

    Token identities are approximated by text: block ``i`` covers the UTF-8 bytes
    ``[i * w, (i + 1) * w)`` with ``w = block_size * chars_per_token``, so two prompts that
    share their first ``k * w`` bytes share their first ``k`` block hashes, as their token
    blocks would. Each hash covers the whole prefix up to its block's end (CRC-32 chained
    through the blocks, plus the block index above bit 32), as vLLM's hash of (parent hash,
    block tokens). At most ``prompt_tokens // block_size`` blocks (full blocks only).

    Args:
        text: the prompt as the server sees it (chat template, tools, messages), in order.
        prompt_tokens: the prompt's token count (bounds the number of full blocks).
        block_size: tokens per KV block.
        chars_per_token: bytes of text per token of the block layout.
    """
    data = text.encode("utf-8", "surrogatepass")
    w = block_bytes(block_size, chars_per_token)
    return tuple(chain_blocks(data, w, min(prompt_tokens // block_size, len(data) // w)))


def chain_blocks(data: bytes, w: int, count: int, start: int = 0, crc: int = 0) -> list[int]:
    """The hashes of blocks ``start .. start + count - 1`` of :func:`prompt_block_hashes`,
    ``data`` starting at block ``start``'s first byte and ``crc`` the chain before it (the
    low 32 bits of block ``start - 1``'s hash; 0 at the start): a prompt whose head's
    chain is known is hashed from there on (``SimServer``: the tools block every call
    repeats)."""
    end = start + count
    tags = _TAGS
    if end > len(tags):  # a new list swapped in whole: threads never see a half-built one
        tags = _grow_tags(end)
    f = zlib.crc32
    # block offsets and index bits zipped in (no per-block multiply, add and shift in
    # Python: half the cost of a ~20-block chain, issue 22)
    offsets = range(0, count * w, w)
    return [
        (crc := f(data[i : i + w], crc)) | t for i, t in zip(offsets, tags[start:end], strict=True)
    ]


def chain_segments(
    segments: Sequence[tuple[bytes, int]],
    block_size: int,
    count: int,
    start: tuple[int, int, int] = (0, 0, 0),
    bytes_per_token: float = 4.0,
) -> tuple[list[int], tuple[int, int, int]]:
    """The block hashes of a prompt given as pieces ``(data, tokens)`` in token order, and
    the chain's state after the last piece (to continue from, as a kept head).

    Block ``i`` ends at token ``(i + 1) * block_size``: block ends sit where the tokenizer's
    counts put them, whatever the bytes per token of a piece (JSON schemas, code, prose). A
    block end ``e`` tokens into a piece of ``L`` bytes cuts it after byte
    ``min(L, int(e * bytes_per_token))``: a cut depends on the piece's bytes before it only,
    so two prompts whose pieces agree up to a point agree on every block before it (a cut at
    ``L * e // t``, tokens spread evenly over the piece, would move with the piece's end: a
    conversation's single long message then shared no block with its next version). Each
    hash is the CRC-32 of every byte before its block's cut, chained as in
    :func:`prompt_block_hashes` (index above bit 32); the bytes of a piece past its last
    cut join the next block. At most ``count`` hashes; pieces after the ``count``-th block
    end are not read (and the returned state is then not to be continued).

    ``start``: ``(tokens before the first piece, blocks ended before it, CRC of the bytes
    before it)``, e.g. a previous call's returned state; the returned state has that form.
    """
    pos, j, crc = start
    tags = _TAGS
    if count > len(tags):
        tags = _grow_tags(count)
    f = zlib.crc32
    out: list[int] = []
    append = out.append
    r = bytes_per_token
    end = (j + 1) * block_size  # the token at which the next block ends
    for data, t in segments:
        if j >= count:
            break
        top = pos + t
        if end > top or t <= 0:  # no block ends in it: its bytes join the next block
            crc = f(data, crc)
            pos = top
            continue
        cut = 0
        n = len(data)
        while end <= top and j < count:
            at = int((end - pos) * r)
            if at > n:
                at = n
            crc = f(data[cut:at], crc)
            append(crc | tags[j])
            cut = at
            j += 1
            end += block_size
        crc = f(data[cut:], crc)
        pos = top
    return out, (pos, j, crc)


#: ``j << 32`` for each block index ``j`` (a block hash's index bits), built once
_TAGS: list[int] = [j << 32 for j in range(1024)]


def _grow_tags(end: int) -> list[int]:
    global _TAGS
    tags = [j << 32 for j in range(max(end, 2 * len(_TAGS)))]
    _TAGS = tags
    return tags


_NO_COUNTS: Mapping[int, int] = {}  # (hit_bound's default: nothing left)


class KVCache:
    """Block accounting and the prefix cache of one engine (see the module docstring)."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool) -> None:
        self.limited = num_blocks > 0
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.fresh = num_blocks  # never-used blocks, at the head of the free queue
        # free queue after the fresh blocks, head first: key -> hash (a cached block) or
        # None (a run of uncached blocks, keys ``key .. key + runs[key] - 1``: they are
        # anonymous, so one entry stands for all of them, not one per block; issue 22)
        self.free: OrderedDict[int, int | None] = OrderedDict()
        self.runs: dict[int, int] = {}
        self.nfree = 0  # blocks in the free queue
        # hash -> block key, and its users (ints only: no object for the GC per block)
        self.cached: dict[int, int] = {}
        self.users: dict[int, int] = {}
        self._key = 0
        self.evicted_total = 0  # cached blocks evicted to make room
        self.query_tokens_total = 0  # prompt tokens looked up (vLLM prefix_cache_queries)
        self.hit_tokens_total = 0  # of which found cached (vLLM prefix_cache_hits)

    # --- capacity ---------------------------------------------------------------------

    def free_count(self) -> float:
        """Blocks that can be allocated (never used + free, cached or not)."""
        return self.fresh + self.nfree if self.limited else math.inf

    def used(self) -> int:
        """Blocks held by requests (for ``kv_cache_usage``)."""
        return self.num_blocks - self.fresh - self.nfree if self.limited else 0

    def take(self, n: int) -> None:
        """Allocate ``n`` blocks (the caller checked :meth:`free_count`), evicting LRU."""
        if not self.limited or n <= 0:
            return
        fresh = self.fresh
        if fresh:  # (the never-used blocks first; none left once the cache has filled)
            if n <= fresh:
                self.fresh = fresh - n
                return
            n -= fresh
            self.fresh = 0
        self.nfree -= n
        free, cached, users = self.free, self.cached, self.users
        pop = free.popitem
        evicted = 0
        while n:
            key, h = pop(False)  # (the head: last=False)
            if h is None:  # a run of uncached blocks: its head blocks go
                c = self.runs.pop(key)
                if c > n:  # the rest stays at the head, under its first key
                    key += n
                    free[key] = None
                    free.move_to_end(key, False)
                    self.runs[key] = c - n
                    break
                n -= c
            else:
                del cached[h], users[h]
                evicted += 1
                n -= 1
        self.evicted_total += evicted

    def check_fits(self, prompt: int, output: int, profile: str) -> None:
        """Raise ConfigError if a request of ``prompt + output`` tokens can never fit."""
        need = -(-(prompt + output) // self.block_size)
        if self.limited and need > self.num_blocks:
            raise ConfigError(
                f"simulated request of {prompt} + {output} tokens needs {need} KV blocks; "
                f"profile {profile!r} has kv_blocks={self.num_blocks}"
            )

    # --- prefix cache -----------------------------------------------------------------

    def lookup(self, hashes: Sequence[int], prompt: int) -> int:
        """Blocks of ``hashes`` cached as a prefix (at most ``(prompt - 1) // block_size``)."""
        if not self.caching or not hashes:
            return 0
        top = (prompt - 1) // self.block_size
        if top < len(hashes):
            hashes = hashes[:top] if top > 0 else ()
        cached = self.cached
        i = 0
        for h in hashes:  # (a for loop: no index and bound test per block)
            if h not in cached:
                break
            i += 1
        return i

    def hit_bound(
        self,
        hashes: Sequence[int],
        prompt: int,
        live: Mapping[int, int],
        own: int = 0,
        left: Mapping[int, int] = _NO_COUNTS,
    ) -> int:
        """Blocks of ``hashes`` cached now or live (``live`` less ``left``: counts of the
        blocks that requests in the engine will compute, ``own`` of them the asking
        request's), as a prefix (at most ``(prompt - 1) // block_size``): an upper bound of
        the hits of a request queued now, since only a request in the engine can cache a
        block before it is scheduled (later arrivals queue behind it)."""
        top = (prompt - 1) // self.block_size
        if top < len(hashes):
            hashes = hashes[:top] if top > 0 else ()
        cached = self.cached
        i = 0
        for h in hashes:  # (a for loop: no index and bound test per block)
            if h not in cached and live.get(h, 0) - left.get(h, 0) <= own:
                break
            i += 1
        return i

    def free_hits(self, hashes: Sequence[int], n: int) -> int:
        """How many of the first ``n`` (cached) blocks are free, i.e. count as allocated."""
        # (counted in C: 0.67x the instructions of a generator expression at 150 blocks)
        return list(map(self.users.__getitem__, hashes[:n])).count(0)

    def acquire(self, hashes: Sequence[int], n: int, prompt: int) -> None:
        """Take a reference on the first ``n`` cached blocks (a cache hit)."""
        self.query_tokens_total += prompt
        self.hit_tokens_total += n * self.block_size
        cached, users, free = self.cached, self.users, self.free
        for h in hashes[:n]:
            u = users[h]
            if u == 0:
                del free[cached[h]]
                self.nfree -= 1
            users[h] = u + 1

    def register(self, hashes: Sequence[int]) -> list[int]:
        """Cache blocks just computed under ``hashes`` (in order); returns those that were
        not cached already (the others stay with the block that holds them)."""
        cached, users = self.cached, self.users
        key = self._key
        new = []
        for h in hashes:
            if h not in cached:
                key += 1
                cached[h] = key
                users[h] = 1
                new.append(h)
        self._key = key
        return new

    def release(self, plain: int, hashed: Sequence[int]) -> None:
        """Free a request's blocks: ``plain`` uncached ones, then its ``hashed`` ones in
        reverse order (vLLM frees the tail first, so it is evicted first)."""
        free = self.free
        if self.limited and plain > 0:  # one run of fresh keys, in increasing order
            key = self._key + 1
            free[key] = None
            self.runs[key] = plain
            self._key += plain
            self.nfree += plain
        cached, users = self.cached, self.users
        freed = 0
        for h in reversed(hashed):
            u = users[h] - 1
            users[h] = u
            if u == 0:
                free[cached[h]] = h
                freed += 1
        self.nfree += freed

    # --- state ------------------------------------------------------------------------

    def free_queue(self) -> list[tuple[int, int | None]]:
        """The free queue after the fresh blocks, head first, one ``(key, hash or None)``
        per block (runs of uncached blocks spelled out)."""
        out: list[tuple[int, int | None]] = []
        for k, h in self.free.items():
            if h is None:
                out.extend((j, None) for j in range(k, k + self.runs[k]))
            else:
                out.append((k, h))
        return out

    def export_state(self) -> dict[str, Any]:
        """JSON-able state."""
        free: list[list[int | None]] = []  # (free_queue's pairs as lists, in one pass)
        for k, h in self.free.items():
            if h is None:
                free.extend([j, None] for j in range(k, k + self.runs[k]))
            else:
                free.append([k, h])
        users = self.users
        return {
            "fresh": self.fresh,
            "free": free,
            "cached": [[h, k, users[h]] for h, k in self.cached.items()],
            "key": self._key,
            "evicted_total": self.evicted_total,
            "query_tokens_total": self.query_tokens_total,
            "hit_tokens_total": self.hit_tokens_total,
        }

    def restore_state(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`export_state`."""
        self.fresh = int(d.get("fresh", self.num_blocks))
        self.free, self.runs = OrderedDict(), {}
        run = None  # the key of the run of uncached blocks the queue ends with
        for k, h in d.get("free", []):
            k = int(k)
            if h is not None:
                self.free[k] = int(h)
                run = None
            elif run is not None and k == run + self.runs[run]:  # the next key of the run
                self.runs[run] += 1
            else:
                self.free[k] = None
                self.runs[k] = 1
                run = k
        self.nfree = len(d.get("free", []))
        cached = d.get("cached", [])
        self.cached = {int(h): int(k) for h, k, _ in cached}
        self.users = {int(h): int(n) for h, _, n in cached}
        self._key = int(d.get("key", 0))
        self.evicted_total = int(d.get("evicted_total", 0))
        self.query_tokens_total = int(d.get("query_tokens_total", 0))
        self.hit_tokens_total = int(d.get("hit_tokens_total", 0))
