"""The transaction APIs' handlers, frame by frame, against a recording context (no broker): each Kafka
request of every served version becomes the right in-process message of
:mod:`pylog.replication.txn_messages`, and each in-process answer the right Kafka response (encoded
with the schema and decoded back, so a field name or type wrong for a version fails here). Also the
error-code table and the per-version error rules (PRODUCER_FENCED before KIP-588, TRANSACTION_ABORTABLE
on Produce before v11, COORDINATOR_LOAD_IN_PROGRESS before TxnOffsetCommit v2), the advertised versions
and the KIP-890 epoch bump only for EndTxn v5+ (sans-I/O coordinator)."""
from __future__ import annotations

import inspect
import itertools
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS, infer_broker_version_from_api_versions

import pylog.errors as E
import pylog.protocol.handlers  # noqa: F401 - registers every API
from pylog.protocol import codec
from pylog.protocol.api import REGISTRY
from pylog.protocol.handlers import fetch, groups, produce, txn
from pylog.replication import group_messages as gm
from pylog.replication import messages as m
from pylog.replication import txn_messages as txm
from pylog.replication.txn_coordinator import TransactionCoordinator, TxnOutcome
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC

C = codec.ERROR_CODES
TID = "copier-1"


# ----------------------------------------------------------------------------- a recording context
class FakeCluster:
    def __init__(self, topics: Dict[str, int], serves: bool = True):
        self.metadata = SimpleNamespace(topics={t: SimpleNamespace(partitions=n) for t, n in topics.items()})
        self.ensured = 0
        self.offsets_topic = True
        self.ensured_offsets = 0
        if serves:
            self.ensure_transaction_state_topic = self._ensure

    def _ensure(self) -> None:
        self.ensured += 1

    def has_offsets_topic(self) -> bool:
        return self.offsets_topic

    def ensure_offsets_topic(self) -> None:
        self.ensured_offsets += 1


class FakeServer:
    def __init__(self, ctx: "Ctx"):
        self.ctx = ctx
        self.ports = {2: 9999}

    def close_connection(self, conn: Any, why: str) -> None:
        self.ctx.closed.append(why)

    def address_of(self, node: int) -> Tuple[str, int]:
        return "127.0.0.1", self.ports[node]


class Ctx:
    """The part of :class:`pylog.protocol.api.RequestContext` the handlers use; records what they send
    (``sent``: (message, callback)) and what they answer (``replies``: decoded from the encoded bytes)."""

    def __init__(self, api_key: int, version: int, cluster: Optional[FakeCluster] = None):
        self.api_key, self.api_version = api_key, version
        self.spec = REGISTRY[api_key]
        self.cluster = cluster if cluster is not None else FakeCluster({"out": 3, "in": 2})
        self.broker_id, self.peer, self.correlation_id, self.replied = 0, "127.0.0.1:1", 7, False
        self.server = FakeServer(self)
        self.conn = None
        self.node = None
        self.closed: List[str] = []
        self.sent: List[Tuple[Any, Callable[[Any], None]]] = []
        self.replies: List[Any] = []
        self.blocking: List[Any] = []
        self._corr = itertools.count(100)

    @property
    def response_class(self) -> Any:
        return codec.response_class(self.api_key)

    def response(self, **fields: Any) -> Any:
        return self.response_class(version=self.api_version, **fields)

    def request(self, msg: Any, callback: Callable[[Any], None], *, dst: Optional[int] = None,
                timeout_ms: int = 30_000) -> None:
        assert dst in (None, self.broker_id)
        self.sent.append((msg, callback))

    def next_corr(self) -> int:
        return next(self._corr)

    def run_blocking(self, fn: Callable[[], Any], then: Callable[[Any, Optional[BaseException]], None]) -> None:
        self.blocking.append(fn)
        then(fn(), None)

    def reply(self, resp: Any) -> None:
        assert not self.replied, "answered twice"
        self.replied = True
        data = codec.encode_response(resp, self.correlation_id)  # the schema of this version accepts it
        cls = self.response_class
        self.replies.append(cls.decode(data[4:], version=self.api_version, header=True))

    def no_reply(self) -> None:
        self.replied = True
        self.replies.append(None)

    @property
    def answer(self) -> Any:
        assert len(self.replies) == 1, self.replies
        return self.replies[0]


