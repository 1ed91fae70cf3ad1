"""A bound on the segment files one log keeps open: an LRU of open segments with pins.

Kafka keeps every segment of every partition open (three descriptors and two
maps each) and asks the operator to raise ``ulimit -n``; a library living in
someone else's process cannot. A :class:`SegmentCache` holds at most
``max_open`` segments open - descriptors, the ``.log`` map and the C
point-lookup cache - and releases the least recently used one when another
is opened. A released segment reopens by itself on its next use
(:meth:`pylog.storage.segment.LogSegment.fd`); the caller notices nothing but
the cost of an ``open``/``fstat``/``mmap`` (and a CRC check again of the
batches it reads by offset).

What is never released:

* the *kept* segment: the log's active segment (``keep()`` returns it). It
  is always open, so appends never reopen anything;
* a *pinned* segment: :meth:`pin` (or ``with cache.pinned(seg):``) holds it
  open until the matching :meth:`unpin`, for a reader that keeps its
  descriptor or map across calls. Eviction skips pinned entries; if every
  candidate is pinned or kept the cache goes over ``max_open`` rather than
  close something in use, and comes back under the bound as pins are dropped.

The entries are duck-typed (:class:`CachedFile`): ``_cache_used`` (the tick
of the last use, written by the entry on every use with :func:`tick`, no lock
needed), ``_cache_open()`` (open the files again; raises a
:mod:`pylog.errors` exception naming the file when it is gone or damaged)
and ``_cache_release()`` (close descriptors and maps). Recency is a global
counter rather than a linked list, so a use costs one attribute store and no
lock. The open entries sit in a min-heap keyed by the tick they had when
filed; an eviction pops the smallest, and refiles it under its current tick
if it was used since (its filed tick is then stale): the first popped entry
whose filed tick is current is the least recently used one, since every
other entry's last use is at or after its filed tick. O(log ``max_open``)
amortised per eviction.

Durability: releasing a segment writes nothing that was not already written
and loses nothing. An inactive segment was fsynced when it was rolled
(:meth:`pylog.storage.log.Log.roll`); a segment that still holds unflushed
bytes (one rebuilt by recovery, a cleaner's new segment) is fsynced by its
``_cache_release`` before its descriptor is closed, so an fsync error is
reported to the operation that caused the eviction instead of being lost with
the descriptor. What survives a crash or power loss is exactly what did
without the cache.

Thread-safety: every method takes ``lock`` - the owning log's lock, so a
thread holding it (every :class:`~pylog.storage.log.Log` read does) never sees
a segment closed under it by another thread, since only a thread holding the
lock evicts. Code that uses a segment without holding the lock pins it first.
"""
from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Tuple

#: the next use-tick (process-wide, strictly increasing; ``next`` on a count is atomic under the GIL)
tick: Callable[[], int] = itertools.count(1).__next__

#: default ``max_open_segments``: at most three descriptors each (.log, .index, .timeindex), so a
#: log holds at most about 200 however many segments it has (docs/durability.md, "Open files")
DEFAULT_MAX_OPEN_SEGMENTS = 64


class CachedFile(Protocol):
    """What the cache needs from an entry (a :class:`~pylog.storage.segment.LogSegment`)."""

    _cache_used: int

    def _cache_open(self) -> None: ...

    def _cache_release(self) -> None: ...


