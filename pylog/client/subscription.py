"""The consumer's subscription state (Kafka's ``SubscriptionState``): what it reads and from where.

Owns: the subscription (a topic list, a pattern, or a manual assignment), the
assigned partitions, per partition the next offset to return (``_positions``)
and to fetch (``_fetch_pos``), the seek token that makes older fetch answers
stale, the last high watermark seen, the partitions still resolving a
position, paused, or without an offset under ``auto_offset_reset="none"``;
the log of ownership changes and the queue of rebalance-listener calls.

It is one of the three parts :class:`~pylog.client.consumer.Consumer` is
built from (with :class:`~pylog.client.fetcher.Fetcher` and
:class:`~pylog.client.consumer_coordinator.ConsumerCoordinator`): the
consumer inherits it, and its methods work on the consumer's own attributes.
What it uses from the other parts is declared under ``TYPE_CHECKING`` in the
class body, what the facade provides in :class:`~pylog.client.consumer_base.ConsumerBase`,
so the seam is written down and checked by mypy.

Complexity: O(partitions changed) per assignment change; O(1) per position.
Durability: none; positions survive a crash only as committed offsets.
Thread-safety: loop thread only, except ``_positions``, which a real-time
``poll`` updates on the caller's thread under the fetcher's ``_lock``.
"""
from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Pattern, Sequence, Set, Tuple

from pylog.client.consumer_base import ConsumerBase
from pylog.client.types import OffsetAndMetadata
from pylog.errors import UnknownTopicOrPartitionError

logger = logging.getLogger(__name__)

TP = Tuple[str, int]
#: orders ownership changes of every consumer of the process (tests check no partition has two owners at once)
_OWNERSHIP_SEQ = itertools.count()


