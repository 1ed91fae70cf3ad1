"""The leader-epoch cache of one partition: epoch -> start offset (KIP-101).

Each batch carries the epoch of the leader that appended it. The cache keeps,
for every epoch seen, the first offset written in it; it answers Kafka's
OffsetsForLeaderEpoch question - "where does epoch E end on this replica?" -
with the largest epoch <= E it knows and the start offset of the next epoch
(or the log end offset for the latest epoch), which is what lets a follower
truncate to the point where its log and the leader's diverge (KIP-279).

It is persisted as the partition's ``leader-epoch-checkpoint`` by its owner
(:class:`pylog.storage.log.Log`).

Complexity: entries are few (one per leadership change); operations are
O(entries). Thread-safety: none; the owning Log's lock guards it.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """Sorted ``(epoch, start_offset)`` pairs, both strictly increasing."""

    def __init__(self, entries: Optional[List[Tuple[int, int]]] = None):
        self._entries: List[Tuple[int, int]] = []
        for epoch, start in entries or []:
            self.assign(epoch, start)

    @property
    def entries(self) -> List[Tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns True if the cache changed.

        Kafka's LeaderEpochFileCache.assign:

        * nothing changes when ``epoch`` is the latest epoch and
          ``start_offset`` is not below its start (a later batch of the same
          epoch), and nothing when the cache already ends with this entry;
        * otherwise every entry at the end whose epoch is >= ``epoch`` or
          whose start offset is >= ``start_offset`` is removed (walking back
          from the latest, stopping at the first that conflicts in neither
          column), and ``(epoch, start_offset)`` becomes the latest entry.
          So a lower epoch, or the same epoch at a lower offset, replaces the
          conflicting entries instead of being ignored; both columns stay
          strictly increasing.

        Deviation: Kafka rejects a negative epoch or offset; here they are
        ignored (False), as batches written without a leader epoch carry -1.
        """
        if epoch < 0 or start_offset < 0:
            return False
        entries = self._entries
        if entries:
            last_epoch, last_start = entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        while entries and (entries[-1][0] >= epoch or entries[-1][1] >= start_offset):
            entries.pop()
        entries.append((epoch, start_offset))
        return True

    def start_offset_of(self, epoch: int) -> int:
        for e, start in self._entries:
            if e == epoch:
                return start
        return UNDEFINED_OFFSET

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> Tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(largest epoch <= requested, where it ends)``.

        Follows Kafka's LeaderEpochFileCache.endOffsetFor: the latest epoch ends
        at the log end offset; an older epoch ends where the next larger one
        starts; a requested epoch below every entry yields ``(requested, start
        of the first entry)``; an undefined or unknown-newer epoch yields
        ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self._entries[-1][0]:
            return requested_epoch, log_end_offset
        floor = None
        for e, start in self._entries:
            if e > requested_epoch:
                return (requested_epoch if floor is None else floor), start
            floor = e
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there).

        A negative ``end_offset`` (UNDEFINED_OFFSET) changes nothing, as in Kafka.
        """
        if end_offset < 0:
            return False
        before = len(self._entries)
        self._entries = [(e, s) for e, s in self._entries if s < end_offset]
        return len(self._entries) != before

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved to ``start_offset``: keep the epoch covering it, starting there."""
        keep = [(e, s) for e, s in self._entries if s >= start_offset]
        older = [(e, s) for e, s in self._entries if s < start_offset]
        if older and (not keep or keep[0][1] > start_offset):
            keep.insert(0, (older[-1][0], start_offset))
        changed = keep != self._entries
        self._entries = keep
        return changed

    def clear(self) -> None:
        self._entries = []
