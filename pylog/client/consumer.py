"""A minimal consumer: reads every partition of its topics, only below the high watermark.

Positions start at the group's committed offset (kept in the cluster's
memory for now) or at the log start (``auto_offset_reset="earliest"``).
``poll`` fetches from each partition leader and returns records in offset
order per partition; ``commit`` stores the positions for ``group_id``.

Every record returned has an offset below the HW the leader reported with it
(checked by :meth:`Consumer._check`).

Thread-safety: one consumer per thread; calls are marshalled to the
cluster's scheduler thread.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from pylog.client._node import ClientNode
from pylog.errors import OffsetOutOfRangeError
from pylog.replication.messages import NO_LEADER, FetchRequest
from pylog.storage.record import iter_batches

TP = Tuple[str, int]


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: int
    headers: Sequence[Tuple[str, Optional[bytes]]]


class Consumer:
    """Fetches records below the HW from partition leaders."""

    def __init__(self, cluster: Any, *, group_id: Optional[str] = None, topics: Sequence[str] = (),
                 fetch_max_wait_ms: int = 500, request_timeout_ms: int = 30_000, max_poll_records: int = 500):
        self.cluster = cluster
        self.group_id = group_id
        self.scheduler = cluster.scheduler
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_poll_records = max_poll_records
        self.positions: Dict[TP, int] = {}
        self._buffer: List[ConsumerRecord] = []
        self._inflight: Dict[TP, bool] = {}
        self.violations: List[Tuple[TP, int, int]] = []
        self._node = cluster.scheduler.run_sync(lambda: ClientNode("consumer", cluster.scheduler, cluster.transport))
        self.topics: List[str] = []
        self.subscribe(topics)

    def subscribe(self, topics: Sequence[str]) -> None:
        def run() -> None:
            self.topics = list(topics)
            committed = self.cluster.committed.get(self.group_id, {}) if self.group_id else {}
            for t in self.topics:
                cfg = self.cluster.store.topics.get(t)
                if cfg is None:
                    continue
                for p in range(cfg.partitions):
                    self.positions.setdefault((t, p), committed.get((t, p), 0))

        self.scheduler.run_sync(run)

    def assignment(self) -> List[TP]:
        return sorted(self.positions)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        def run() -> None:
            self.positions[(topic, partition)] = offset
            self._buffer = [r for r in self._buffer if (r.topic, r.partition) != (topic, partition)]

        self.scheduler.run_sync(run)

    def position(self, topic: str, partition: int) -> int:
        return self.scheduler.run_sync(lambda: self.positions[(topic, partition)])

    def _fetch_all(self) -> None:
        if not self.topics:
            return
        if len(self.positions) < sum(self.cluster.store.topics[t].partitions for t in self.topics if t in self.cluster.store.topics):
            self.subscribe(self.topics)
        for tp, pos in self.positions.items():
            if self._inflight.get(tp):
                continue
            st = self.cluster.store.partitions.get(tp)
            if st is None or st.leader == NO_LEADER:
                continue
            req = FetchRequest(-1, tp[0], tp[1], pos, -1, self._node.next_corr(), max_wait_ms=self.fetch_max_wait_ms)
            self._inflight[tp] = True
            self._node.request(st.leader, req, self.request_timeout_ms, lambda resp, tp=tp, pos=pos: self._on_fetch(tp, pos, resp))

    def _on_fetch(self, tp: TP, pos: int, resp: Any) -> None:
        self._inflight[tp] = False
        if resp is None or self.positions.get(tp) != pos:
            return
        if resp.error is OffsetOutOfRangeError:
            self.positions[tp] = resp.log_start_offset if pos < resp.log_start_offset else min(pos, resp.log_end_offset)
            return
        if resp.error is not None or not resp.records:
            return
        nxt = pos
        for batch in iter_batches(resp.records):
            if batch.is_control:
                nxt = max(nxt, batch.last_offset + 1)
                continue
            for r in batch.records():
                if r.offset < pos:
                    continue
                if r.offset >= resp.high_watermark:
                    self.violations.append((tp, r.offset, resp.high_watermark))
                    continue
                self._buffer.append(ConsumerRecord(tp[0], tp[1], r.offset, r.key, r.value, r.timestamp, r.headers))
                nxt = r.offset + 1
        self.positions[tp] = nxt

    def poll(self, timeout: float = 1.0, max_records: Optional[int] = None) -> List[ConsumerRecord]:
        """Records fetched within ``timeout`` seconds (virtual seconds in a simulated cluster)."""
        limit = max_records or self.max_poll_records
        self.scheduler.run_sync(self._fetch_all)
        if not self.scheduler.run_sync(lambda: bool(self._buffer)):
            self.scheduler.wait_until(lambda: bool(self._buffer), int(timeout * 1000))

        def take() -> List[ConsumerRecord]:
            out, self._buffer = self._buffer[:limit], self._buffer[limit:]
            return out

        return self.scheduler.run_sync(take)

    def commit(self) -> None:
        """Store the current positions as the group's committed offsets (in memory for now)."""
        if self.group_id is None:
            return

        def run() -> None:
            consumed = dict(self.positions)
            for r in self._buffer:  # buffered but not yet returned: not consumed
                tp = (r.topic, r.partition)
                consumed[tp] = min(consumed[tp], r.offset)
            self.cluster.committed.setdefault(self.group_id, {}).update(consumed)

        self.scheduler.run_sync(run)

    def committed(self, topic: str, partition: int) -> Optional[int]:
        return self.cluster.committed.get(self.group_id, {}).get((topic, partition))

    def close(self) -> None:
        self.scheduler.run_sync(self._node.close_node)

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self) -> None:
        assert not self.violations, f"consumer saw offsets at or above the HW: {self.violations[:5]}"
