"""The transaction APIs of the Kafka protocol (issue 17): FindCoordinator with key type TRANSACTION,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit (InitProducerId with a transactional
id is routed by :mod:`.produce`, which serves InitProducerId).

As the group handlers do, each handler only translates: the decoded Kafka request becomes the
in-process message of :mod:`pylog.replication.txn_messages`, sent through the listener's transport
node to the broker the client connected to, which hands it to its transaction coordinator (or, for
TxnOffsetCommit, its group coordinator) - the same path and state machine as pylog's own
transactional producer. No transaction logic lives here: only field mapping, Kafka's checks before
its coordinator sees a request (unknown partitions in AddPartitionsToTxn and TxnOffsetCommit, an
empty transactional or group id), and Kafka's per-version error codes:

* PRODUCER_FENCED (KIP-588) is answered as INVALID_PRODUCER_EPOCH to the versions that predate it
  (InitProducerId < 4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn < 2), as Kafka's ``KafkaApis`` does;
* TxnOffsetCommit < 2 gets COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS (KAFKA-7296);
* AddPartitionsToTxn: a partition of an unknown topic (or beyond its partition count) fails the whole
  request: it gets UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED (Kafka's rule).

KIP-890 epoch bump: Kafka decides it per EndTxn from the request version (v5+ = the client knows the
bump, ``TransactionVersion.TV_2``; older = TV_0). The listener passes that on
(``EndTxnRequest.client_transaction_version``); the served maxima (:data:`VERSIONS`, Kafka 2.8's, as
the rest of the listener) stop at EndTxn v3, which every client uses today (librdkafka sends v1,
kafka-python v3), so the coordinator does not bump their epochs - they would not know the new one.
The handler speaks EndTxn v4-v5 (v5's new producer id and epoch in the answer) for when the listener
moves to a later release.

AddPartitionsToTxn v4+ is broker-to-broker (KIP-890 part 1 verification, batched transactions);
pylog's brokers verify in process, so it is neither served nor advertised. WriteTxnMarkers (27) is
also broker-to-broker and in process.

The transaction APIs (and FindCoordinator's key type 1) are advertised only when the cluster can
host transaction coordinators (``ensure_transaction_state_topic``); before that, FindCoordinator
type 1 and InitProducerId with a transactional id answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

Complexity: O(size of the request) plus one in-process round trip per request. Durability: what the
coordinators give (every answered transition is in ``__transaction_state`` on its ISR; a
TxnOffsetCommit is answered once its record is in ``__consumer_offsets`` on its ISR).
Thread-safety: handlers run on the cluster's loop thread.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

from pylog.protocol import codec
from pylog.protocol.api import RequestContext, guarded_request, register
from pylog.protocol.handlers import groups
from pylog.replication import group_messages as gm
from pylog.replication import txn_messages as txm
from pylog.replication.messages import ProduceRequest
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC
from pylog.runtime.cluster_context import ServedCluster

_log = logging.getLogger(__name__)

#: (min, max) version served per API: Apache Kafka 2.8's (kafka-python infers the broker release from
#: the maxima; AddPartitionsToTxn 4 would make it 3.6), which are also Kafka 4.0's minima (KIP-896
#: dropped no transaction versions). Clients: librdkafka 2.x AddPartitionsToTxn 0, AddOffsetsToTxn 0,
#: EndTxn 1, TxnOffsetCommit 3, InitProducerId 4; kafka-python 3: 3, 3, 3, 3, 4.
VERSIONS: Dict[str, Tuple[int, int]] = {
    "AddPartitionsToTxn": (0, 3),
    "AddOffsetsToTxn": (0, 3),
    "EndTxn": (0, 3),
    "TxnOffsetCommit": (0, 3),
}

#: the first version of each API that knows PRODUCER_FENCED (KIP-588); older ones get INVALID_PRODUCER_EPOCH
PRODUCER_FENCED_SINCE: Dict[int, int] = {22: 4, 24: 2, 25: 2, 26: 2}
#: EndTxn from this version on tells the coordinator the client knows the KIP-890 epoch bump (Kafka's TV_2)
END_TXN_EPOCH_BUMP_VERSION = 5

NONE = codec.NONE


def serves_transactions(cluster: ServedCluster) -> bool:
    """True when ``cluster`` hosts transaction coordinators (it can create ``__transaction_state``; every
    :class:`pylog.Cluster` does, a stand-in of the served-cluster protocol may not)."""
    return callable(getattr(cluster, "ensure_transaction_state_topic", None))


def error_code(ctx: RequestContext, error: Any) -> int:
    """Kafka's code for a pylog error class (or None) as this request's API and version carry it."""
    code = codec.error_code_of(error)
    if code == codec.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_SINCE.get(ctx.api_key, 0):
        return codec.INVALID_PRODUCER_EPOCH
    return code


# ============================================================================== Produce
def produce_request(topic: str, partition: int, records: bytes, acks: int, timeout_ms: int, correlation_id: int,
                    transactional_id: str) -> Any:
    """The in-process produce of a transactional producer's batch: it names the transactional id, so
    the leader can verify an unknown transaction with the coordinator (KIP-890 part 1)."""
    return ProduceRequest(topic, partition, records, acks, timeout_ms, correlation_id, transactional_id=transactional_id)


def produce_error_code(error: Any) -> int:
    """A partition's Produce error code (versions 3-9, before KIP-890's TRANSACTION_ABORTABLE in v11):
    as Kafka's verification answers older producers, PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH
    and TRANSACTION_ABORTABLE (a partition not in the transaction) INVALID_TXN_STATE."""
    code = codec.error_code_of(error)
    if code == codec.PRODUCER_FENCED:
        return codec.INVALID_PRODUCER_EPOCH
    if code == codec.TRANSACTION_ABORTABLE:
        return codec.INVALID_TXN_STATE
    return code


def _known_partition(ctx: RequestContext, topic: str, partition: int) -> bool:
    cfg = ctx.cluster.metadata.topics.get(topic)
    return cfg is not None and 0 <= partition < cfg.partitions


# ============================================================ FindCoordinator (key type 1)
def _lookup_transaction(ctx: RequestContext, req: Any, key: str,
                        done: Callable[[int, Optional[str], int], None]) -> None:
    """The broker leading the transactional id's ``__transaction_state`` partition."""
    if not serves_transactions(ctx.cluster):
        done(codec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "this cluster hosts no transaction coordinator", -1)
        return
    if not key:
        done(codec.INVALID_REQUEST, "the transactional id is empty", -1)
        return
    if TRANSACTION_STATE_TOPIC not in ctx.cluster.metadata.topics:
        groups.ensure_internal_topic(ctx, TRANSACTION_STATE_TOPIC, ctx.cluster.ensure_transaction_state_topic)
        done(codec.COORDINATOR_NOT_AVAILABLE, f"the {TRANSACTION_STATE_TOPIC} topic is being created", -1)
        return

    def answer(resp: Any) -> None:
        if resp is None:
            done(codec.COORDINATOR_NOT_AVAILABLE, f"transactional id {key!r}: broker {ctx.broker_id} did not answer",
                 -1)
        elif resp.error is not None:
            done(codec.error_code_of(resp.error), resp.message or None, -1)
        else:
            done(NONE, None, resp.node_id)

    guarded_request(ctx, req, txm.FindTransactionCoordinatorRequest(key, ctx.next_corr()), answer)


