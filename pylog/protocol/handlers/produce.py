"""Produce and InitProducerId: the same broker paths as pylog's own producer.

The partitions' record batches (opaque bytes) become one in-process
:class:`~pylog.replication.messages.MultiProduceRequest` to this listener's broker
(a :class:`~pylog.replication.messages.ProduceRequest` for a single partition),
exactly what :class:`pylog.client.producer.Producer` sends: the leader's
validated append (one RecordBatch v2, CRC, idempotent sequence check), the
produce purgatory for ``acks=-1``. The response waits for every partition.
``acks=0`` gets no response (Kafka's rule); when such a request cannot be
appended (unknown partition, this broker not its leader) the connection is
closed, as Kafka does, so the client refreshes its metadata. Versions 0-2 (message format 0/1)
are advertised, as Kafka 4 does (KAFKA-18659: librdkafka disables compression
otherwise), and answered with UNSUPPORTED_VERSION per partition. A transactional
producer's request names its transactional id, which goes with each batch
(``ProduceRequest.transactional_id``: the leader verifies an unknown transaction with
the coordinator, KIP-890 part 1); its errors are answered as Kafka answers
Produce before v11 (:func:`.txn.produce_error_code`). InitProducerId with a
transactional id goes to the transaction coordinator (:mod:`.txn`).

Thread-safety: handlers run on the cluster's loop thread.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from pylog.protocol import codec
from pylog.protocol.api import RequestContext, register
from pylog.protocol.handlers import txn
from pylog.replication.messages import InitProducerIdRequest, MultiProduceRequest, ProduceRequest
from pylog.replication.partition import LEADER

_MAX_TIMEOUT_MS = 2**31 - 1


def _produce_response(ctx: RequestContext, results: Dict[Tuple[str, int], Tuple[int, int, str]],
                      order: List[Tuple[str, List[int]]]) -> Any:
    cls = ctx.response_class
    T = cls.TopicProduceResponse
    P = T.PartitionProduceResponse
    v = ctx.api_version
    topics = []
    for name, parts in order:
        rows = []
        for p in parts:
            code, base, msg = results[(name, p)]
            rows.append(P(version=v, index=p, error_code=code, base_offset=base, log_append_time_ms=-1,
                          log_start_offset=-1, record_errors=[], error_message=msg or None))
        topics.append(T(version=v, name=name, partition_responses=rows))
    return ctx.response(responses=topics, throttle_time_ms=0)


def _order(req: Any) -> List[Tuple[str, List[int]]]:
    return [(t.name, [p.index for p in (t.partition_data or [])]) for t in (req.topic_data or [])]


def _fail(ctx: RequestContext, req: Any, code: int) -> None:
    if req.acks == 0:
        ctx.no_reply()
        return
    order = _order(req)
    results = {(n, p): (code, -1, "") for n, ps in order for p in ps}
    ctx.reply(_produce_response(ctx, results, order))


@register(api_key=0, min_version=0, max_version=9, fail=_fail)
def produce(ctx: RequestContext, req: Any) -> None:
    acks = req.acks
    order = _order(req)
    if ctx.api_version < 3:
        _fail(ctx, req, codec.UNSUPPORTED_VERSION)
        return
    if acks not in (0, 1, -1):
        _fail(ctx, req, codec.INVALID_REQUIRED_ACKS)
        return
    tid = req.transactional_id
    if tid is not None and not txn.serves_transactions(ctx.cluster):
        _fail(ctx, req, codec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)  # this cluster hosts no transactions
        return
    timeout = min(max(int(req.timeout_ms), 0), _MAX_TIMEOUT_MS)
    code_of = txn.produce_error_code

    def make(topic: str, p: int, data: bytes, acks: int, corr: int) -> Any:
        # a transactional producer's batches name their transactional id (KIP-890 part 1: the leader
        # verifies an unknown transaction with its coordinator before it appends)
        if tid is None:
            return ProduceRequest(topic, p, data, acks, timeout, corr)
        return txn.produce_request(topic, p, data, acks, timeout, corr, tid)

    store = ctx.cluster.metadata
    results: Dict[Tuple[str, int], Tuple[int, int, str]] = {}
    waiting = [0]
    done = [False]

    def finish() -> None:
        if not done[0] and waiting[0] == 0:
            done[0] = True
            if acks == 0:
                ctx.no_reply()
            else:
                ctx.reply(_produce_response(ctx, results, order))

    sends = []
    for t in req.topic_data or []:
        cfg = store.topics.get(t.name)
        for pd in t.partition_data or []:
            tp = (t.name, pd.index)
            if cfg is None or not 0 <= pd.index < cfg.partitions:
                results[tp] = (codec.UNKNOWN_TOPIC_OR_PARTITION, -1, f"unknown topic or partition {t.name}-{pd.index}")
            elif pd.records is None or len(pd.records) == 0:
                results[tp] = (codec.INVALID_RECORD, -1, "no record batch")
            else:
                sends.append((tp, bytes(pd.records)))
    node = ctx.node
    if acks == 0:
        # Kafka answers a failed acks=0 produce by closing the connection (the client's only hint to
        # refresh its metadata): refuse here what the leader check would refuse, then append.
        rm = ctx.broker.rm
        for tp, (code, _, why) in results.items():
            ctx.close_connection(f"acks=0 produce to {tp[0]}-{tp[1]} refused: {why}")
            return
        for (topic, p), _ in sends:
            part = rm.partitions.get((topic, p)) if rm is not None else None
            if part is None or part.role != LEADER:
                ctx.close_connection(f"acks=0 produce to {topic}-{p}: broker {ctx.broker_id} is not its leader")
                return
        if len(sends) > 1:
            node.transport.send(node.node_id, ctx.broker_id, MultiProduceRequest(
                tuple(make(topic, p, data, 0, 0) for (topic, p), data in sends), 0, timeout, ctx.next_corr()))
        for (topic, p), data in sends if len(sends) == 1 else ():
            node.transport.send(node.node_id, ctx.broker_id, make(topic, p, data, 0, ctx.next_corr()))
        ctx.no_reply()
        return
    if len(sends) > 1:
        # One internal request for all the partitions (the broker appends each and answers once, as
        # Kafka's ReplicaManager.appendRecords does for one wire request).
        def on_all(resp: Any) -> None:
            for i, (tp, _) in enumerate(sends):
                if resp is None:
                    results[tp] = (codec.REQUEST_TIMED_OUT if ctx.broker.running else codec.NOT_LEADER_OR_FOLLOWER,
                                   -1, "no answer from the broker")
                else:
                    r = resp.parts[i]
                    results[tp] = ((code_of(r.error), -1, r.message) if r.error is not None
                                   else (codec.NONE, r.base_offset, ""))
            finish()

        ctx.request(MultiProduceRequest(tuple(make(topic, p, data, acks, 0)
                                              for (topic, p), data in sends), acks, timeout, ctx.next_corr()),
                    on_all, timeout_ms=timeout + 5_000)
        return
    waiting[0] = len(sends)
    for (topic, p), data in sends:
        def cb(resp: Any, tp: Tuple[str, int] = (topic, p)) -> None:
            if resp is None:
                results[tp] = (codec.REQUEST_TIMED_OUT if ctx.broker.running else codec.NOT_LEADER_OR_FOLLOWER, -1,
                               "no answer from the broker")
            elif resp.error is not None:
                results[tp] = (code_of(resp.error), -1, resp.message)
            else:
                results[tp] = (codec.NONE, resp.base_offset, "")
            waiting[0] -= 1
            finish()

        ctx.request(make(topic, p, data, acks, ctx.next_corr()), cb, timeout_ms=timeout + 5_000)
    finish()


def _fail_init(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1))


@register(api_key=22, min_version=0, max_version=4, fail=_fail_init)
def init_producer_id(ctx: RequestContext, req: Any) -> None:
    """Without a transactional id (an idempotent producer): a new producer id (epoch 0) from this
    broker's block, as :class:`pylog.client.producer.Producer` gets it. With one: the transaction
    coordinator's answer (:func:`.txn.init_transactional_producer_id`)."""
    if req.transactional_id is not None:
        txn.init_transactional_producer_id(ctx, req, lambda code: _fail_init(ctx, req, code))
        return

    def cb(resp: Any) -> None:
        if resp is None:
            _fail_init(ctx, req, codec.REQUEST_TIMED_OUT)
        elif resp.error is not None:
            # no id block yet (a fresh controller): a retriable error, as Kafka's COORDINATOR_LOAD_IN_PROGRESS
            _fail_init(ctx, req, codec.COORDINATOR_NOT_AVAILABLE)
        else:
            ctx.reply(ctx.response(throttle_time_ms=0, error_code=0, producer_id=resp.producer_id,
                                   producer_epoch=resp.producer_epoch))

    ctx.request(InitProducerIdRequest(ctx.next_corr()), cb)
