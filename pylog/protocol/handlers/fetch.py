"""Fetch, ListOffsets and OffsetForLeaderEpoch: the same broker paths as pylog's own consumer.

Fetch: each partition becomes an in-process consumer
:class:`~pylog.replication.messages.FetchRequest` (``replica_id=-1``: reads
below the high watermark) to this listener's broker. The records are the
leader's segment bytes, whole batches from the one holding the fetch offset
(the client skips the records before it), never re-encoded. The consumer's
``isolation_level`` goes to the leader: under ``read_committed`` (librdkafka's
default) it reads below the last stable offset and answers the aborted
transactions that may overlap the records (``aborted_transactions``), which the
client drops, as against Kafka; a ``read_uncommitted`` answer carries the high
watermark as its ``last_stable_offset``. Fetch sessions (v7+) are not
kept: the answer's session id is 0, which tells the client to send full
fetches (KIP-227).

Long poll: a first pass reads every partition at once; if it found fewer than
``min_bytes`` (and ``max_wait_ms`` > 0), each partition is asked again with the
remaining wait, parking in the broker's fetch purgatory, and the response goes
out once the partitions' data reach ``min_bytes`` (each parked partition answers
once, with what it has when the leader appends), at the first error, or when
the wait is over.

Thread-safety: handlers run on the cluster's loop thread.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from pylog.protocol import codec
from pylog.protocol.api import RequestContext, register
from pylog.replication import group_messages as gm
from pylog.replication.messages import FetchRequest, OffsetsForLeaderEpochRequest

TP = Tuple[str, int]


class _PartState:
    __slots__ = ("code", "hw", "log_start", "records", "diverging", "lso", "aborted")

    def __init__(self, code: int = 0, hw: int = -1, log_start: int = -1, records: bytes = b"",
                 diverging: Optional[Tuple[int, int]] = None, lso: int = -1,
                 aborted: Tuple[Tuple[int, int], ...] = ()):
        self.code = code
        self.hw = hw
        self.log_start = log_start
        self.records = records
        self.diverging = diverging
        #: the leader's last stable offset (-1: unknown; the HW is answered then)
        self.lso = lso
        #: (producer id, first offset) of the aborted transactions the records may hold (read_committed)
        self.aborted = aborted


def _diverging_epoch(ctx: RequestContext, tp: TP, fetch_offset: int, last_fetched_epoch: int
                     ) -> Optional[Tuple[int, int, int, int]]:
    """KIP-320 (Fetch v12): the consumer says its last record came from ``last_fetched_epoch``; if the
    leader's log has that epoch ending before ``fetch_offset`` (or no such epoch), the consumer's log
    diverged (an unclean election truncated it): answer (epoch, end offset, HW, log start) and no
    records, as Kafka's Partition.fetchRecords does. Reads the leader's epoch cache, the same lookup
    its OffsetsForLeaderEpoch answer uses. None: no divergence (or not the leader: the fetch says so)."""
    from pylog.replication.partition import LEADER

    rm = ctx.broker.rm
    part = rm.partitions.get(tp) if rm is not None else None
    if part is None or part.role != LEADER or last_fetched_epoch < 0:
        return None
    epoch, end = part.log.epochs.end_offset_for(last_fetched_epoch, part.log.log_end_offset)
    if epoch < last_fetched_epoch or end < fetch_offset:
        return epoch, end, part.high_watermark, part.log.log_start_offset
    return None


def _fetch_response(ctx: RequestContext, req: Any, state: Dict[TP, _PartState], top_code: int = 0) -> Any:
    cls = ctx.response_class
    T = cls.FetchableTopicResponse
    P = T.PartitionData
    v = ctx.api_version
    read_committed = (req.isolation_level or 0) == 1
    A = P.AbortedTransaction
    topics = []
    for t in req.topics or []:
        rows = []
        for p in t.partitions or []:
            st = state.get((t.topic, p.partition)) or _PartState(codec.UNKNOWN_TOPIC_OR_PARTITION)
            extra = {}
            if st.diverging is not None:  # a tagged field: set only when there is one
                extra["diverging_epoch"] = P.EpochEndOffset(version=v, epoch=st.diverging[0], end_offset=st.diverging[1])
            # Kafka answers the LSO at every isolation level; the aborted list only to read_committed
            # (null for read_uncommitted, as Kafka's FetchResponse)
            aborted = ([A(version=v, producer_id=pid, first_offset=first) for pid, first in st.aborted]
                       if read_committed else None)
            rows.append(P(version=v, partition_index=p.partition, error_code=st.code, high_watermark=st.hw,
                          last_stable_offset=st.lso if st.lso >= 0 else st.hw, log_start_offset=st.log_start,
                          aborted_transactions=aborted, preferred_read_replica=-1, records=st.records, **extra))
        topics.append(T(version=v, topic=t.topic, partitions=rows))
    return ctx.response(throttle_time_ms=0, error_code=top_code, session_id=0, responses=topics)


def _fail_fetch(ctx: RequestContext, req: Any, code: int) -> None:
    state = {(t.topic, p.partition): _PartState(code) for t in (req.topics or []) for p in (t.partitions or [])}
    ctx.reply(_fetch_response(ctx, req, state))


@register(api_key=1, min_version=4, max_version=12, fail=_fail_fetch)
def fetch(ctx: RequestContext, req: Any) -> None:
    store = ctx.cluster.metadata
    v = ctx.api_version
    wanted: List[Tuple[TP, int, int, int]] = []  # (tp, offset, leader epoch, partition max bytes)
    state: Dict[TP, _PartState] = {}
    for t in req.topics or []:
        cfg = store.topics.get(t.topic)
        for p in t.partitions or []:
            tp = (t.topic, p.partition)
            if cfg is None or not 0 <= p.partition < cfg.partitions:
                state[tp] = _PartState(codec.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            epoch = p.current_leader_epoch if v >= 9 else -1
            if v >= 12 and p.last_fetched_epoch is not None and p.last_fetched_epoch >= 0:
                div = _diverging_epoch(ctx, tp, int(p.fetch_offset), int(p.last_fetched_epoch))
                if div is not None:
                    state[tp] = _PartState(0, div[2], div[3], b"", (div[0], div[1]))
                    continue
            wanted.append((tp, int(p.fetch_offset), -1 if epoch is None else int(epoch),
                           max(0, int(p.partition_max_bytes))))
    max_wait = max(0, int(req.max_wait_ms))
    isolation = 1 if (req.isolation_level or 0) == 1 else 0
    min_bytes = max(0, int(req.min_bytes))
    max_bytes = int(req.max_bytes) if v >= 3 and req.max_bytes is not None else 2**31 - 1
    started = time.monotonic()
    done = [False]
    pending = [0]

    def apply(tp: TP, resp: Optional[Any]) -> None:
        if resp is None:
            state[tp] = _PartState(codec.NOT_LEADER_OR_FOLLOWER)
        elif resp.error is not None:
            state[tp] = _PartState(codec.error_code_of(resp.error), resp.high_watermark, resp.log_start_offset)
        else:
            state[tp] = _PartState(0, resp.high_watermark, resp.log_start_offset, resp.records,
                                   lso=resp.last_stable_offset, aborted=resp.aborted_transactions)

    def send(wait_ms: int, on_each: Any) -> None:
        budget = max_bytes
        for tp, offset, epoch, pmax in wanted:
            limit = max(1, min(pmax, budget)) if budget > 0 else 1
            msg = FetchRequest(-1, tp[0], tp[1], offset, epoch, ctx.next_corr(), max_bytes=limit, max_wait_ms=wait_ms,
                               isolation_level=isolation)
            pending[0] += 1

            def callback(resp: Optional[Any], tp: Tuple[str, int] = tp) -> None:
                on_each(tp, resp)

            ctx.request(msg, callback, timeout_ms=wait_ms + 30_000)

    def reply() -> None:
        if not done[0]:
            done[0] = True
            ctx.reply(_fetch_response(ctx, req, state))

    def first(tp: TP, resp: Optional[Any]) -> None:
        pending[0] -= 1
        apply(tp, resp)
        if pending[0]:
            return
        got = sum(len(s.records) for s in state.values())
        errors = any(s.code or s.diverging is not None for s in state.values())
        remaining = max_wait - int((time.monotonic() - started) * 1000)
        if got >= max(min_bytes, 1) or errors or remaining <= 0 or not wanted:
            reply()
            return
        send(remaining, second)

    def second(tp: TP, resp: Optional[Any]) -> None:
        pending[0] -= 1
        if done[0]:
            return
        apply(tp, resp)
        got = sum(len(s.records) for s in state.values())
        if pending[0] == 0 or got >= max(min_bytes, 1) or state[tp].code:
            reply()

    if not wanted:
        reply()
        return
    if any(s.diverging is not None for s in state.values()):
        max_wait = 0  # a divergence is news: answer at once
    send(0, first)


def _list_offsets_response(ctx: RequestContext, req: Any, rows: Dict[TP, Tuple[int, int, int, int]]) -> Any:
    cls = ctx.response_class
    T = cls.ListOffsetsTopicResponse
    P = T.ListOffsetsPartitionResponse
    v = ctx.api_version
    topics = []
    for t in req.topics or []:
        parts = []
        for p in t.partitions or []:
            code, ts, off, epoch = rows[(t.name, p.partition_index)]
            parts.append(P(version=v, partition_index=p.partition_index, error_code=code, timestamp=ts, offset=off,
                           leader_epoch=epoch))
        topics.append(T(version=v, name=t.name, partitions=parts))
    return ctx.response(throttle_time_ms=0, topics=topics)


def _fail_list_offsets(ctx: RequestContext, req: Any, code: int) -> None:
    rows = {(t.name, p.partition_index): (code, -1, -1, -1) for t in (req.topics or []) for p in (t.partitions or [])}
    ctx.reply(_list_offsets_response(ctx, req, rows))


def _record_timestamp(ctx: RequestContext, tp: TP, offset: int) -> int:
    """The timestamp of the record at ``offset`` on this broker's leader replica (-1 if not there)."""
    rm = ctx.broker.rm
    part = rm.partitions.get(tp) if rm is not None else None
    if part is None:
        return -1
    try:
        for rec in part.log.read(offset, max_bytes=1):
            if rec.offset >= offset:
                return -1 if rec.timestamp is None else rec.timestamp
    except Exception:  # noqa: BLE001 - a timestamp is informative only
        return -1
    return -1


