"""A minimal producer: one record per request, ``acks`` 0/1/all, retries until ``delivery_timeout_ms``.

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
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

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
                 delivery_timeout_ms: int = 120_000, retry_backoff_ms: int = 100):
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
        """Send one record; returns a future whose ``result()`` is a :class:`RecordMetadata`."""
        fut = ClientFuture(self.scheduler)

        def start() -> None:
            p = self._partition_for(topic, key, partition)
            self._outstanding[id(fut)] = fut
            fut.add_done_callback(lambda f: self._outstanding.pop(id(f), None))
            rec = Record(value=value, key=key, headers=tuple(headers), timestamp=timestamp)
            deadline = self.scheduler.clock.now_ms() + self.delivery_timeout_ms
            self._attempt(topic, p, rec, fut, deadline, None)

        self.scheduler.run_sync(start)
        return fut

    def _attempt(self, topic: str, p: int, rec: Record, fut: ClientFuture, deadline: int,
                 last_error: Optional[PylogError]) -> None:
        if self._node.closed:
            fut.set_exception(last_error or RequestTimedOutError("producer closed"))
            return
        now = self.scheduler.clock.now_ms()
        if now >= deadline:
            fut.set_exception(last_error or RequestTimedOutError(f"{topic}-{p}: delivery timed out"))
            return
        st = self.cluster.store.partitions.get((topic, p))
        if st is None or st.leader == NO_LEADER:
            err = LeaderNotAvailableError(f"{topic}-{p} has no leader")
            self.scheduler.call_later(self.retry_backoff_ms, self._attempt, topic, p, rec, fut, deadline, err)
            return
        req = ProduceRequest(topic, p, (rec,), self.acks, self.request_timeout_ms, self._node.next_corr())
        if self.acks == 0:
            self._node.transport.send(self._node.node_id, st.leader, req)
            fut.set_result(RecordMetadata(topic, p, -1, -1))
            return

        def on_reply(resp: Any) -> None:
            if resp is None:
                err: PylogError = RequestTimedOutError(f"{topic}-{p}: no response from broker {st.leader}")
            elif resp.error is None:
                fut.set_result(RecordMetadata(topic, p, resp.base_offset, resp.timestamp))
                return
            else:
                err = error_from(resp)
                if not err.retriable:
                    fut.set_exception(err)
                    return
            if self._node.closed:
                fut.set_exception(err)
                return
            self.scheduler.call_later(self.retry_backoff_ms, self._attempt, topic, p, rec, fut, deadline, err)

        self._node.request(st.leader, req, self.request_timeout_ms + 100, on_reply)

    def flush(self) -> None:
        """Nothing is buffered in this minimal producer; present for API compatibility."""

    def close(self) -> None:
        self.scheduler.run_sync(self._node.close_node)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