class SubscriptionState(ConsumerBase):
    """What the consumer reads: subscription, assignment, positions (a part of :class:`Consumer`)."""

    if TYPE_CHECKING:  # provided by the other parts (the facade's own: ConsumerBase)
        _lock: threading.RLock
        _corrupt: Dict[TP, Any]

        def _drop_buffered(self, tp: TP) -> None: ...
        def _drop_all_buffered(self) -> None: ...
        def _reset_offset(self, tp: TP, policy: str) -> None: ...
        def _send_fetches(self) -> None: ...
        def _fetch_committed(self, tps: Sequence[TP], callback: Callable[
            [Optional[Dict[TP, Optional[OffsetAndMetadata]]], Optional[BaseException]], None]) -> None: ...

    def _init_subscription(self, listener: Any) -> None:
        self._topics: Optional[List[str]] = None
        self._pattern: Optional[Pattern[str]] = None
        self._manual = False
        self._assignment: List[TP] = []
        self._positions: Dict[TP, int] = {}  # next offset to return
        self._fetch_pos: Dict[TP, int] = {}  # next offset to fetch
        self._token: Dict[TP, int] = {}  # bumped on seek/revoke: older fetch responses are ignored
        self._hw: Dict[TP, int] = {}
        self._resetting: Set[TP] = set()
        self._no_offset: Set[TP] = set()  # auto_offset_reset="none" found no committed offset (until a seek)
        #: partitions paused by pause(): not fetched, nothing returned for them until resume()
        self._paused: Set[TP] = set()
        self._listener = listener
        self._listener_calls: Deque[Tuple[str, List[TP]]] = deque()
        #: (sequence, time ms, (topic, partition), owned after) for the last 10,000 changes of ownership
        #: (tests check that no partition has two owners at once); sequence numbers order all consumers
        self.ownership_log: Deque[Tuple[int, int, TP, bool]] = deque(maxlen=10_000)

    def _matched_topics(self) -> List[str]:
        if self._pattern is not None:
            return sorted(t for t in self.store.topics if self._pattern.fullmatch(t) and not t.startswith("__"))
        return sorted(self._topics or [])

    def _partition_counts(self, topics: Sequence[str]) -> Dict[str, int]:
        return {t: self.store.topics[t].partitions for t in topics if t in self.store.topics}

    def _note_ownership(self, before: Sequence[TP], after: Sequence[TP]) -> None:
        now, b, a = self._now(), set(before), set(after)
        self._paused -= b - a  # a partition given up is no longer paused (Kafka drops its state)
        for tp in sorted(b - a):
            self.ownership_log.append((next(_OWNERSHIP_SEQ), now, tp, False))
        for tp in sorted(a - b):
            self.ownership_log.append((next(_OWNERSHIP_SEQ), now, tp, True))

    def _tell_listener(self, what: str, parts: Sequence[TP]) -> None:
        """Queue ``on_partitions_<what>(parts)`` for the caller's thread (run in poll/commit/close)."""
        if self._listener is not None and (parts or what == "assigned"):
            self._listener_calls.append((what, sorted(parts)))

    def _revoke(self, parts: Sequence[TP]) -> None:
        """Stop reading ``parts`` (cooperative: only what moves to another member); keep the rest."""
        gone = set(parts)
        if not gone:
            return
        for tp in gone:
            self._token[tp] = self._token.get(tp, 0) + 1
            self._fetch_pos.pop(tp, None)
            self._resetting.discard(tp)
        keep = [tp for tp in self._assignment if tp not in gone]
        self._note_ownership(self._assignment, keep)
        self._assignment = keep
        with self._lock:
            for tp in gone:
                self._positions.pop(tp, None)
                self._drop_buffered(tp)

    def _revoke_all(self, why: Optional[str] = None) -> None:
        """Give up every partition; ``why`` ("revoked" or "lost") tells the rebalance listener."""
        if why is not None:
            self._tell_listener(why, self._assignment)
        for tp in self._assignment:
            self._token[tp] = self._token.get(tp, 0) + 1
        self._note_ownership(self._assignment, ())
        self._assignment = []
        self._positions.clear()
        self._fetch_pos.clear()
        self._resetting.clear()
        self._drop_all_buffered()

    def _set_assignment(self, parts: Sequence[TP]) -> None:
        """Take ``parts``; positions come from committed offsets (with a group) or the reset policy."""
        new = list(dict.fromkeys(parts))
        self._note_ownership(self._assignment, new)
        self._assignment = new
        for tp in [tp for tp in self._corrupt if tp not in new]:
            del self._corrupt[tp]
        todo = [tp for tp in self._assignment if tp not in self._positions]
        if not todo:
            return
        self._resetting.update(todo)
        if self.group_id is None:
            for tp in todo:
                self._reset_offset(tp, self.auto_offset_reset)
            return
        self._fetch_committed(todo, self._on_committed_for_positions)

    def _on_committed_for_positions(self, result: Optional[Dict[TP, Optional[OffsetAndMetadata]]],
                                    error: Optional[BaseException]) -> None:
        if error is not None or result is None:
            # retry later (the tick resolves partitions still resetting)
            self._next_attempt = self._now() + self.retry_backoff_ms
            return
        for tp, om in result.items():
            if tp not in self._resetting or tp not in self._assignment:
                continue
            if om is not None and om.offset >= 0:
                self._set_position(tp, om.offset)
            else:
                self._reset_offset(tp, self.auto_offset_reset)
        self._send_fetches()

    def _set_position(self, tp: TP, offset: int) -> None:
        self._resetting.discard(tp)
        self._no_offset.discard(tp)
        self._corrupt.pop(tp, None)
        self._token[tp] = self._token.get(tp, 0) + 1
        with self._lock:
            self._positions[tp] = offset
            self._drop_buffered(tp)
        self._fetch_pos[tp] = offset
        self._changed.set()

    def _need_assigned(self, tp: TP) -> None:
        if tp not in self._assignment:
            raise UnknownTopicOrPartitionError(
                f"{tp[0]}-{tp[1]} is not assigned to this consumer (assigned: {sorted(self._assignment)})")


__all__ = ["SubscriptionState", "TP"]
