"""LeaderEpochCache against Kafka's LeaderEpochFileCache rules (research notes §3.8-§3.10)."""
from __future__ import annotations

from typing import List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache


def test_assign_keeps_the_first_offset_of_each_epoch() -> None:
    c = LeaderEpochCache()
    assert c.latest_epoch == UNDEFINED_EPOCH
    assert c.assign(0, 0)
    assert not c.assign(0, 5)  # same epoch, later batch: nothing to record
    assert c.assign(2, 10)
    assert not c.assign(-1, 20)  # batches without an epoch (magic < 2, or unset)
    assert c.entries == [(0, 0), (2, 10)]
    assert c.latest_epoch == 2
    assert c.start_offset_of(2) == 10 and c.start_offset_of(1) == UNDEFINED_OFFSET


def test_assign_drops_entries_a_new_epoch_overlaps() -> None:
    """A newer epoch starting at or before existing entries replaces them (both columns stay increasing)."""
    c = LeaderEpochCache([(1, 0), (2, 5), (3, 9)])
    assert c.assign(4, 5)
    assert c.entries == [(1, 0), (4, 5)]


def test_end_offset_for_follows_kafka() -> None:
    c = LeaderEpochCache([(1, 0), (3, 10), (6, 20)])
    leo = 30
    assert c.end_offset_for(UNDEFINED_EPOCH, leo) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert c.end_offset_for(6, leo) == (6, 30)  # latest epoch ends at the log end
    assert c.end_offset_for(3, leo) == (3, 20)  # ends where the next one starts
    assert c.end_offset_for(4, leo) == (3, 20)  # unknown: the largest epoch below it
    assert c.end_offset_for(5, leo) == (3, 20)
    assert c.end_offset_for(1, leo) == (1, 10)
    assert c.end_offset_for(0, leo) == (0, 0)  # below every entry: (requested, first start)
    assert c.end_offset_for(7, leo) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)  # newer than any
    assert LeaderEpochCache().end_offset_for(0, 5) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_truncate_from_end() -> None:
    c = LeaderEpochCache([(1, 0), (3, 10), (6, 20)])
    assert not c.truncate_from_end(25)
    assert c.truncate_from_end(20)  # an epoch starting at the new end has no record left
    assert c.entries == [(1, 0), (3, 10)]
    assert c.truncate_from_end(5)
    assert c.entries == [(1, 0)]


def test_truncate_from_end_ignores_undefined_offset() -> None:
    """Kafka: truncateFromEnd(endOffset) does nothing when endOffset < 0."""
    c = LeaderEpochCache([(1, 0), (3, 10)])
    assert not c.truncate_from_end(UNDEFINED_OFFSET)
    assert c.entries == [(1, 0), (3, 10)]


def test_truncate_from_start() -> None:
    c = LeaderEpochCache([(1, 0), (3, 10), (6, 20)])
    assert not c.truncate_from_start(0)
    assert c.truncate_from_start(12)  # epoch 3 now starts at the log start
    assert c.entries == [(3, 12), (6, 20)]
    assert not c.truncate_from_start(12)
    assert c.truncate_from_start(20)
    assert c.entries == [(6, 20)]
    assert c.truncate_from_start(25)
    assert c.entries == [(6, 25)]


def _truncation_point(follower: LeaderEpochCache, f_leo: int, leader: LeaderEpochCache, l_leo: int) -> int:
    """Kafka's follower loop (AbstractFetcherThread.getOffsetTruncationState, KIP-279)."""
    epoch = follower.latest_epoch
    for _ in range(20):
        l_epoch, l_end = leader.end_offset_for(epoch, l_leo)
        f_epoch, f_end = follower.end_offset_for(l_epoch, f_leo)
        if f_epoch != l_epoch:
            f_leo = min(f_end, f_leo)  # truncate to the end of our largest epoch below, ask again
            follower.truncate_from_end(f_leo)
            epoch = follower.latest_epoch
            continue
        f_leo = min(f_end, l_end, f_leo)
        follower.truncate_from_end(f_leo)
        return f_leo
    raise AssertionError("no agreement")


def test_kip_279_fast_leader_failover_example() -> None:
    """§3.10: broker 100 [0:e0, 1-3:e2, 4-5:e4]; broker 101 [0:e0, 1:e1, 2:e3].

    Kafka 2.0 answers (e2, 4) to "end of e3?"; 101 has no e2, truncates to the
    end of e1 (2), asks for e1, gets (e0, 1), and truncates to 1: the logs agree.
    """
    leader = LeaderEpochCache([(0, 0), (2, 1), (4, 4)])
    follower = LeaderEpochCache([(0, 0), (1, 1), (3, 2)])
    assert leader.end_offset_for(3, 6) == (2, 4)
    assert follower.end_offset_for(2, 3) == (1, 2)
    assert leader.end_offset_for(1, 6) == (0, 1)
    assert _truncation_point(follower, 3, leader, 6) == 1
    assert follower.entries == [(0, 0)]


def test_kip_101_scenario_2_divergence() -> None:
    """§3.9 scenario 2: B leads epoch 1 from offset 1; A asks for the end of epoch 0 and drops m2."""
    b = LeaderEpochCache([(0, 0), (1, 1)])
    a = LeaderEpochCache([(0, 0)])
    assert _truncation_point(a, 2, b, 2) == 1


def _model_end_offset_for(entries: List[Tuple[int, int]], req: int, leo: int) -> Tuple[int, int]:
    """A direct transcription of Kafka's endOffsetFor over a TreeMap."""
    if req == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if entries[-1][0] == req:
        return req, leo
    higher = [e for e in entries if e[0] > req]
    floor = [e for e in entries if e[0] <= req]
    if not higher:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if not floor:
        return req, higher[0][1]
    return floor[-1][0], higher[0][1]


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 100)), max_size=12), st.integers(-1, 22))
def test_end_offset_for_matches_kafka_transcription(pairs: List[Tuple[int, int]], req: int) -> None:
    c = LeaderEpochCache()
    for e, s in sorted(pairs, key=lambda p: p[1]):
        c.assign(e, s)
    entries = c.entries
    assert [e for e, _ in entries] == sorted({e for e, _ in entries})
    assert [s for _, s in entries] == sorted({s for _, s in entries})
    leo = (entries[-1][1] if entries else 0) + 3
    assert c.end_offset_for(req, leo) == _model_end_offset_for(entries, req, leo)


@pytest.mark.parametrize("start", [0, 5, 10, 11, 30])
def test_truncate_from_start_matches_kafka(start: int) -> None:
    """Kafka: remove entries with startOffset <= start; re-add the last removed epoch at start."""
    entries = [(1, 0), (3, 10), (6, 20)]
    removed = [e for e in entries if e[1] <= start]
    want = [e for e in entries if e[1] > start]
    if removed:
        want.insert(0, (removed[-1][0], start))
    c = LeaderEpochCache(entries)
    c.truncate_from_start(start)
    assert c.entries == want