groups.COORDINATOR_LOOKUPS[groups.TRANSACTION_KEY_TYPE] = _lookup_transaction


# ======================================================================= InitProducerId
def init_transactional_producer_id(ctx: RequestContext, req: Any, fail: Callable[[int], None]) -> None:
    """InitProducerId with a transactional id (called by :func:`.produce.init_producer_id`): to the
    transaction coordinator on this listener's broker (NOT_COORDINATOR if it is not the id's).
    v3+ ``producer_id``/``producer_epoch`` (KIP-360): the producer's current ones when it asks for an
    epoch bump; both -1 otherwise, one of them -1 is INVALID_REQUEST (Kafka's check)."""
    if not serves_transactions(ctx.cluster):
        fail(codec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return
    tid = req.transactional_id
    pid, epoch = (int(req.producer_id), int(req.producer_epoch)) if ctx.api_version >= 3 else (-1, -1)
    if not tid or (pid == -1) != (epoch == -1):
        fail(codec.INVALID_REQUEST)
        return
    msg = txm.InitProducerIdRequest(ctx.next_corr(), transactional_id=tid,
                                    transaction_timeout_ms=int(req.transaction_timeout_ms),
                                    producer_id=pid, producer_epoch=epoch)

    def done(resp: Any) -> None:
        if resp is None:
            fail(codec.COORDINATOR_NOT_AVAILABLE)
        elif resp.error is not None:
            fail(error_code(ctx, resp.error))
        else:
            ctx.reply(ctx.response(throttle_time_ms=0, error_code=NONE, producer_id=resp.producer_id,
                                   producer_epoch=resp.producer_epoch))

    guarded_request(ctx, req, msg, done)


# =================================================================== AddPartitionsToTxn
def _add_partitions_reply(ctx: RequestContext, rows: List[Tuple[str, int, int]]) -> None:
    tcls = ctx.response_class.AddPartitionsToTxnTopicResult
    pcls = tcls.AddPartitionsToTxnPartitionResult
    by_topic: Dict[str, List[Any]] = {}
    for t, p, code in rows:
        by_topic.setdefault(t, []).append(pcls(partition_index=p, partition_error_code=code))
    ctx.reply(ctx.response(throttle_time_ms=0, results_by_topic_v3_and_below=[
        tcls(name=t, results_by_partition=ps) for t, ps in by_topic.items()]))


def _add_partitions_wanted(req: Any) -> List[Tuple[str, int]]:
    return [(t.name, int(p)) for t in (req.v3_and_below_topics or []) for p in (t.partitions or [])]


def _add_partitions_fail(ctx: RequestContext, req: Any, code: int) -> None:
    _add_partitions_reply(ctx, [(t, p, code) for t, p in _add_partitions_wanted(req)])


@register(api_key=24, min_version=VERSIONS["AddPartitionsToTxn"][0], max_version=VERSIONS["AddPartitionsToTxn"][1],
          fail=_add_partitions_fail, available=serves_transactions)
def add_partitions_to_txn(ctx: RequestContext, req: Any) -> None:
    """AddPartitionsToTxn v0-3 (the client's form): the partitions join the producer's transaction."""
    wanted = _add_partitions_wanted(req)
    tid = req.v3_and_below_transactional_id
    if not tid:
        return _add_partitions_fail(ctx, req, codec.INVALID_REQUEST)
    unknown = {tp for tp in wanted if not _known_partition(ctx, *tp)}
    if unknown:
        return _add_partitions_reply(ctx, [(t, p, codec.UNKNOWN_TOPIC_OR_PARTITION if (t, p) in unknown
                                            else codec.OPERATION_NOT_ATTEMPTED) for t, p in wanted])
    msg = txm.AddPartitionsToTxnRequest(tid, int(req.v3_and_below_producer_id), int(req.v3_and_below_producer_epoch),
                                        tuple(sorted(set(wanted))), ctx.next_corr())

    def done(resp: Any) -> None:
        if resp is None:
            return _add_partitions_fail(ctx, req, codec.COORDINATOR_NOT_AVAILABLE)
        per = {(t, p): err for t, p, err in resp.partition_errors}
        _add_partitions_reply(ctx, [(t, p, error_code(ctx, per.get((t, p), resp.error))) for t, p in wanted])

    guarded_request(ctx, req, msg, done)


# ====================================================================== AddOffsetsToTxn
def _code_only_fail(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code))