def call(api_key: int, version: int, cluster: Optional[FakeCluster] = None, **fields: Any) -> Ctx:
    """Encode a request as a client would, decode it as the server does, run the handler."""
    cls = codec.request_class(api_key)
    req = cls(version=version, **fields)
    req.with_header(correlation_id=7, client_id="t")
    frame = bytes(req.encode(header=True, framed=True))[4:]
    ctx = Ctx(api_key, version, cluster)
    REGISTRY[api_key].handler(ctx, codec.decode_request(api_key, version, frame))  # type: ignore[arg-type]
    return ctx


def only_sent(ctx: Ctx) -> Tuple[Any, Callable[[Any], None]]:
    assert len(ctx.sent) == 1, ctx.sent
    return ctx.sent[0]


# ----------------------------------------------------------------------------------- error codes
def test_every_pylog_error_named_after_a_kafka_error_has_its_code() -> None:
    named = [c for c in vars(E).values() if inspect.isclass(c) and issubclass(c, E.PylogError) and c.kafka_name]
    checked = 0
    for cls in named:
        if cls.kafka_name in C:
            assert codec.error_code_of(cls) == C[cls.kafka_name], cls
            assert codec.error_code_of(cls("x")) == C[cls.kafka_name], cls
            checked += 1
        else:  # client-side only: Kafka has no code for them
            assert cls.kafka_name in ("TRANSACTION_ABORTED", "PRODUCER_CLOSED"), cls
    assert checked >= 50


