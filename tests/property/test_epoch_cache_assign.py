"""LeaderEpochCache.assign against a transcription of Kafka's LeaderEpochFileCache.assign.

Kafka keeps the cache as a TreeMap epoch -> start offset. ``assign(e, s)``
changes nothing when the cache is non-empty, ``e`` is its latest epoch and
``s`` is not below that epoch's start (``isUpdateNeeded``); otherwise it
removes entries from the end while their epoch is >= ``e`` or their start is
>= ``s`` (``maybeTruncateNonMonotonicEntries``) and puts ``(e, s)``. The model
below is that, over a dict; pylog ignores negative values (Kafka throws).
The Log-level test also checks the ``leader-epoch-checkpoint`` file written
after each assignment and what a reopen reads back.
"""
from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Tuple

from hypothesis import given
from hypothesis import strategies as st

import pylog
from pylog.storage import checkpoint
from pylog.storage.epoch_cache import LeaderEpochCache
from pylog.storage.fileio import FileIO
from pylog.storage.log import LEADER_EPOCH_CHECKPOINT


def model_assign(tree: Dict[int, int], epoch: int, start: int) -> bool:
    """Kafka's assign over a map epoch -> start offset (iteration order = epoch order)."""
    if epoch < 0 or start < 0:
        return False
    if tree:
        latest = max(tree)
        if not (epoch != latest or start < tree[latest]):  # isUpdateNeeded
            return False
    for e in sorted(tree, reverse=True):  # removeFromEnd
        if e >= epoch or tree[e] >= start:
            del tree[e]
        else:
            break
    tree[epoch] = start
    return True


def _entries(tree: Dict[int, int]) -> List[Tuple[int, int]]:
    return sorted(tree.items())


ops = st.lists(st.tuples(st.integers(-1, 12), st.integers(-1, 60)), max_size=25)


@given(ops)
def test_assign_matches_kafka(pairs: List[Tuple[int, int]]) -> None:
    cache, tree = LeaderEpochCache(), {}
    for epoch, start in pairs:
        assert cache.assign(epoch, start) == model_assign(tree, epoch, start), (epoch, start)
        assert cache.entries == _entries(tree)
        epochs = [e for e, _ in cache.entries]
        starts = [s for _, s in cache.entries]
        assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 60)), max_size=12), ops)
def test_constructor_replays_assign(initial: List[Tuple[int, int]], more: List[Tuple[int, int]]) -> None:
    """Kafka's constructor assigns the checkpoint's entries one by one, so a cache rebuilt
    from its own entries is the same cache."""
    tree: Dict[int, int] = {}
    for e, s in initial + more:
        model_assign(tree, e, s)
    cache = LeaderEpochCache(initial)
    for e, s in more:
        cache.assign(e, s)
    assert cache.entries == _entries(tree)
    assert LeaderEpochCache(cache.entries).entries == cache.entries


def test_the_rules_by_example() -> None:
    c = LeaderEpochCache([(1, 0), (3, 10)])
    assert not c.assign(3, 15)  # same epoch, later offset: a later batch of the epoch
    assert not c.assign(3, 10)
    assert c.assign(3, 5)  # same epoch, lower offset: the entry moves down
    assert c.entries == [(1, 0), (3, 5)]
    assert c.assign(2, 20)  # lower epoch: epoch 3 conflicts (3 >= 2) and goes
    assert c.entries == [(1, 0), (2, 20)]
    assert c.assign(4, 0)  # lower start: every entry starting at or after 0 goes
    assert c.entries == [(4, 0)]
    assert c.assign(0, 0)
    assert c.entries == [(0, 0)]


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 50)), min_size=1, max_size=15))
def test_log_assign_epoch_writes_the_checkpoint_kafka_would(pairs: List[Tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t-0")
        log = pylog.Log.open(path)
        log.append([b"x"] * 50)  # offsets 0..49: every start offset below is within the log
        tree: Dict[int, int] = {}
        ckpt = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
        for epoch, start in pairs:
            assert log.assign_epoch(epoch, start) == model_assign(tree, epoch, start)
            assert log.epochs.entries == _entries(tree)
            if os.path.exists(ckpt):
                assert checkpoint.read_epochs(FileIO(), ckpt) == _entries(tree)
            log._check()
        log.close()
        assert checkpoint.read_epochs(FileIO(), ckpt) == _entries(tree)
        with pylog.Log.open(path) as again:
            # Kafka's LogLoader truncates the cache at the log end: an epoch with no record yet goes.
            assert again.epochs.entries == [(e, s) for e, s in _entries(tree) if s < 50]