class SegmentCache:
    """At most ``max_open`` entries open; the least recently used unpinned, unkept one is released.

    Complexity: :meth:`make_room`, :meth:`ensure_open` and :meth:`pin` are O(1)
    plus O(open entries) per eviction; :meth:`unpin` and :meth:`discard` O(1).
    Thread-safety: see the module docstring (all methods take ``lock``).
    """

    def __init__(self, max_open: int, *, lock: Optional[Any] = None,
                 keep: Optional[Callable[[], Any]] = None) -> None:
        if not isinstance(max_open, int) or isinstance(max_open, bool) or max_open < 1:
            raise ValueError(f"max_open must be an int >= 1, got {max_open!r}")
        self.max_open = max_open
        self.lock = threading.RLock() if lock is None else lock
        self._keep = keep
        self._open: Dict[int, CachedFile] = {}  # id(entry) -> entry, for every entry holding its files
        self._pins: Dict[int, int] = {}  # id(entry) -> pin count (> 0)
        #: (tick when filed, filing number, entry); an item is live while _filed[id(entry)] is its number
        self._heap: List[Tuple[int, int, CachedFile]] = []
        self._filed: Dict[int, int] = {}
        self._filing = itertools.count().__next__
        #: counters for tests and metrics: entries released, and released entries opened again
        self.evictions = 0
        self.reopens = 0

    # ---- state ------------------------------------------------------------------
    def __len__(self) -> int:
        """How many entries hold their files open now."""
        return len(self._open)

    def is_open(self, entry: CachedFile) -> bool:
        return id(entry) in self._open

    def pin_count(self, entry: CachedFile) -> int:
        return self._pins.get(id(entry), 0)

    # ---- use --------------------------------------------------------------------
    def make_room(self) -> None:
        """Release least recently used entries until one more fits under ``max_open``: called
        before a new entry opens its files, so that a failing release (an fsync error) fails
        the new entry's creation before it created anything. Raises what a release raises."""
        with self.lock:
            self._evict(self.max_open - 1, None)

    def opened(self, entry: CachedFile) -> None:
        """Count ``entry``, which has just opened its files (after :meth:`make_room`); releases nothing."""
        with self.lock:
            entry._cache_used = tick()
            self._open[id(entry)] = entry
            self._file(entry)

    def ensure_open(self, entry: CachedFile) -> None:
        """Open ``entry``'s files again if they were released, making room first (so a tight
        descriptor limit sees at most ``max_open`` of this cache's segments at any moment).

        Raises what ``entry._cache_open()`` raises (a :mod:`pylog.errors` exception naming the
        file) and leaves the entry released; the next use tries again.
        """
        with self.lock:
            entry._cache_used = tick()
            if id(entry) in self._open:
                return
            self._evict(self.max_open - 1, entry)
            entry._cache_open()
            self._open[id(entry)] = entry
            self._file(entry)
            self.reopens += 1

    def pin(self, entry: CachedFile) -> None:
        """Open ``entry`` (if released) and keep it open until the matching :meth:`unpin`."""
        with self.lock:
            self.ensure_open(entry)
            self._pins[id(entry)] = self._pins.get(id(entry), 0) + 1

    def unpin(self, entry: CachedFile) -> None:
        """Drop one pin; once none is left the entry may be released again (it is not released here)."""
        with self.lock:
            n = self._pins.get(id(entry), 0)
            if n <= 0:
                raise RuntimeError(f"unpin of {entry!r}, which is not pinned")
            if n == 1:
                del self._pins[id(entry)]
            else:
                self._pins[id(entry)] = n - 1
            if len(self._open) > self.max_open:
                self._evict(self.max_open, None)

    @contextlib.contextmanager
    def pinned(self, entry: CachedFile) -> Iterator[CachedFile]:
        """``with cache.pinned(seg):`` - :meth:`pin` on entry, :meth:`unpin` on exit."""
        self.pin(entry)
        try:
            yield entry
        finally:
            self.unpin(entry)

    def discard(self, entry: CachedFile) -> None:
        """Forget ``entry`` (it closed itself, or was deleted); its pins go with it."""
        with self.lock:
            self._open.pop(id(entry), None)
            self._pins.pop(id(entry), None)
            self._filed.pop(id(entry), None)  # its heap item is dropped when popped

    def resize(self, max_open: int) -> None:
        """Change the bound (a reconfigured log); releases entries at once when it shrinks."""
        if not isinstance(max_open, int) or isinstance(max_open, bool) or max_open < 1:
            raise ValueError(f"max_open must be an int >= 1, got {max_open!r}")
        with self.lock:
            self.max_open = max_open
            self._evict(max_open, None)

    # ---- eviction ---------------------------------------------------------------
    def _file(self, entry: CachedFile) -> None:
        n = self._filing()
        self._filed[id(entry)] = n
        heap = self._heap
        heapq.heappush(heap, (entry._cache_used, n, entry))
        if len(heap) > 4 * len(self._open) + 64:  # dead items of released entries: rebuild
            filed = self._filed
            self._heap = [it for it in heap if filed.get(id(it[2])) == it[1]]
            heapq.heapify(self._heap)

    def _evict(self, limit: int, spare: Optional[CachedFile]) -> None:
        """Release least recently used entries until at most ``limit`` are open (never ``spare``,
        a pinned or the kept one). Called with the lock held.

        A release that raises (the fsync of a segment with unflushed bytes failed) leaves that
        entry open and propagates: the caller's operation reports the disk error.
        """
        open_ = self._open
        if len(open_) <= limit:
            return
        heap, filed, pins = self._heap, self._filed, self._pins
        kept = None if self._keep is None else self._keep()
        held: List[Tuple[int, int, CachedFile]] = []
        try:
            while len(open_) > limit and heap:
                item = heapq.heappop(heap)
                used, n, e = item
                if filed.get(id(e)) != n:
                    continue  # released or discarded since it was filed
                if e._cache_used != used:  # used since: file it under its last use
                    heapq.heappush(heap, (e._cache_used, n, e))
                    continue
                if e is spare or e is kept or id(e) in pins:
                    held.append(item)
                    continue
                held.append(item)  # back in the heap if the release raises
                e._cache_release()
                held.pop()
                del open_[id(e)]
                del filed[id(e)]
                self.evictions += 1
        finally:
            for item in held:
                heapq.heappush(heap, item)

    def _check(self) -> None:
        """Assert the invariants: pinned entries are open; beyond ``max_open`` only pinned/kept ones."""
        live = {(id(e), n) for _, n, e in self._heap}
        for k in self._open:
            assert (k, self._filed.get(k)) in live, "an open entry is not in the heap"
        for k in self._pins:
            assert k in self._open, "a pinned entry is released"
            assert self._pins[k] > 0
        if len(self._open) > self.max_open:
            kept = None if self._keep is None else self._keep()
            unforced = [e for k, e in self._open.items() if k not in self._pins and e is not kept]
            # Over the bound only while pins/kept entries force it: then at most one unforced
            # entry (the one just opened for use) may remain.
            assert len(unforced) <= 1, f"{len(self._open)} open > {self.max_open} with {len(unforced)} releasable"