@register(api_key=2, min_version=1, max_version=6, fail=_fail_list_offsets)
def list_offsets(ctx: RequestContext, req: Any) -> None:
    """Earliest (-2), latest (-1: the HW; under read_committed, v2+, the last stable offset) or the first offset
    whose timestamp is at or after a time (offset -1 when there is none, as Kafka answers), through the
    broker's ListOffsets path (the one pylog's consumer uses)."""
    store = ctx.cluster.metadata
    rows: Dict[TP, Tuple[int, int, int, int]] = {}
    todo = []
    for t in req.topics or []:
        cfg = store.topics.get(t.name)
        for p in t.partitions or []:
            tp = (t.name, p.partition_index)
            if cfg is None or not 0 <= p.partition_index < cfg.partitions:
                rows[tp] = (codec.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1)
            elif p.timestamp < -2:
                rows[tp] = (codec.INVALID_REQUEST, -1, -1, -1)  # -3 (max timestamp) is ListOffsets v7
            else:
                todo.append((tp, int(p.timestamp), p.current_leader_epoch if ctx.api_version >= 4 else -1))
    pending = [len(todo)]
    if not todo:
        ctx.reply(_list_offsets_response(ctx, req, rows))
        return
    for tp, ts, cur_epoch in todo:
        part = ctx.broker.rm.partitions.get(tp) if ctx.broker.rm is not None else None
        if part is not None and cur_epoch is not None and cur_epoch >= 0 and part.leader_epoch >= 0:
            if cur_epoch < part.leader_epoch:
                rows[tp] = (codec.FENCED_LEADER_EPOCH, -1, -1, -1)
            elif cur_epoch > part.leader_epoch:
                rows[tp] = (codec.UNKNOWN_LEADER_EPOCH, -1, -1, -1)
        if tp in rows:
            pending[0] -= 1
            continue

        def cb(resp: Any, tp: TP = tp, ts: int = ts) -> None:
            if resp is None:
                rows[tp] = (codec.NOT_LEADER_OR_FOLLOWER, -1, -1, -1)
            elif resp.error is not None:
                rows[tp] = (codec.error_code_of(resp.error), -1, -1, -1)
            elif ts >= 0:
                # the broker answers the HW when no record is that recent; Kafka answers -1 then
                rts = _record_timestamp(ctx, tp, resp.offset)
                rows[tp] = (0, rts, resp.offset, resp.leader_epoch) if rts >= 0 else (0, -1, -1, resp.leader_epoch)
            else:
                rows[tp] = (0, -1, resp.offset, resp.leader_epoch)
            pending[0] -= 1
            if pending[0] == 0:
                ctx.reply(_list_offsets_response(ctx, req, rows))

        ctx.request(gm.ListOffsetsRequest(tp[0], tp[1], ts, ctx.next_corr(),
                                          isolation_level=int(req.isolation_level or 0)), cb)
    if pending[0] == 0:
        ctx.reply(_list_offsets_response(ctx, req, rows))