@register(api_key=25, min_version=VERSIONS["AddOffsetsToTxn"][0], max_version=VERSIONS["AddOffsetsToTxn"][1],
          fail=_code_only_fail, available=serves_transactions)
def add_offsets_to_txn(ctx: RequestContext, req: Any) -> None:
    """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
    if not req.transactional_id:
        return _code_only_fail(ctx, req, codec.INVALID_REQUEST)
    if not req.group_id:
        return _code_only_fail(ctx, req, groups.INVALID_GROUP_ID)
    if not ctx.cluster.has_offsets_topic():
        # a producer may name a group no consumer has looked up yet (kafka-python's send_offsets_to_transaction
        # with a bare group id): Kafka's brokers always have __consumer_offsets; create it, the client retries
        groups.ensure_offsets_topic(ctx)
        return _code_only_fail(ctx, req, codec.COORDINATOR_NOT_AVAILABLE)
    msg = txm.AddOffsetsToTxnRequest(req.transactional_id, int(req.producer_id), int(req.producer_epoch),
                                     req.group_id, ctx.next_corr())
    guarded_request(ctx, req, msg, lambda resp: _code_only_fail(
        ctx, req, codec.COORDINATOR_NOT_AVAILABLE if resp is None else error_code(ctx, resp.error)))


# =============================================================================== EndTxn
def _end_txn_fail(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1))


@register(api_key=26, min_version=VERSIONS["EndTxn"][0], max_version=VERSIONS["EndTxn"][1],
          fail=_end_txn_fail, available=serves_transactions)
def end_txn(ctx: RequestContext, req: Any) -> None:
    """EndTxn: commit or abort; answered once PrepareCommit/PrepareAbort is in ``__transaction_state``
    (the markers follow). v5: the answer names the producer id and epoch of the next transaction."""
    if not req.transactional_id:
        return _end_txn_fail(ctx, req, codec.INVALID_REQUEST)
    tv = 2 if ctx.api_version >= END_TXN_EPOCH_BUMP_VERSION else 0
    msg = txm.EndTxnRequest(req.transactional_id, int(req.producer_id), int(req.producer_epoch), bool(req.committed),
                            ctx.next_corr(), client_transaction_version=tv)

    def done(resp: Any) -> None:
        if resp is None:
            return _end_txn_fail(ctx, req, codec.COORDINATOR_NOT_AVAILABLE)
        if resp.error is not None:
            return _end_txn_fail(ctx, req, error_code(ctx, resp.error))
        ctx.reply(ctx.response(throttle_time_ms=0, error_code=NONE, producer_id=resp.producer_id,
                               producer_epoch=resp.producer_epoch))

    guarded_request(ctx, req, msg, done)


# ====================================================================== TxnOffsetCommit
def _txn_commit_reply(ctx: RequestContext, rows: List[Tuple[str, int, int]]) -> None:
    tcls = ctx.response_class.TxnOffsetCommitResponseTopic
    pcls = tcls.TxnOffsetCommitResponsePartition
    by_topic: Dict[str, List[Any]] = {}
    for t, p, code in rows:
        if ctx.api_version < 2 and code == codec.ERROR_CODES["COORDINATOR_LOAD_IN_PROGRESS"]:
            code = codec.COORDINATOR_NOT_AVAILABLE  # Kafka's answer to clients before KAFKA-7296
        by_topic.setdefault(t, []).append(pcls(partition_index=p, error_code=code))
    ctx.reply(ctx.response(throttle_time_ms=0, topics=[tcls(name=t, partitions=ps) for t, ps in by_topic.items()]))


def _txn_commit_fail(ctx: RequestContext, req: Any, code: int) -> None:
    _txn_commit_reply(ctx, [(t.name, p.partition_index, code) for t in (req.topics or []) for p in (t.partitions or [])])


@register(api_key=28, min_version=VERSIONS["TxnOffsetCommit"][0], max_version=VERSIONS["TxnOffsetCommit"][1],
          fail=_txn_commit_fail, available=serves_transactions)
def txn_offset_commit(ctx: RequestContext, req: Any) -> None:
    """TxnOffsetCommit: offsets committed inside the transaction, to the group coordinator on this
    listener's broker; they become the group's when the COMMIT marker reaches its offsets partition.
    v3+ carries the consumer's generation, member id and instance id (KIP-447). Unknown partitions and
    metadata over :data:`groups.OFFSET_METADATA_MAX_BYTES` get their own error, as in OffsetCommit."""
    v = ctx.api_version
    if not req.transactional_id:
        return _txn_commit_fail(ctx, req, codec.INVALID_REQUEST)
    if not req.group_id:
        return _txn_commit_fail(ctx, req, groups.INVALID_GROUP_ID)
    rows: List[Tuple[str, int, int]] = []
    offsets: List[Tuple[str, int, int, int, str]] = []
    for t in req.topics or []:
        for p in t.partitions or []:
            meta = p.committed_metadata or ""
            if not _known_partition(ctx, t.name, p.partition_index):
                rows.append((t.name, p.partition_index, codec.UNKNOWN_TOPIC_OR_PARTITION))
            elif len(meta.encode("utf-8")) > groups.OFFSET_METADATA_MAX_BYTES:
                rows.append((t.name, p.partition_index, groups.OFFSET_METADATA_TOO_LARGE))
            else:
                epoch = p.committed_leader_epoch if v >= 2 and p.committed_leader_epoch is not None else -1
                offsets.append((t.name, p.partition_index, int(p.committed_offset), int(epoch), meta))
    if not offsets:
        return _txn_commit_reply(ctx, rows)
    msg = txm.TxnOffsetCommitRequest(
        req.transactional_id, req.group_id, int(req.producer_id), int(req.producer_epoch), ctx.next_corr(),
        offsets=tuple(offsets), generation_id=int(req.generation_id) if v >= 3 else gm.NO_GENERATION,
        member_id=(req.member_id or "") if v >= 3 else gm.NO_MEMBER,
        group_instance_id=req.group_instance_id if v >= 3 else None)

    def done(resp: Any) -> None:
        if resp is None:
            code = codec.COORDINATOR_NOT_AVAILABLE
            per: Dict[Tuple[str, int], Any] = {}
        else:
            code = error_code(ctx, resp.error)
            per = {(t, p): err for t, p, err in resp.partition_errors}
        _txn_commit_reply(ctx, rows + [(t, p, error_code(ctx, per[(t, p)]) if (t, p) in per else code)
                                       for t, p, _, _, _ in offsets])

    guarded_request(ctx, req, msg, done, timeout_ms=60_000)


__all__ = ["VERSIONS", "PRODUCER_FENCED_SINCE", "END_TXN_EPOCH_BUMP_VERSION", "serves_transactions", "error_code",
           "init_transactional_producer_id", "produce_request", "produce_error_code"]