@pytest.mark.parametrize("err, name", [
    (E.ProducerFencedError, "PRODUCER_FENCED"), (E.InvalidTxnStateError, "INVALID_TXN_STATE"),
    (E.TransactionAbortableError, "TRANSACTION_ABORTABLE"), (E.ConcurrentTransactionsError, "CONCURRENT_TRANSACTIONS"),
    (E.TransactionCoordinatorFencedError, "TRANSACTION_COORDINATOR_FENCED"),
    (E.InvalidTransactionTimeoutError, "INVALID_TRANSACTION_TIMEOUT"),
    (E.InvalidProducerIdMappingError, "INVALID_PRODUCER_ID_MAPPING"), (E.InvalidRequestError, "INVALID_REQUEST"),
    (E.TransactionalIdAuthorizationFailedError, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    (E.InvalidProducerEpochError, "INVALID_PRODUCER_EPOCH"),
])
def test_transaction_errors_codes(err: type, name: str) -> None:
    assert codec.error_code_of(err) == C[name]
    assert C[name] == {"PRODUCER_FENCED": 90, "INVALID_TXN_STATE": 48, "TRANSACTION_ABORTABLE": 120,
                       "CONCURRENT_TRANSACTIONS": 51, "TRANSACTION_COORDINATOR_FENCED": 52,
                       "INVALID_TRANSACTION_TIMEOUT": 50, "INVALID_PRODUCER_ID_MAPPING": 49, "INVALID_REQUEST": 42,
                       "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53, "INVALID_PRODUCER_EPOCH": 47}[name]


@pytest.mark.parametrize("api_key, first", sorted(txn.PRODUCER_FENCED_SINCE.items()))
def test_producer_fenced_is_invalid_producer_epoch_before_kip588(api_key: int, first: int) -> None:
    for v in range(REGISTRY[api_key].min_version, REGISTRY[api_key].max_version + 1):
        want = C["PRODUCER_FENCED"] if v >= first else C["INVALID_PRODUCER_EPOCH"]
        assert txn.error_code(Ctx(api_key, v), E.ProducerFencedError) == want
        assert txn.error_code(Ctx(api_key, v), E.ConcurrentTransactionsError) == C["CONCURRENT_TRANSACTIONS"]


def test_produce_answers_the_verification_errors_as_kafka_does_before_produce_v11() -> None:
    assert REGISTRY[0].max_version < 11
    assert txn.produce_error_code(E.TransactionAbortableError) == C["INVALID_TXN_STATE"]
    assert txn.produce_error_code(E.ProducerFencedError) == C["INVALID_PRODUCER_EPOCH"]
    assert txn.produce_error_code(E.NotLeaderError) == C["NOT_LEADER_OR_FOLLOWER"]
    assert txn.produce_error_code(None) == 0


# -------------------------------------------------------------------------------------- versions
def test_served_versions_are_kafka_2_8s_and_kafka_python_still_infers_2_8() -> None:
    k28 = BROKER_API_VERSIONS[(2, 8)]
    for key in (22, 24, 25, 26, 28):
        spec = REGISTRY[key]
        assert (spec.min_version, spec.max_version) == k28[key], spec.name
    assert 27 not in REGISTRY  # WriteTxnMarkers is broker to broker, in process
    served = {k: (s.min_version, s.max_version) for k, s in REGISTRY.items()}
    assert infer_broker_version_from_api_versions(served) == (2, 8)


def test_transaction_apis_are_advertised_only_when_the_cluster_hosts_coordinators() -> None:
    for key in (24, 25, 26, 28):
        assert REGISTRY[key].available is not None
        assert REGISTRY[key].available(FakeCluster({}, serves=True))  # type: ignore[arg-type]
        assert not REGISTRY[key].available(FakeCluster({}, serves=False))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- FindCoordinator
@pytest.mark.parametrize("version", [1, 2, 3])
def test_find_coordinator_type_1_asks_the_broker_for_the_transaction_coordinator(version: int) -> None:
    cl = FakeCluster({TRANSACTION_STATE_TOPIC: 5})
    ctx = call(10, version, cl, key=TID, key_type=1)
    msg, cb = only_sent(ctx)
    assert type(msg) is txm.FindTransactionCoordinatorRequest and msg.transactional_id == TID
    cb(gm.FindCoordinatorResponse(msg.correlation_id, node_id=2))
    assert (ctx.answer.error_code, ctx.answer.node_id, ctx.answer.port) == (0, 2, 9999)


def test_find_coordinator_type_1_creates_the_transaction_state_topic_first() -> None:
    cl = FakeCluster({})
    ctx = call(10, 3, cl, key=TID, key_type=1)
    assert not ctx.sent and cl.ensured == 1
    assert ctx.answer.error_code == C["COORDINATOR_NOT_AVAILABLE"]


@pytest.mark.parametrize("error, name", [(E.NotCoordinatorError, "NOT_COORDINATOR"),
                                         (E.CoordinatorLoadInProgressError, "COORDINATOR_LOAD_IN_PROGRESS"),
                                         (None, "COORDINATOR_NOT_AVAILABLE")])
def test_find_coordinator_type_1_errors(error: Any, name: str) -> None:
    ctx = call(10, 2, FakeCluster({TRANSACTION_STATE_TOPIC: 5}), key=TID, key_type=1)
    msg, cb = only_sent(ctx)
    cb(None if error is None else gm.FindCoordinatorResponse(msg.correlation_id, error=error))
    assert ctx.answer.error_code == C[name] and ctx.answer.node_id == -1


def test_find_coordinator_type_1_without_transactions_is_unauthorized() -> None:
    ctx = call(10, 3, FakeCluster({}, serves=False), key=TID, key_type=1)
    assert not ctx.sent and ctx.answer.error_code == C["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]
    ctx = call(10, 3, FakeCluster({TRANSACTION_STATE_TOPIC: 5}), key="", key_type=1)
    assert not ctx.sent and ctx.answer.error_code == C["INVALID_REQUEST"]


# -------------------------------------------------------------------------------- InitProducerId
@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_init_producer_id_with_a_transactional_id(version: int) -> None:
    ctx = call(22, version, transactional_id=TID, transaction_timeout_ms=45_000)
    msg, cb = only_sent(ctx)
    assert type(msg) is txm.InitProducerIdRequest
    assert (msg.transactional_id, msg.transaction_timeout_ms, msg.producer_id, msg.producer_epoch) == (TID, 45_000, -1, -1)
    cb(m.InitProducerIdResponse(msg.correlation_id, producer_id=4000, producer_epoch=3))
    assert (ctx.answer.error_code, ctx.answer.producer_id, ctx.answer.producer_epoch) == (0, 4000, 3)


@pytest.mark.parametrize("version", [3, 4])
def test_init_producer_id_kip360_epoch_bump_request(version: int) -> None:
    ctx = call(22, version, transactional_id=TID, transaction_timeout_ms=1000, producer_id=4000, producer_epoch=3)
    msg, cb = only_sent(ctx)
    assert (msg.producer_id, msg.producer_epoch) == (4000, 3)
    cb(m.InitProducerIdResponse(msg.correlation_id, error=E.ProducerFencedError))
    want = "PRODUCER_FENCED" if version >= 4 else "INVALID_PRODUCER_EPOCH"
    assert (ctx.answer.error_code, ctx.answer.producer_id, ctx.answer.producer_epoch) == (C[want], -1, -1)
    bad = call(22, version, transactional_id=TID, transaction_timeout_ms=1000, producer_id=4000, producer_epoch=-1)
    assert not bad.sent and bad.answer.error_code == C["INVALID_REQUEST"]


def test_init_producer_id_errors_and_the_idempotent_path() -> None:
    for error, name in [(E.ConcurrentTransactionsError, "CONCURRENT_TRANSACTIONS"),
                        (E.InvalidTransactionTimeoutError, "INVALID_TRANSACTION_TIMEOUT"),
                        (E.NotCoordinatorError, "NOT_COORDINATOR")]:
        ctx = call(22, 4, transactional_id=TID, transaction_timeout_ms=1)
        msg, cb = only_sent(ctx)
        cb(m.InitProducerIdResponse(msg.correlation_id, error=error))
        assert ctx.answer.error_code == C[name]
    ctx = call(22, 4, transactional_id=TID, transaction_timeout_ms=1)
    only_sent(ctx)[1](None)  # the broker did not answer: find the coordinator again
    assert ctx.answer.error_code == C["COORDINATOR_NOT_AVAILABLE"]
    idem = call(22, 4, transactional_id=None, transaction_timeout_ms=-1)
    msg, _ = only_sent(idem)
    assert type(msg) is m.InitProducerIdRequest and msg.transactional_id is None
    no = call(22, 4, FakeCluster({}, serves=False), transactional_id=TID, transaction_timeout_ms=1)
    assert not no.sent and no.answer.error_code == C["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]
    empty = call(22, 4, transactional_id="", transaction_timeout_ms=1)
    assert not empty.sent and empty.answer.error_code == C["INVALID_REQUEST"]


# ---------------------------------------------------------------------------- AddPartitionsToTxn
def _apt(version: int, topics: Dict[str, List[int]], cluster: Optional[FakeCluster] = None) -> Ctx:
    T = codec.request_class(24).AddPartitionsToTxnTopic
    return call(24, version, cluster, v3_and_below_transactional_id=TID, v3_and_below_producer_id=4000,
                v3_and_below_producer_epoch=2,
                v3_and_below_topics=[T(version=version, name=t, partitions=ps) for t, ps in topics.items()])


def _apt_codes(ctx: Ctx) -> Dict[Tuple[str, int], int]:
    return {(t.name, p.partition_index): p.partition_error_code
            for t in ctx.answer.results_by_topic_v3_and_below for p in t.results_by_partition}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_to_txn(version: int) -> None:
    ctx = _apt(version, {"out": [2, 0], "in": [1]})
    msg, cb = only_sent(ctx)
    assert type(msg) is txm.AddPartitionsToTxnRequest and not msg.verify_only
    assert (msg.transactional_id, msg.producer_id, msg.producer_epoch) == (TID, 4000, 2)
    assert msg.partitions == (("in", 1), ("out", 0), ("out", 2))
    cb(txm.AddPartitionsToTxnResponse(msg.correlation_id))
    assert _apt_codes(ctx) == {("out", 2): 0, ("out", 0): 0, ("in", 1): 0}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_to_txn_error_goes_to_every_partition(version: int) -> None:
    ctx = _apt(version, {"out": [0, 1]})
    msg, cb = only_sent(ctx)
    cb(txm.AddPartitionsToTxnResponse(msg.correlation_id, error=E.ProducerFencedError))
    fenced = C["PRODUCER_FENCED"] if version >= 2 else C["INVALID_PRODUCER_EPOCH"]
    assert _apt_codes(ctx) == {("out", 0): fenced, ("out", 1): fenced}
    ctx = _apt(version, {"out": [0]})
    only_sent(ctx)[1](None)
    assert _apt_codes(ctx) == {("out", 0): C["COORDINATOR_NOT_AVAILABLE"]}


def test_add_partitions_to_txn_unknown_partition_fails_the_request_as_kafka() -> None:
    ctx = _apt(3, {"out": [0, 3], "nope": [0]})
    assert not ctx.sent
    assert _apt_codes(ctx) == {("out", 0): C["OPERATION_NOT_ATTEMPTED"], ("out", 3): C["UNKNOWN_TOPIC_OR_PARTITION"],
                               ("nope", 0): C["UNKNOWN_TOPIC_OR_PARTITION"]}


# ------------------------------------------------------------------------------- AddOffsetsToTxn
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_offsets_to_txn(version: int) -> None:
    ctx = call(25, version, transactional_id=TID, producer_id=4000, producer_epoch=2, group_id="g")
    msg, cb = only_sent(ctx)
    assert type(msg) is txm.AddOffsetsToTxnRequest
    assert (msg.transactional_id, msg.producer_id, msg.producer_epoch, msg.group_id) == (TID, 4000, 2, "g")
    cb(txm.AddOffsetsToTxnResponse(msg.correlation_id, error=E.ProducerFencedError))
    assert ctx.answer.error_code == (C["PRODUCER_FENCED"] if version >= 2 else C["INVALID_PRODUCER_EPOCH"])
    ok = call(25, version, transactional_id=TID, producer_id=4000, producer_epoch=2, group_id="g")
    only_sent(ok)[1](txm.AddOffsetsToTxnResponse(0))
    assert ok.answer.error_code == 0
    empty = call(25, version, transactional_id=TID, producer_id=4000, producer_epoch=2, group_id="")
    assert not empty.sent and empty.answer.error_code == C["INVALID_GROUP_ID"]


def test_add_offsets_to_txn_creates_the_offsets_topic_first() -> None:
    """kafka-python may send offsets for a group no consumer has looked up: Kafka always has the topic."""
    cl = FakeCluster({"in": 2})
    cl.offsets_topic = False
    ctx = call(25, 3, cl, transactional_id=TID, producer_id=4000, producer_epoch=2, group_id="g")
    assert not ctx.sent and cl.ensured_offsets == 1
    assert ctx.answer.error_code == C["COORDINATOR_NOT_AVAILABLE"]  # retriable: the client asks again


# ---------------------------------------------------------------------------------------- EndTxn
@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn(version: int, committed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    monkeypatch.setitem(REGISTRY, 26, dataclasses.replace(REGISTRY[26], max_version=5))  # v4-5: spoken, not served
    ctx = call(26, version, transactional_id=TID, producer_id=4000, producer_epoch=2, committed=committed)
    msg, cb = only_sent(ctx)
    assert type(msg) is txm.EndTxnRequest
    assert (msg.transactional_id, msg.producer_id, msg.producer_epoch, msg.committed) == (TID, 4000, 2, committed)
    # Kafka's clientTransactionVersion: the KIP-890 bump only for a client that reads v5's answer
    assert msg.client_transaction_version == (2 if version >= 5 else 0)
    cb(txm.EndTxnResponse(msg.correlation_id, producer_id=4000, producer_epoch=3))
    assert ctx.answer.error_code == 0
    if version >= 5:
        assert (ctx.answer.producer_id, ctx.answer.producer_epoch) == (4000, 3)
    for error, name in [(E.ProducerFencedError, "PRODUCER_FENCED" if version >= 2 else "INVALID_PRODUCER_EPOCH"),
                        (E.InvalidTxnStateError, "INVALID_TXN_STATE"),
                        (E.ConcurrentTransactionsError, "CONCURRENT_TRANSACTIONS"),
                        (E.InvalidProducerIdMappingError, "INVALID_PRODUCER_ID_MAPPING")]:
        bad = call(26, version, transactional_id=TID, producer_id=4000, producer_epoch=2, committed=committed)
        only_sent(bad)[1](txm.EndTxnResponse(0, error=error))
        assert bad.answer.error_code == C[name]


# ------------------------------------------------------------------------------- TxnOffsetCommit
def _toc(version: int, parts: List[Tuple[str, int, int, str]], group: str = "g") -> Ctx:
    T = codec.request_class(28).TxnOffsetCommitRequestTopic
    P = T.TxnOffsetCommitRequestPartition
    by: Dict[str, List[Any]] = {}
    for t, p, off, meta in parts:
        by.setdefault(t, []).append(P(version=version, partition_index=p, committed_offset=off,
                                      committed_leader_epoch=4, committed_metadata=meta))
    extra: Dict[str, Any] = dict(generation_id=6, member_id="m-1", group_instance_id="i-1") if version >= 3 else {}
    return call(28, version, transactional_id=TID, group_id=group, producer_id=4000, producer_epoch=2,
                topics=[T(version=version, name=t, partitions=ps) for t, ps in by.items()], **extra)


def _toc_codes(ctx: Ctx) -> Dict[Tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in ctx.answer.topics for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_txn_offset_commit(version: int) -> None:
    ctx = _toc(version, [("in", 0, 10, "a"), ("in", 1, 20, ""), ("out", 9, 1, "")])
    msg, cb = only_sent(ctx)
    assert type(msg) is txm.TxnOffsetCommitRequest
    assert (msg.transactional_id, msg.group_id, msg.producer_id, msg.producer_epoch) == (TID, "g", 4000, 2)
    epoch = 4 if version >= 2 else -1
    assert msg.offsets == (("in", 0, 10, epoch, "a"), ("in", 1, 20, epoch, ""))
    if version >= 3:
        assert (msg.generation_id, msg.member_id, msg.group_instance_id) == (6, "m-1", "i-1")
    else:
        assert (msg.generation_id, msg.member_id, msg.group_instance_id) == (-1, "", None)
    cb(txm.TxnOffsetCommitResponse(msg.correlation_id, partition_errors=(("in", 1, E.UnknownMemberIdError),)))
    assert _toc_codes(ctx) == {("in", 0): 0, ("in", 1): C["UNKNOWN_MEMBER_ID"],
                               ("out", 9): C["UNKNOWN_TOPIC_OR_PARTITION"]}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_txn_offset_commit_errors(version: int) -> None:
    ctx = _toc(version, [("in", 0, 10, ""), ("in", 1, 10, "x" * 5000)])
    msg, cb = only_sent(ctx)
    assert [o[:2] for o in msg.offsets] == [("in", 0)]
    cb(txm.TxnOffsetCommitResponse(msg.correlation_id, error=E.CoordinatorLoadInProgressError))
    loading = C["COORDINATOR_LOAD_IN_PROGRESS"] if version >= 2 else C["COORDINATOR_NOT_AVAILABLE"]
    assert _toc_codes(ctx) == {("in", 0): loading, ("in", 1): C["OFFSET_METADATA_TOO_LARGE"]}
    gone = _toc(version, [("in", 0, 10, "")])
    only_sent(gone)[1](None)
    assert _toc_codes(gone) == {("in", 0): C["COORDINATOR_NOT_AVAILABLE"]}
    empty = _toc(version, [("in", 0, 10, "")], group="")
    assert not empty.sent and _toc_codes(empty) == {("in", 0): C["INVALID_GROUP_ID"]}


# ----------------------------------------------------------------------------- Produce, Fetch
def test_produce_of_a_transactional_producer_names_its_transactional_id() -> None:
    T = codec.request_class(0).TopicProduceData
    P = T.PartitionProduceData
    ctx = call(0, 8, transactional_id=TID, acks=-1, timeout_ms=1000,
               topic_data=[T(version=8, name="out", partition_data=[P(version=8, index=1, records=b"batch")])])
    msg, cb = only_sent(ctx)
    assert type(msg) is m.ProduceRequest and (msg.topic, msg.partition, msg.records) == ("out", 1, b"batch")
    assert msg.transactional_id == TID
    cb(m.ProduceResponse("out", 1, msg.correlation_id, error=E.TransactionAbortableError))
    [t] = ctx.answer.responses
    assert t.partition_responses[0].error_code == C["INVALID_TXN_STATE"]
    none = call(0, 8, FakeCluster({"out": 3}, serves=False), transactional_id=TID, acks=-1, timeout_ms=1000,
                topic_data=[T(version=8, name="out", partition_data=[P(version=8, index=1, records=b"b")])])
    assert not none.sent
    assert none.answer.responses[0].partition_responses[0].error_code == C["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]


def _fetch(version: int, isolation: int) -> Ctx:
    T = codec.request_class(1).FetchTopic
    P = T.FetchPartition
    ctx = call(1, version, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation,
               topics=[T(version=version, topic="out", partitions=[
                   P(version=version, partition=0, fetch_offset=5, partition_max_bytes=1 << 20)])])
    return ctx


@pytest.mark.parametrize("version", [4, 7, 11, 12])
@pytest.mark.parametrize("isolation", [0, 1])
def test_fetch_answers_the_leaders_last_stable_offset_and_aborted_transactions(version: int, isolation: int) -> None:
    ctx = _fetch(version, isolation)
    msg, cb = only_sent(ctx)
    assert type(msg) is m.FetchRequest and msg.replica_id == -1
    assert msg.isolation_level == isolation
    cb(m.FetchResponse("out", 0, msg.correlation_id, records=b"", high_watermark=40, log_start_offset=0,
                       last_stable_offset=30, aborted_transactions=((4000, 7), (4001, 12))))
    [t] = ctx.answer.responses
    [p] = t.partitions
    assert (p.high_watermark, p.last_stable_offset) == (40, 30)
    if isolation == 1:
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(4000, 7), (4001, 12)]
    else:
        assert p.aborted_transactions is None  # null for read_uncommitted, as Kafka
    # a leader that names no LSO (read_uncommitted): the high watermark is answered
    ctx = _fetch(version, isolation)
    msg, cb = only_sent(ctx)
    cb(m.FetchResponse("out", 0, msg.correlation_id, records=b"", high_watermark=40, log_start_offset=0))
    assert ctx.answer.responses[0].partitions[0].last_stable_offset == 40


# --------------------------------------------------------------------------- OffsetFetch (KIP-447)
@pytest.mark.parametrize("version", [1, 5, 6, 7])
def test_offset_fetch_require_stable_and_unstable_partitions(version: int) -> None:
    T = codec.request_class(9).OffsetFetchRequestTopic
    extra: Dict[str, Any] = {"require_stable": True} if version >= 7 else {}
    ctx = call(9, version, group_id="g", topics=[T(version=version, name="in", partition_indexes=[0, 1])], **extra)
    msg, cb = only_sent(ctx)
    assert type(msg) is gm.OffsetFetchRequest and msg.require_stable == (version >= 7)
    cb(gm.OffsetFetchResponse(msg.correlation_id, offsets=(("in", 0, 12, 3, "m"),),
                              partition_errors=(("in", 1, E.UnstableOffsetCommitError),)))
    rows = {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in ctx.answer.topics
            for p in t.partitions}
    assert rows == {("in", 0): (12, 0), ("in", 1): (-1, C["UNSTABLE_OFFSET_COMMIT"])}


# ------------------------------------------------------------------ the epoch bump per EndTxn version
class _Coord:
    def __init__(self) -> None:
        ids = itertools.count(1000)
        self.c = TransactionCoordinator(lambda: next(ids), partitions=1, transaction_version=2)
        self.c.load(0, 1, [], 0)

    def settle(self, out: TxnOutcome) -> TxnOutcome:
        reply = out if out.reply else None
        todo = [out]
        while todo:
            o = todo.pop(0)
            if o.append is not None:
                r = self.c.on_log_append(o.transactional_id, None, 0)
                reply = reply or (r if r.reply else None)
                todo.append(r)
            todo.extend(self.c.on_marker_written(o.transactional_id, mk.topic, mk.partition, 0) for mk in o.markers)
        assert reply is not None and reply.error is None, reply and reply.error
        return reply


def test_end_txn_of_an_old_client_version_keeps_the_epoch_a_v5_one_bumps_it() -> None:
    """A librdkafka (EndTxn v1) or kafka-python (v3) producer keeps its epoch after a commit: with the
    bump its next AddPartitionsToTxn would be fenced. EndTxn v5 (client_transaction_version 2) bumps."""
    k = _Coord()
    p = k.settle(k.c.init_producer_id(TID, 60_000, 0))
    pid, epoch = p.producer_id, p.producer_epoch
    for round_ in range(3):  # several transactions at one epoch, as a TV0 client runs them
        k.settle(k.c.add_partitions(TID, pid, epoch, [("out", round_)], 0))
        r = k.settle(k.c.end_txn(TID, pid, epoch, round_ != 1, 0, client_transaction_version=0))
        assert (r.producer_id, r.producer_epoch) == (pid, epoch)
        assert k.c.describe(TID).producer_epoch == epoch  # type: ignore[union-attr]
    again = k.settle(k.c.end_txn(TID, pid, epoch, True, 0, client_transaction_version=0))  # retry of the last
    assert again.producer_epoch == epoch
    k.settle(k.c.add_partitions(TID, pid, epoch, [("out", 0)], 0))
    r = k.settle(k.c.end_txn(TID, pid, epoch, True, 0, client_transaction_version=2))
    assert r.producer_epoch == epoch + 1 and k.c.describe(TID).producer_epoch == epoch + 1  # type: ignore[union-attr]
    r = k.settle(k.c.end_txn(TID, pid, epoch, True, 0, client_transaction_version=2))  # KIP-890 retry: epoch - 1
    assert r.producer_epoch == epoch + 1
    # no client_transaction_version: the coordinator's own version (pylog's client), as before
    k.settle(k.c.add_partitions(TID, pid, epoch + 1, [("out", 0)], 0))
    assert k.settle(k.c.end_txn(TID, pid, epoch + 1, False, 0)).producer_epoch == epoch + 2
