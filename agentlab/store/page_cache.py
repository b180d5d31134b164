"""Releasing the old part of a growing append-only file from the page cache.

A run log is written once and read later, most of it after the run; a big society writes
gigabytes of it per tick (1.8 GB at 1M agents), and every new page-cache page it fills
costs the writer kernel time (measured here: 0.7-1.6 s of system time per GB written into
fresh pages, 0.4 s per GB when the file's older pages are released as it grows;
``store/README.md``), besides pushing other files out of the cache.

:class:`CacheRelease` keeps, per file, the range it last advised. Every ``keep`` bytes a
file grows past ``2 * keep``, ``POSIX_FADV_DONTNEED`` is given over the range since the
advice before last: the first advice over a range starts its write-back (dirty pages
cannot be dropped), the second drops it, by then clean. Nothing waits on the disk, and the
newest ``keep`` bytes (what a live view tails, what the commit reads) stay cached; a query
over the whole run after it reads the older ones from disk. Linux only (elsewhere no
advice is given); ``AGENTLAB_LOG_CACHE=keep`` in the environment turns it off.
"""

from __future__ import annotations

import os

__all__ = ["KEEP_CACHED", "CacheRelease"]

#: the newest bytes of each file left in the page cache
KEEP_CACHED = 64 << 20
_FADVISE = getattr(os, "posix_fadvise", None)


class CacheRelease:
    """The page-cache advice of one writer's files (not thread-safe: the writer holds
    its IO lock around :meth:`after_write`)."""

    __slots__ = ("_ranges", "active")

    def __init__(self) -> None:
        #: ``AGENTLAB_LOG_CACHE=keep`` leaves every written page in the page cache
        self.active = _FADVISE is not None and os.environ.get("AGENTLAB_LOG_CACHE") != "keep"
        #: relpath -> (start, end) of the range last advised
        self._ranges: dict[str, tuple[int, int]] = {}

    def after_write(self, relpath: str, fd: int) -> None:
        """Advise the kernel about ``relpath`` (open as ``fd`` with ``O_APPEND``) after an
        append, if it grew by ``KEEP_CACHED`` since the last advice."""
        if not self.active:
            return
        end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: the end of the file after the write
        lo, hi = self._ranges.get(relpath, (0, 0))
        new_hi = end - KEEP_CACHED
        if new_hi - hi < KEEP_CACHED:
            return
        try:
            _FADVISE(fd, lo, new_hi - lo, os.POSIX_FADV_DONTNEED)  # type: ignore[misc]
        except OSError:  # advice only: a file system that refuses it keeps its pages
            self.active = False
            return
        self._ranges[relpath] = (hi, new_hi)

    def forget(self, relpath: str | None = None) -> None:
        """Drop what is known of ``relpath`` (every file when ``None``): it was reopened,
        truncated or replaced."""
        if relpath is None:
            self._ranges.clear()
        else:
            self._ranges.pop(relpath, None)
