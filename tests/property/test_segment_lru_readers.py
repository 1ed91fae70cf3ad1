"""The open-segment LRU (pylog/storage/segment_cache.py) against a model, with concurrent readers.

Two state machines:

* :class:`CacheLRU` drives a :class:`SegmentCache` over real files (one
  descriptor each), single-threaded, against an exact LRU model: after every
  step the set of open entries is the model's (which one is released is the
  least recently used one that is neither pinned nor the one being opened),
  never more than ``max_open`` are open unless pins force it, a pinned entry
  is never released, and every read returns the entry's own bytes.
* :class:`CacheUnderReaders` runs the same rules while reader threads pin
  random entries and read them *without* the cache's lock (``os.pread`` on
  the pinned descriptor, yielding the GIL in between) as the main thread opens
  others and evicts. A descriptor closed under a reader would fail with EBADF
  or - reused by another file - return another file's bytes; every read must
  return the entry's own bytes.
* :class:`LogUnderReaders` drives a real :class:`pylog.Log` with tiny segments
  and a small ``max_open_segments``: appends roll segments while reader
  threads call ``get``/``read`` on what was acknowledged; every record read
  is the model's, the cache never holds more than ``max_open_segments`` and
  the log's directory never has more than three descriptors per open segment.

Replay a failure with the seed hypothesis prints
(``.venv/bin/python -m pytest tests/property/test_segment_lru_readers.py``).
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from typing import Dict, List, Optional, Set

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pylog
from pylog.storage.fileio import FileIO
from pylog.storage.segment_cache import SegmentCache, tick


class FileEntry:
    """A file that holds one descriptor while open (what the cache needs from a segment)."""

    def __init__(self, path: str, content: bytes) -> None:
        self.path = path
        self.content = content
        with open(path, "wb") as f:
            f.write(content)
        self.fd: Optional[int] = os.open(path, os.O_RDONLY)
        self._cache_used = tick()
        self.opens = 1

    def _cache_open(self) -> None:
        assert self.fd is None, "opened twice"
        self.fd = os.open(self.path, os.O_RDONLY)
        self.opens += 1

    def _cache_release(self) -> None:
        assert self.fd is not None, "released twice"
        fd, self.fd = self.fd, None
        os.close(fd)

    def read(self) -> bytes:
        fd = self.fd
        assert fd is not None, f"{self.path} is not open"
        return os.pread(fd, len(self.content) + 1, 0)


class CacheLRU(RuleBasedStateMachine):
    """Single-threaded: the exact LRU model."""

    READERS = 0

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="segcache-")
        self.max_open = 3
        self.cache = SegmentCache(self.max_open)
        self.entries: List[FileEntry] = []
        # the model: open entries, least recently used first; main-thread pins per entry
        self.order: List[int] = []
        self.pins: Dict[int, int] = {}
        self.failures: List[str] = []
        self.stop = threading.Event()
        self.readers = [threading.Thread(target=self._reader, args=(i,), daemon=True) for i in range(self.READERS)]
        for t in self.readers:
            t.start()

    # ---- the exact model (single-threaded machine only) ---------------------------
    def _model_evict(self, limit: int, spare: Optional[int]) -> None:
        i = 0
        while len(self.order) > limit and i < len(self.order):
            k = self.order[i]
            if k in self.pins or k == spare:
                i += 1
                continue
            del self.order[i]

    def _model_use(self, k: int) -> None:
        if k in self.order:
            self.order.remove(k)
        else:
            self._model_evict(self.max_open - 1, k)
        self.order.append(k)

    # ---- rules ----------------------------------------------------------------------
    @rule(size=st.integers(0, 64))
    def add(self, size: int) -> None:
        k = len(self.entries)
        content = b"entry-%d:" % k + bytes([k % 251]) * size
        with self.cache.lock:
            self.cache.make_room()
            e = FileEntry(os.path.join(self.dir, "%d.log" % k), content)
            self.entries.append(e)
            self.cache.opened(e)
        self._model_evict(self.max_open - 1, None)
        self.order.append(k)

    @precondition(lambda self: self.entries)
    @rule(pick=st.integers(0, 1 << 30))
    def use(self, pick: int) -> None:
        k = pick % len(self.entries)
        e = self.entries[k]
        with self.cache.lock:  # a user holding the lock: nobody else evicts meanwhile
            self.cache.ensure_open(e)
            assert e.read() == e.content
        self._model_use(k)

    @precondition(lambda self: self.entries)
    @rule(pick=st.integers(0, 1 << 30))
    def pin(self, pick: int) -> None:
        k = pick % len(self.entries)
        e = self.entries[k]
        self.cache.pin(e)
        self._model_use(k)
        self.pins[k] = self.pins.get(k, 0) + 1

    @precondition(lambda self: self.pins)
    @rule(pick=st.integers(0, 1 << 30))
    def unpin(self, pick: int) -> None:
        k = sorted(self.pins)[pick % len(self.pins)]
        e = self.entries[k]
        assert e.read() == e.content  # still open: it was pinned all along
        self.cache.unpin(e)
        self.pins[k] -= 1
        if not self.pins[k]:
            del self.pins[k]
        if len(self.order) > self.max_open:
            self._model_evict(self.max_open, None)

    @rule(n=st.integers(1, 5))
    def resize(self, n: int) -> None:
        self.cache.resize(n)
        self.max_open = n
        self._model_evict(n, None)

    # ---- invariants -----------------------------------------------------------------
    @invariant()
    def matches_the_model(self) -> None:
        with self.cache.lock:
            self.cache._check()
            is_open = {k for k, e in enumerate(self.entries) if e.fd is not None}
            assert is_open == {k for k, e in enumerate(self.entries) if self.cache.is_open(e)}
            pinned = {id(e) for e in self.entries if self.cache.pin_count(e)}
            # never more than max_open, unless pins force it (then one unpinned: the last one opened)
            assert len(self.cache) <= max(self.max_open, len(pinned) + 1), (len(self.cache), self.max_open)
            for k in self.pins:
                assert self.entries[k].fd is not None, f"pinned entry {k} was released"
            if not self.READERS:
                assert is_open == set(self.order), (sorted(is_open), self.order)
        assert not self.failures, self.failures[:5]

    # ---- readers (CacheUnderReaders) ---------------------------------------------------
    def _reader(self, i: int) -> None:
        rnd = random.Random(i)
        while not self.stop.is_set():
            entries = self.entries
            if not entries:
                time.sleep(0.001)
                continue
            e = entries[rnd.randrange(len(entries))]
            try:
                self.cache.pin(e)
            except OSError as exc:
                self.failures.append(f"pin: {exc!r}")
                continue
            try:
                for _ in range(3):
                    time.sleep(0)  # let the main thread open and evict others meanwhile
                    got = e.read()  # without the cache's lock
                    if got != e.content:
                        self.failures.append(f"{e.path}: read {got[:20]!r}, not its own bytes")
            except BaseException as exc:
                self.failures.append(f"{e.path}: {exc!r}")
            finally:
                self.cache.unpin(e)

    def teardown(self) -> None:
        self.stop.set()
        for t in self.readers:
            t.join()
        for e in self.entries:
            if e.fd is not None:
                os.close(e.fd)
        shutil.rmtree(self.dir, ignore_errors=True)
        assert not self.failures, self.failures[:5]


class CacheUnderReaders(CacheLRU):
    READERS = 3


TestCacheLRU = CacheLRU.TestCase
TestCacheLRU.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestCacheUnderReaders = CacheUnderReaders.TestCase
TestCacheUnderReaders.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)


class NoSyncIO(FileIO):
    """Real files, no real fsyncs (durability is not what this checks; rolls stay fast)."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def _dir_fds(path: str) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(path + os.sep):
                n += 1
        except OSError:
            pass
    return n


