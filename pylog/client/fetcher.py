"""The consumer's fetcher (Kafka's ``Fetcher`` and ``OffsetFetcher``): fetch requests, decoded records, resets.

Owns: the fetch requests in flight (at most one per partition, to its
leader, with the broker's long poll), the buffer of decoded records waiting
for ``poll`` (lists of records, or :class:`~pylog.client.fetch_decoder.RecordRun`
columns, built into records only when handed out), the partitions whose
fetched data was corrupt, the ListOffsets requests that resolve a position
by ``auto_offset_reset`` or answer ``beginning_offsets``/``end_offsets``/``offsets_for_times``
(``_list_offsets``), and the fetch counters and latency histogram.

It is one of the three parts :class:`~pylog.client.consumer.Consumer` is
built from (with :class:`~pylog.client.subscription.SubscriptionState` and
:class:`~pylog.client.consumer_coordinator.ConsumerCoordinator`): the
consumer inherits it, and its methods work on the consumer's own attributes.
What it uses from the other parts is declared under ``TYPE_CHECKING``, what the
facade provides in :class:`~pylog.client.consumer_base.ConsumerBase`.

Complexity: one columnar decode per fetched batch; handing out records is
O(records returned). Durability: none (fetched records live in memory until
returned). Thread-safety: loop thread, except ``_take_fast``/``_take_records``,
which a real-time ``poll`` runs on the caller's thread under ``_lock`` (it
guards ``_buffer``, ``_buffered`` and the subscription's ``_positions``).
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

from pylog.client._node import ClientFuture
from pylog.client.fetch_decoder import FetchDecoder
from pylog.client.consumer_base import ConsumerBase
from pylog.client.subscription import TP
from pylog.client.types import ConsumerRecord, TopicPartition
from pylog.errors import (
    CorruptRecordError,
    InvalidConfigurationError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pylog.metrics import Histogram
from pylog.replication import group_messages as gm
from pylog.replication.messages import NO_LEADER, FetchRequest

logger = logging.getLogger(__name__)


class Fetcher(ConsumerBase):
    """Fetches, decodes and buffers records for ``poll`` (a part of :class:`Consumer`)."""

    if TYPE_CHECKING:  # provided by the other parts (the facade's own: ConsumerBase)
        _assignment: List[TP]
        _positions: Dict[TP, int]
        _fetch_pos: Dict[TP, int]
        _token: Dict[TP, int]
        _hw: Dict[TP, int]
        _resetting: Set[TP]
        _no_offset: Set[TP]
        _paused: Set[TP]

        def _set_position(self, tp: TP, offset: int) -> None: ...

    def _init_fetcher(self) -> None:
        self._inflight: Set[TP] = set()
        #: [tp, records, next index] or [tp, records, next index, position after the last record]
        self._buffer: Deque[List[Any]] = deque()
        self._buffered: Dict[TP, int] = {}
        self._decoder = FetchDecoder(ConsumerRecord)  # loop thread only
        #: isolation_level == "read_committed": fetches read below the LSO and drop aborted transactions
        self._read_committed = self.isolation_level == "read_committed"
        #: per partition, the last stable offset of the last read_committed fetch (lag is measured to it)
        self._lso: Dict[TP, int] = {}
        #: partitions whose fetched data was corrupt: not fetched again, and poll() raises the
        #: error (once their good records are handed out) until seek() moves past it
        self._corrupt: Dict[TP, CorruptRecordError] = {}
        #: guards _buffer, _buffered and _positions: the loop fills the buffer, a real-time
        #: poll() takes from it on the caller's thread
        self._lock = threading.RLock()
        self._wake = threading.Event()  # set when records are buffered (or an error waits): poll()
        self.records_consumed = 0
        self.bytes_consumed = 0
        self.fetch_requests = 0
        #: seconds from a fetch request to its response (includes the broker's fetch_max_wait_ms long poll)
        self.fetch_latency = Histogram()
        self.violations: List[Tuple[TP, int, int]] = []

    def _drop_buffered(self, tp: TP) -> None:
        with self._lock:
            if self._buffered.pop(tp, 0):
                self._buffer = deque(c for c in self._buffer if c[0] != tp)

    def _drop_all_buffered(self) -> None:
        with self._lock:
            self._buffer.clear()
            self._buffered.clear()

    def _reset_offset(self, tp: TP, policy: str) -> None:
        """Resolve ``tp``'s position by ``policy``: ask the leader for its earliest or latest offset."""
        if policy == "none":
            self._resetting.discard(tp)
            self._no_offset.add(tp)
            self._error = NoOffsetForPartitionError(
                f"no committed offset for {tp[0]}-{tp[1]} (group {self.group_id!r}) and auto_offset_reset='none'")
            self._signal()
            return
        self._resetting.add(tp)
        st = self.store.partitions.get(tp)
        if st is None or st.leader == NO_LEADER:
            return  # the tick retries
        ts = gm.EARLIEST_TIMESTAMP if policy == "earliest" else gm.LATEST_TIMESTAMP
        token = self._token.get(tp, 0)
        req = gm.ListOffsetsRequest(tp[0], tp[1], ts, self._node.next_corr(),
                                    isolation_level=1 if self.isolation_level == "read_committed" else 0)

        def done(resp: Any) -> None:
            if self._token.get(tp, 0) != token or tp not in self._resetting:
                return
            if resp is None or resp.error is not None:
                return  # the tick retries
            self._set_position(tp, resp.offset)
            self._send_fetches()

        self._node.request(st.leader, req, self.request_timeout_ms, done)

    def _take_fast(self, limit: int) -> List[ConsumerRecord]:
        """Caller's thread: take buffered records; ask the loop for more fetches when a partition runs low."""
        if self._error is not None or self._closed:
            return []
        out = self._take_records(limit)
        if out:
            self.scheduler.call_soon(self._send_fetches)
        return out

    def _take_records(self, limit: int) -> List[ConsumerRecord]:
        """Hand out up to ``limit`` buffered records and advance the positions.

        The buffer holds lists of records (from the per-batch decoder) and
        :class:`RecordRun` columns (from the run decoder); a run's records are
        built here, after the buffer lock is released.
        """
        pieces: List[Tuple[Any, int, int]] = []
        taken = 0
        with self._lock:
            buf = self._buffer
            while buf and taken < limit:
                chunk = buf[0]
                tp, recs, i = chunk[0], chunk[1], chunk[2]
                n = len(recs)
                j = min(n, i + limit - taken)
                pieces.append((recs, i, j))
                taken += j - i
                self._buffered[tp] -= j - i
                self._positions[tp] = (recs[j - 1].offset if type(recs) is list else recs.offset_at(j - 1)) + 1
                if j == n:
                    buf.popleft()
                    if len(chunk) > 3:  # the fetch went on past its last record (markers, aborted data)
                        self._positions[tp] = chunk[3]
                else:
                    chunk[2] = j
            if taken:
                self.records_consumed += taken
            if not buf:
                self._wake.clear()
        if len(pieces) == 1:
            recs, i, j = pieces[0]
            if type(recs) is not list:
                return recs.take(i, j)
            return recs if i == 0 and j == len(recs) else recs[i:j]
        out: List[ConsumerRecord] = []
        for recs, i, j in pieces:
            if type(recs) is not list:
                out.extend(recs.take(i, j))
            else:
                out.extend(recs if i == 0 and j == len(recs) else recs[i:j])
        return out

    def _raise_corrupt(self) -> None:
        """Raise the error of a corrupt partition whose good records were all handed out (Kafka's
        consumer does the same on every poll until the application seeks past the bad batch)."""
        for tp, err in self._corrupt.items():
            if not self._buffered.get(tp, 0):
                raise CorruptRecordError(str(err))

    def _send_fetches(self) -> None:
        if self._closed:
            return
        for tp in self._assignment:
            if tp in self._inflight or tp in self._resetting or tp not in self._fetch_pos or tp in self._corrupt \
                    or tp in self._paused:
                continue
            if self._buffered.get(tp, 0) >= self.max_poll_records:
                continue
            st = self.store.partitions.get(tp)
            if st is None or st.leader == NO_LEADER:
                continue
            pos = self._fetch_pos[tp]
            token = self._token.get(tp, 0)
            req = FetchRequest(-1, tp[0], tp[1], pos, -1, self._node.next_corr(),
                               max_bytes=self.max_partition_fetch_bytes, max_wait_ms=self.fetch_max_wait_ms,
                               isolation_level=1 if self._read_committed else 0)
            self._inflight.add(tp)
            self.fetch_requests += 1
            sent = self.scheduler.clock.now_ms()

            def on_fetch(resp: Any, tp: TP = tp, pos: int = pos, token: int = token, sent: int = sent) -> None:
                self._on_fetch(tp, pos, token, resp, sent)

            self._node.request(st.leader, req, self.request_timeout_ms, on_fetch)

    def _on_fetch(self, tp: TP, pos: int, token: int, resp: Any, sent_ms: Optional[int] = None) -> None:
        self._inflight.discard(tp)
        if resp is not None and sent_ms is not None:
            self.fetch_latency.observe((self.scheduler.clock.now_ms() - sent_ms) / 1000.0)
        if self._closed or resp is None or self._token.get(tp, 0) != token or self._fetch_pos.get(tp) != pos:
            if resp is None and not self._closed:
                return  # timed out or the broker went away: the tick sends again
            self._send_fetches()
            return
        if resp.error is OffsetOutOfRangeError:
            policy = self.auto_offset_reset
            if policy == "none":
                self._error = OffsetOutOfRangeError(
                    f"fetch offset {pos} is out of range for {tp[0]}-{tp[1]} (log start {resp.log_start_offset}, "
                    f"HW {resp.high_watermark}) and auto_offset_reset='none'")
                self._signal()
                return
            self._positions.pop(tp, None)
            self._fetch_pos.pop(tp, None)
            self._reset_offset(tp, policy)
            return
        if resp.error is not None:
            return  # NotLeader etc.: the tick retries after the metadata moves
        hw = resp.high_watermark
        self._hw[tp] = hw
        aborted = ()
        if self._read_committed:
            # Read below the LSO only (a leader that reports none: its HW); the positions move past
            # markers and aborted transactions. Lag and end_offsets are measured to the LSO.
            lso = resp.last_stable_offset
            if lso >= 0:
                hw = lso
            self._lso[tp] = hw
            aborted = resp.aborted_transactions
        if resp.records:
            nxt = pos
            got = 0
            chunks: List[List[Any]] = []
            topic, partition = tp

            def emit(recs: Any) -> None:
                nonlocal got
                chunks.append([tp, recs, 0])
                got += len(recs)

            def above_hw(offset: int) -> None:
                self.violations.append((tp, offset, hw))

            try:
                if aborted:  # the C run decoder passes transactional batches through: per batch, filtered
                    nxt = self._decoder.decode_committed(resp.records, pos, hw, aborted, topic, partition, emit,
                                                         above_hw)
                else:
                    nxt = self._decoder.decode(resp.records, pos, hw, topic, partition, emit, above_hw)
            except CorruptRecordError as exc:
                # Keep the records before the damage; stop fetching this partition and let poll()
                # raise once they are handed out, naming where (the application may seek past it).
                nxt = self._decoder.next_offset
                self._corrupt[tp] = CorruptRecordError(
                    f"{topic}-{partition}: the batch fetched at offset {nxt} is corrupt "
                    f"({exc}); records before it were delivered; seek past it to go on")
                self._signal()
            self.bytes_consumed += len(resp.records)
            self._fetch_pos[tp] = nxt
            if got:
                last = chunks[-1][1]
                if (last[-1].offset if type(last) is list else last.offset_at(len(last) - 1)) + 1 < nxt:
                    chunks[-1].append(nxt)  # handing out the last record moves the position on to nxt
                with self._lock:
                    self._buffer.extend(chunks)
                    self._buffered[tp] = self._buffered.get(tp, 0) + got
                    self._wake.set()
                self._changed.set()
            elif nxt > pos:
                self._skip_to(tp, nxt)
        self._send_fetches()

    def _skip_to(self, tp: TP, nxt: int) -> None:
        """A fetch of ``tp`` handed out no record but moved past batches (control batches, an aborted
        transaction, empty batches): the position follows at once when nothing of ``tp`` is
        buffered, else when its last buffered record is handed out (as Kafka's consumer moves its
        position to the fetch's next offset). O(1), or O(buffered chunks) in the second case."""
        with self._lock:
            if not self._buffered.get(tp, 0):
                if self._positions.get(tp, nxt) < nxt:
                    self._positions[tp] = nxt
                    self._changed.set()
                return
            for chunk in reversed(self._buffer):
                if chunk[0] == tp:
                    if len(chunk) > 3:
                        chunk[3] = nxt
                    else:
                        chunk.append(nxt)
                    return

    def _check_partitions_exist(self, tps: Sequence[TopicPartition], what: str) -> None:
        for tp in tps:
            cfg = self.store.topics.get(tp.topic)
            if cfg is None or tp.partition >= cfg.partitions:
                raise UnknownTopicOrPartitionError(
                    f"{what}(): {tp.topic}-{tp.partition} does not exist"
                    + ("" if cfg is None else f" (topic {tp.topic!r} has {cfg.partitions} partitions)"))

    def _list_offsets(self, queries: Dict[TopicPartition, int], timeout: float, what: str) -> Dict[TopicPartition, Any]:
        """Kafka's ListOffsets for each partition from its leader (timestamp -2 earliest, -1 latest,
        else a time); NotLeader and timeouts are retried every ``retry_backoff_ms`` until ``timeout``."""
        self._check_partitions_exist(list(queries), what)
        if not queries:
            return {}
        fut = ClientFuture(self.scheduler)
        results: Dict[TopicPartition, Any] = {}
        deadline = self._now() + int(timeout * 1000)
        level = 1 if self.isolation_level == "read_committed" else 0

        def attempt(tp: TopicPartition) -> None:
            if fut.done():
                return
            st = self.store.partitions.get((tp.topic, tp.partition))
            if st is None or st.leader == NO_LEADER:
                again(tp, f"{tp.topic}-{tp.partition} has no leader")
                return
            req = gm.ListOffsetsRequest(tp.topic, tp.partition, queries[tp], self._node.next_corr(),
                                        isolation_level=level)

            def done(resp: Any) -> None:
                if fut.done():
                    return
                if resp is None or resp.error is not None:
                    if resp is not None and resp.error is InvalidConfigurationError:
                        fut.set_exception(InvalidConfigurationError(resp.message))
                        return
                    again(tp, "no answer" if resp is None else f"{resp.error.__name__}: {resp.message}")
                    return
                results[tp] = resp
                if len(results) == len(queries):
                    fut.set_result(dict(results))

            self._node.request(st.leader, req, self.request_timeout_ms, done)

        def again(tp: TopicPartition, why: str) -> None:
            if self._closed or self._now() >= deadline:
                fut.set_exception(RequestTimedOutError(
                    f"{what}(): no offsets for {tp.topic}-{tp.partition} within {timeout} s ({why})"))
                return
            self.scheduler.call_later(self.retry_backoff_ms, lambda: attempt(tp))

        def start() -> None:
            for tp in queries:
                attempt(tp)

        self._call(start)
        return fut.result(timeout + 1)


__all__ = ["Fetcher"]
