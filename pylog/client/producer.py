"""A minimal producer: ``acks`` 0/1/all, per-partition batching, retries until ``delivery_timeout_ms``.

Records queue per partition; one request per partition is in flight at a
time (so order is kept), and whatever queued meanwhile goes out as the next
batch (up to ``max_batch_records`` / ``max_batch_bytes``), appended by the
leader as one RecordBatch: record ``i`` of a batch gets ``base_offset + i``.

>>> # meta = cluster.producer(acks="all").send("orders", b"v", key=b"k").result()

Partitioning: a record with a key goes to ``crc32(key) % partitions`` (not
Kafka's murmur2), one without a key round-robin. Retriable errors
(NotLeader, NotEnoughReplicas, timeouts, ...) are retried with
``retry_backoff_ms`` after refreshing the leader from the cluster metadata;
a retry after a lost response may write the record twice (no idempotence yet).
With ``acks=0`` the future resolves at once with ``offset=-1``.

Thread-safety: ``send`` may be called from any thread.
"""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from pylog.client._node import ClientFuture, ClientNode, error_from
from pylog.errors import InvalidConfigurationError, LeaderNotAvailableError, PylogError, RequestTimedOutError, UnknownTopicOrPartitionError
from pylog.replication.messages import NO_LEADER, ProduceRequest
from pylog.storage.record import Record


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


_ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}


class Producer:
    """Sends records to partition leaders of a :class:`pylog.Cluster`."""

    def __init__(self, cluster: Any, *, acks: Any = "all", request_timeout_ms: int = 30_000,
                 delivery_timeout_ms: int = 120_000, retry_backoff_ms: int = 100, max_batch_records: int = 1000,
                 max_batch_bytes: int = 512 * 1024):
        if acks not in _ACKS:
            raise InvalidConfigurationError(f"acks must be 0, 1 or 'all', got {acks!r}")
        self.cluster = cluster
        self.acks = _ACKS[acks]
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.scheduler = cluster.scheduler
        self._node = cluster.scheduler.run_sync(lambda: ClientNode("producer", cluster.scheduler, cluster.transport))
        self._rr = 0
        self.max_batch_records = max_batch_records
        self.max_batch_bytes = max_batch_bytes
        self._queues: Dict[Tuple[str, int], List[Tuple[Record, ClientFuture, int]]] = {}
        self._inflight: Set[Tuple[str, int]] = set()
        self._outstanding: Dict[int, ClientFuture] = {}
        self._node.on_close.append(self._fail_outstanding)

    def _fail_outstanding(self) -> None:
        for fut in list(self._outstanding.values()):
            fut.set_exception(RequestTimedOutError("the producer or its cluster was closed before delivery"))

    def _partition_for(self, topic: str, key: Optional[bytes], partition: Optional[int]) -> int:
        cfg = self.cluster.store.topics.get(topic)
        if cfg is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        if partition is not None:
            if not 0 <= partition < cfg.partitions:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
            return partition
        if key is not None:
            return zlib.crc32(key) % cfg.partitions
        self._rr += 1
        return self._rr % cfg.partitions

    def send(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None, *, partition: Optional[int] = None,
             headers: Sequence[Tuple[str, Optional[bytes]]] = (), timestamp: Optional[int] = None) -> ClientFuture:
        """Send one record; returns a future whose ``result()`` is a :class:`RecordMetadata`.

        Does not wait: the record joins its partition's queue and goes out with
        the next request to the leader (errors, including an unknown topic,
        are raised by ``result()``).
        """
        fut = ClientFuture(self.scheduler)
        rec = Record(value=value, key=key, headers=tuple(headers), timestamp=timestamp)

        def start() -> None:
            try:
                p = self._partition_for(topic, key, partition)
            except PylogError as exc:
                fut.set_exception(exc)
                return
            if self._node.closed:
                fut.set_exception(RequestTimedOutError("the producer is closed"))
                return
            self._outstanding[id(fut)] = fut
            fut.add_done_callback(lambda f: self._outstanding.pop(id(f), None))
            deadline = self.scheduler.clock.now_ms() + self.delivery_timeout_ms
            self._queues.setdefault((topic, p), []).append((rec, fut, deadline))
            self._drain((topic, p))

        if self.scheduler.simulated:
            start()
        else:
            self.scheduler.call_soon(start)
        return fut

    def _drain(self, tp: Tuple[str, int]) -> None:
        """Send the next batch of ``tp`` unless one is in flight (one request per partition keeps order)."""
        queue = self._queues.get(tp)
        if tp in self._inflight or not queue:
            return
        size, n = 0, 0
        for rec, _, _ in queue:
            size += len(rec.value or b"") + len(rec.key or b"") + 64
            n += 1
            if n >= self.max_batch_records or size >= self.max_batch_bytes:
                break
        batch, self._queues[tp] = queue[:n], queue[n:]
        self._inflight.add(tp)
        self._attempt(tp, batch, None)

    def _done(self, tp: Tuple[str, int]) -> None:
        self._inflight.discard(tp)
        self._drain(tp)

    def _attempt(self, tp: Tuple[str, int], batch: List[Tuple[Record, ClientFuture, int]],
                 last_error: Optional[PylogError]) -> None:
        topic, p = tp
        if self._node.closed:
            for _, fut, _ in batch:
                fut.set_exception(last_error or RequestTimedOutError("producer closed"))
            self._inflight.discard(tp)
            return
        now = self.scheduler.clock.now_ms()
        live = []
        for item in batch:
            if now >= item[2]:
                item[1].set_exception(last_error or RequestTimedOutError(f"{topic}-{p}: delivery timed out"))
            else:
                live.append(item)
        if not live:
            self._done(tp)
            return
        st = self.cluster.store.partitions.get(tp)
        if st is None or st.leader == NO_LEADER:
            err = LeaderNotAvailableError(f"{topic}-{p} has no leader")
            self.scheduler.call_later(self.retry_backoff_ms, self._attempt, tp, live, err)
            return
        req = ProduceRequest(topic, p, tuple(r for r, _, _ in live), self.acks, self.request_timeout_ms,
                             self._node.next_corr())
        if self.acks == 0:
            self._node.transport.send(self._node.node_id, st.leader, req)
            for _, fut, _ in live:
                fut.set_result(RecordMetadata(topic, p, -1, -1))
            self._done(tp)
            return

        def on_reply(resp: Any) -> None:
            if resp is None:
                err: PylogError = RequestTimedOutError(f"{topic}-{p}: no response from broker {st.leader}")
            elif resp.error is None:
                for i, (rec, fut, _) in enumerate(live):
                    ts = rec.timestamp if rec.timestamp is not None else resp.timestamp
                    fut.set_result(RecordMetadata(topic, p, resp.base_offset + i, ts))
                self._done(tp)
                return
            else:
                err = error_from(resp)
                if not err.retriable:
                    for _, fut, _ in live:
                        fut.set_exception(err)
                    self._done(tp)
                    return
            if self._node.closed:
                for _, fut, _ in live:
                    fut.set_exception(err)
                self._inflight.discard(tp)
                return
            self.scheduler.call_later(self.retry_backoff_ms, self._attempt, tp, live, err)

        self._node.request(st.leader, req, self.request_timeout_ms + 100, on_reply)

    def flush(self) -> None:
        """Nothing is buffered in this minimal producer; present for API compatibility."""

    def close(self) -> None:
        self.scheduler.run_sync(self._node.close_node)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
