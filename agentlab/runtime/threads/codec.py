"""Compact encodings for agent-thread histories and thread state.

A history is stored as *frames*: one orjson-encoded message per line, each line ending in
``b"\\n"``. JSON never contains a raw newline (it escapes them), so lines are unambiguous.
Appending a turn is a bytes concatenation — the slice never re-encodes old messages — and
decoding the whole history is one ``orjson.loads`` of the frames joined into an array.

A *cold* history (a thread idle for a while) is zlib-compressed and marked by a leading
``b"z"`` byte; an orjson message always starts with ``b"{"``, so the two never collide.
Readers accept both forms; writers append only to the raw form (``append_frames``
decompresses first). zlib rather than zstd because it ships with Python (zstd would need
a dependency; see the README for measured ratios).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = [
    "append_frames",
    "compress_history",
    "decode_history",
    "decode_state",
    "encode_history",
    "encode_state",
    "history_len",
    "is_compressed",
    "raw_history",
]

_Z = b"z"
_LEVEL = 3  # measured on 56 KB histories: 2.5x in 0.7 ms (level 6: 2.7x in 1.6 ms)


_NL = orjson.OPT_APPEND_NEWLINE


def encode_history(messages: Iterable[dict[str, Any]]) -> bytes:
    """Encode messages as newline-terminated orjson frames."""
    return b"".join([orjson.dumps(m, option=_NL) for m in messages])


def is_compressed(blob: bytes) -> bool:
    """Whether ``blob`` is a cold (zlib) history."""
    return blob[:1] == _Z


def raw_history(blob: bytes | None) -> bytes:
    """The uncompressed frames of ``blob`` (``b""`` for ``None``)."""
    if not blob:
        return b""
    if blob[:1] == _Z:
        return zlib.decompress(blob[1:])
    return blob


def compress_history(blob: bytes) -> bytes:
    """The cold form of ``blob`` (unchanged if already cold or empty)."""
    if not blob or blob[:1] == _Z:
        return blob
    return _Z + zlib.compress(blob, _LEVEL)


def append_frames(blob: bytes | None, messages: Iterable[dict[str, Any]]) -> bytes:
    """``blob`` with ``messages`` appended (returned raw, i.e. hot)."""
    # one join: the new frames are copied once, not into their own blob first
    return b"".join([raw_history(blob), *[orjson.dumps(m, option=_NL) for m in messages]])


def decode_history(blob: bytes | None) -> list[dict[str, Any]]:
    """All messages of a history blob, hot or cold."""
    raw = raw_history(blob)
    if not raw:
        return []
    # One parse of "[m1,m2,...]" is ~3x faster than parsing line by line; two copies of
    # the frames (replace, join of a view), not four (slice, replace, two concatenations)
    body = raw.replace(b"\n", b",")
    out: list[dict[str, Any]] = orjson.loads(b"".join((b"[", memoryview(body)[:-1], b"]")))
    return out


def history_len(blob: bytes | None) -> int:
    """Number of messages in a history blob."""
    return raw_history(blob).count(b"\n")


def encode_state(state: dict[str, Any]) -> bytes:
    """Encode a small JSON state dict."""
    # orjson's result keeps its ~8 KiB growth buffer allocated (measured: 8.2 KiB resident
    # for a 550-byte result); a copy is exact-size, which matters for 100k stored states.
    return memoryview(orjson.dumps(state)).tobytes()


def decode_state(data: bytes | None) -> dict[str, Any] | None:
    """Decode :func:`encode_state` output (``None`` stays ``None``)."""
    if data is None:
        return None
    out: dict[str, Any] = orjson.loads(data)
    return out