class LogUnderReaders(RuleBasedStateMachine):
    """A Log with tiny segments and few open: reads by reader threads while appends roll."""

    MAX_OPEN = 3

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="segcache-log-")
        self.path = os.path.join(self.root, "t-0")
        self.log = pylog.Log.open(self.path, segment_bytes=600, index_interval_bytes=64, retention_ms=-1,
                                  file_io=NoSyncIO(), max_open_segments=self.MAX_OPEN,
                                  recovery_checkpoint_interval_ms=1 << 40)
        self.values: List[bytes] = []  # the model: values[offset]

    def _value(self, offset: int, size: int) -> bytes:
        return b"o%d:" % offset + bytes([offset % 251]) * size

    def _append(self, n: int, size: int) -> None:
        batch = [self._value(len(self.values) + i, size) for i in range(n)]
        res = self.log.append(batch)
        assert res.base_offset == len(self.values)
        self.values += batch

    @rule(n=st.integers(1, 4), size=st.integers(0, 60))
    def append(self, n: int, size: int) -> None:
        self._append(n, size)

    @precondition(lambda self: self.values)
    @rule(pick=st.floats(0, 1))
    def get(self, pick: float) -> None:
        o = min(int(pick * len(self.values)), len(self.values) - 1)
        assert self.log.get(o).value == self.values[o]

    @precondition(lambda self: self.values)
    @rule(pick=st.floats(0, 1), max_bytes=st.integers(1, 2000))
    def read(self, pick: float, max_bytes: int) -> None:
        o = min(int(pick * len(self.values)), len(self.values) - 1)
        got = list(self.log.read(o, max_bytes))
        assert got, o
        for r in got:
            assert r.value == self.values[r.offset], r.offset
        assert got[0].offset == o

    @rule(n=st.integers(2, 6))
    def reconfigure(self, n: int) -> None:
        self.log.reconfigure(self.log.config._replace(max_open_segments=n))

    @precondition(lambda self: len(self.values) > 5)
    @rule(appends=st.integers(1, 25), seed=st.integers(0, 1 << 16))
    def concurrent(self, appends: int, seed: int) -> None:
        """Reader threads read acknowledged offsets while this thread appends (and rolls)."""
        known = len(self.values)
        snapshot = self.values[:known]  # values are never rewritten: the readers' model
        failures: List[str] = []
        stop = threading.Event()

        def reader(i: int) -> None:
            rnd = random.Random(seed * 10 + i)
            while not stop.is_set():
                o = rnd.randrange(known)
                try:
                    if rnd.random() < 0.5:
                        got = [self.log.get(o)]
                    else:
                        got = list(self.log.read(o, rnd.choice([1, 300, 5000])))
                    for r in got:
                        if r.offset < known and r.value != snapshot[r.offset]:
                            failures.append(f"offset {r.offset}: {r.value[:20]!r}")
                except BaseException as exc:
                    failures.append(f"offset {o}: {exc!r}")
                time.sleep(0)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        try:
            for j in range(appends):
                self._append(1 + j % 3, 60)
                time.sleep(0)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not failures, failures[:5]

    @invariant()
    def bounded(self) -> None:
        cache = self.log._segment_cache
        with self.log._lock:
            cache._check()
            limit = self.log.config.max_open_segments
            assert len(cache) <= limit, (len(cache), limit)
            assert self.log.active_segment._fd is not None  # the active segment is always open
            assert _dir_fds(self.path) <= 3 * limit, (_dir_fds(self.path), limit)
            self.log._check()

    def teardown(self) -> None:
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


TestLogUnderReaders = LogUnderReaders.TestCase
TestLogUnderReaders.settings = settings(max_examples=15, stateful_step_count=25, deadline=None)