def _ofle_response(ctx: RequestContext, req: Any, rows: Dict[TP, Tuple[int, int, int]]) -> Any:
    cls = ctx.response_class
    T = cls.OffsetForLeaderTopicResult
    P = T.EpochEndOffset
    v = ctx.api_version
    return ctx.response(throttle_time_ms=0, topics=[
        T(version=v, topic=t.topic, partitions=[
            P(version=v, partition=p.partition, error_code=rows[(t.topic, p.partition)][0],
              leader_epoch=rows[(t.topic, p.partition)][1], end_offset=rows[(t.topic, p.partition)][2])
            for p in (t.partitions or [])]) for t in (req.topics or [])])


def _fail_ofle(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(_ofle_response(ctx, req, {(t.topic, p.partition): (code, -1, -1) for t in (req.topics or [])
                                        for p in (t.partitions or [])}))


@register(api_key=23, min_version=2, max_version=4, fail=_fail_ofle)
def offset_for_leader_epoch(ctx: RequestContext, req: Any) -> None:
    """Where a leader epoch ends on the leader (KIP-101/KIP-279): the broker's own answer to followers."""
    store = ctx.cluster.metadata
    rows: Dict[TP, Tuple[int, int, int]] = {}
    todo = []
    for t in req.topics or []:
        cfg = store.topics.get(t.topic)
        for p in t.partitions or []:
            tp = (t.topic, p.partition)
            if cfg is None or not 0 <= p.partition < cfg.partitions:
                rows[tp] = (codec.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
            else:
                todo.append((tp, int(p.current_leader_epoch), int(p.leader_epoch)))
    pending = [len(todo)]
    if not todo:
        ctx.reply(_ofle_response(ctx, req, rows))
        return
    for tp, cur, ep in todo:
        def cb(resp: Any, tp: TP = tp) -> None:
            if resp is None:
                rows[tp] = (codec.NOT_LEADER_OR_FOLLOWER, -1, -1)
            elif resp.error is not None:
                rows[tp] = (codec.error_code_of(resp.error), -1, -1)
            else:
                rows[tp] = (0, resp.leader_epoch, resp.end_offset)
            pending[0] -= 1
            if pending[0] == 0:
                ctx.reply(_ofle_response(ctx, req, rows))

        ctx.request(OffsetsForLeaderEpochRequest(-1, tp[0], tp[1], cur, ep, ctx.next_corr()), cb)
