"""The client transaction manager (pylog/client/txn_manager.py): Kafka's TransactionManager rules.

Table-driven: every state transition (allowed and refused), every user call in
every state (the new state or the exact error), the response-error
classification per request; then the manager driven against the real
TransactionCoordinator (both sans-I/O): commit, abort, fencing by a second
producer with the same transactional id, and a delayed EndTxn of a finished
transaction that must not touch the next one (KIP-890).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from pylog.client import txn_manager as tmod
from pylog.client.txn_manager import (
    ADD_OFFSETS,
    ADD_PARTITIONS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
    ErrorKind,
    TransactionManager,
    TxnRequest,
    TxnResult,
    TxnState,
    classify,
)
from pylog.client.types import OffsetAndMetadata, TopicPartition
from pylog.errors import (
    CommitFailedError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidConfigurationError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    NotLeaderError,
    ProducerFencedError,
    PylogError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from pylog.replication import group_messages as gm
from pylog.replication import txn_messages as tm
from pylog.replication.messages import InitProducerIdResponse
from pylog.replication.offsets_topic import OFFSETS_TOPIC
from pylog.replication.txn_coordinator import TransactionCoordinator, TxnOutcome
from pylog.replication.txn_log import TransactionState

S = TxnState
TID = "copier-1"


# ---- a scripted coordinator ----------------------------------------------------------------------
class Script:
    """Answers the manager's requests with success (producer 7, epoch 0, bumped on each EndTxn)."""

    def __init__(self) -> None:
        self.now = 0
        self.corr = 0
        self.sent: List[TxnRequest] = []
        self.epoch = 0

    def step(self, m: TransactionManager, error: Optional[type] = None, incomplete: bool = False,
             **fields: Any) -> Optional[TxnRequest]:
        """Send the next request and answer it (with ``error``); None when there is none."""
        self.corr += 1
        req = m.next_request(self.now, self.corr, incomplete)
        if req is None:
            return None
        self.sent.append(req)
        assert m.on_response(self.answer(req, error, **fields), self.now)
        m._check()
        return req

    def answer(self, req: TxnRequest, error: Optional[type], **fields: Any) -> Any:
        c = req.message.correlation_id
        if req.kind == FIND_COORDINATOR:
            return gm.FindCoordinatorResponse(c, error=error, node_id=-1 if error else 0)
        if req.kind == INIT_PRODUCER_ID:
            return InitProducerIdResponse(c, error=error, producer_id=-1 if error else 7,
                                          producer_epoch=-1 if error else self.epoch)
        if req.kind == ADD_PARTITIONS:
            return tm.AddPartitionsToTxnResponse(c, error=error, **fields)
        if req.kind == ADD_OFFSETS:
            return tm.AddOffsetsToTxnResponse(c, error=error)
        if req.kind == TXN_OFFSET_COMMIT:
            return tm.TxnOffsetCommitResponse(c, error=error, **fields)
        if error is None:
            self.epoch += 1
            return tm.EndTxnResponse(c, producer_id=7, producer_epoch=self.epoch)
        return tm.EndTxnResponse(c, error=error)

    def run(self, m: TransactionManager, incomplete: bool = False) -> List[int]:
        """Answer everything with success; the kinds sent."""
        kinds = []
        while True:
            req = self.step(m, incomplete=incomplete)
            if req is None:
                return kinds
            kinds.append(req.kind)


def reach(state: TxnState) -> Tuple[TransactionManager, Script]:
    """A manager in ``state``, reached through the public calls and scripted answers."""
    m, s = TransactionManager(TID), Script()
    if state == S.UNINITIALIZED:
        return m, s
    m.init_transactions()
    if state == S.INITIALIZING:
        return m, s
    s.run(m)
    if state == S.READY:
        return m, s
    m.begin_transaction()
    m.maybe_add_partition(("out", 0))
    s.run(m)
    if state == S.IN_TRANSACTION:
        return m, s
    if state == S.COMMITTING_TRANSACTION:
        m.commit_transaction()
    elif state == S.ABORTING_TRANSACTION:
        m.abort_transaction()
    elif state == S.ABORTABLE_ERROR:
        m.maybe_add_partition(("out", 1))
        s.step(m, TransactionAbortableError)
    elif state == S.FATAL_ERROR:
        m.maybe_add_partition(("out", 1))
        s.step(m, ProducerFencedError)
    assert m.state == state
    m._check()
    return m, s


# ---- every transition ----------------------------------------------------------------------------
#: Kafka's TransactionManager.State.isTransitionValid (3.7-3.9), written out independently of the module:
#: target -> the sources it may be entered from
KAFKA_ALLOWED = {
    S.UNINITIALIZED: {S.READY, S.ABORTABLE_ERROR},
    S.INITIALIZING: {S.UNINITIALIZED, S.ABORTING_TRANSACTION},
    S.READY: {S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
    S.IN_TRANSACTION: {S.READY},
    S.COMMITTING_TRANSACTION: {S.IN_TRANSACTION},
    S.ABORTING_TRANSACTION: {S.IN_TRANSACTION, S.ABORTABLE_ERROR},
    S.ABORTABLE_ERROR: {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING},
    S.FATAL_ERROR: set(TxnState),
}


@pytest.mark.parametrize("target", list(TxnState), ids=lambda s: s.name)
@pytest.mark.parametrize("source", list(TxnState), ids=lambda s: s.name)
def test_every_state_transition(source: TxnState, target: TxnState) -> None:
    m = TransactionManager(TID)
    m.state = source
    if source in KAFKA_ALLOWED[target]:
        m._transition(target, "test")
        assert m.state == target
    else:
        with pytest.raises(InvalidTxnStateError, match=f"cannot go from {source.name} to {target.name}"):
            m._transition(target, "test")
        assert m.state == source


# ---- every user call in every state --------------------------------------------------------------
OPS: Dict[str, Callable[[TransactionManager], Any]] = {
    "init": lambda m: m.init_transactions(),
    "begin": lambda m: m.begin_transaction(),
    "send": lambda m: m.maybe_add_partition(TopicPartition("out", 2)),
    "send_offsets": lambda m: m.send_offsets_to_transaction({("in", 0): 5}, tm.ConsumerGroupMetadata("g", 3, "m-1")),
    "commit": lambda m: m.commit_transaction(),
    "abort": lambda m: m.abort_transaction(),
}
I, SAME = InvalidTxnStateError, "same"  # SAME: the call's pending result again, no change
#: (state, call) -> the state after, SAME, or the exact error raised
CALLS: Dict[Tuple[TxnState, str], Any] = {
    (S.UNINITIALIZED, "init"): S.INITIALIZING, (S.UNINITIALIZED, "begin"): I, (S.UNINITIALIZED, "send"): I,
    (S.UNINITIALIZED, "send_offsets"): I, (S.UNINITIALIZED, "commit"): I, (S.UNINITIALIZED, "abort"): I,
    (S.INITIALIZING, "init"): SAME, (S.INITIALIZING, "begin"): I, (S.INITIALIZING, "send"): I,
    (S.INITIALIZING, "send_offsets"): I, (S.INITIALIZING, "commit"): I, (S.INITIALIZING, "abort"): I,
    (S.READY, "init"): I, (S.READY, "begin"): S.IN_TRANSACTION, (S.READY, "send"): I,
    (S.READY, "send_offsets"): I, (S.READY, "commit"): I, (S.READY, "abort"): I,
    (S.IN_TRANSACTION, "init"): I, (S.IN_TRANSACTION, "begin"): I, (S.IN_TRANSACTION, "send"): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, "send_offsets"): S.IN_TRANSACTION, (S.IN_TRANSACTION, "commit"): S.COMMITTING_TRANSACTION,
    (S.IN_TRANSACTION, "abort"): S.ABORTING_TRANSACTION,
    (S.COMMITTING_TRANSACTION, "init"): I, (S.COMMITTING_TRANSACTION, "begin"): I,
    (S.COMMITTING_TRANSACTION, "send"): I, (S.COMMITTING_TRANSACTION, "send_offsets"): I,
    (S.COMMITTING_TRANSACTION, "commit"): SAME, (S.COMMITTING_TRANSACTION, "abort"): I,
    (S.ABORTING_TRANSACTION, "init"): I, (S.ABORTING_TRANSACTION, "begin"): I, (S.ABORTING_TRANSACTION, "send"): I,
    (S.ABORTING_TRANSACTION, "send_offsets"): I, (S.ABORTING_TRANSACTION, "commit"): I,
    (S.ABORTING_TRANSACTION, "abort"): SAME,
    **{(S.ABORTABLE_ERROR, op): TransactionAbortableError for op in OPS if op != "abort"},
    (S.ABORTABLE_ERROR, "abort"): S.ABORTING_TRANSACTION,
    **{(S.FATAL_ERROR, op): ProducerFencedError for op in OPS},
}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("state", list(TxnState), ids=lambda s: s.name)
def test_every_call_in_every_state(state: TxnState, op: str) -> None:
    m, _ = reach(state)
    expected = CALLS[(state, op)]
    before = (m.state, m._call)
    if isinstance(expected, type):
        with pytest.raises(PylogError) as info:
            OPS[op](m)
        assert type(info.value) is expected, info.value
        assert TID in str(info.value)
        assert m.state == state
    elif expected == SAME:
        assert before[1] is not None
        assert OPS[op](m) is before[1][1]
        assert m.state == state
    else:
        OPS[op](m)
        assert m.state == expected
    m._check()


def test_begin_twice_is_invalid_txn_state_and_commit_in_abortable_error_raises_that_error() -> None:
    m, _ = reach(S.IN_TRANSACTION)
    with pytest.raises(InvalidTxnStateError, match="from IN_TRANSACTION to IN_TRANSACTION"):
        m.begin_transaction()
    m, _ = reach(S.ABORTABLE_ERROR)
    with pytest.raises(TransactionAbortableError, match="call abort_transaction"):
        m.commit_transaction()


def test_a_pending_call_refuses_another_call_but_send_offsets_is_not_one() -> None:
    m, s = reach(S.IN_TRANSACTION)
    r = m.commit_transaction()
    with pytest.raises(InvalidTxnStateError, match="previous commit_transaction"):
        m.maybe_add_partition(("out", 1))
    s.run(m)
    assert r.done and m.state == S.READY
    m.begin_transaction()
    o = m.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(5, "meta")}, "g")
    o2 = m.send_offsets_to_transaction({TopicPartition("in", 0): 6}, "g")
    assert o2 is not o
    c = m.commit_transaction()  # at once, as Kafka allows: the EndTxn goes after both TxnOffsetCommits
    assert s.run(m) == [ADD_OFFSETS, ADD_OFFSETS, FIND_COORDINATOR, TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT, END_TXN]
    assert [x.message.offsets[0][2] for x in s.sent if x.kind == TXN_OFFSET_COMMIT] == [5, 6]
    assert o.done and o2.done and c.done and c.error is None


def test_bad_arguments_are_named() -> None:
    with pytest.raises(InvalidConfigurationError, match="transactional_id"):
        TransactionManager("")
    with pytest.raises(InvalidConfigurationError, match="transaction_timeout_ms"):
        TransactionManager(TID, transaction_timeout_ms=0)
    m, _ = reach(S.IN_TRANSACTION)
    with pytest.raises(InvalidConfigurationError, match="group_metadata"):
        m.send_offsets_to_transaction({("in", 0): 1}, None)
    with pytest.raises(PylogError, match="in-0"):
        m.send_offsets_to_transaction({("in", 0): -1}, "g")
    with pytest.raises(InvalidConfigurationError, match="partition"):
        m.maybe_add_partition("out")
    assert m._call is None  # refused calls leave nothing pending


# ---- requests, in order --------------------------------------------------------------------------
def test_requests_in_kafkas_order_with_their_fields() -> None:
    m = TransactionManager(TID, transaction_timeout_ms=30_000)
    s = Script()
    init = m.init_transactions()
    assert s.run(m) == [FIND_COORDINATOR, INIT_PRODUCER_ID]
    assert init.done and init.error is None and (m.producer_id, m.producer_epoch) == (7, 0)
    first = s.sent[0].message
    assert isinstance(first, tm.FindTransactionCoordinatorRequest) and first.transactional_id == TID
    assert s.sent[0].node == tmod.ANY_NODE
    ip = s.sent[1].message
    assert isinstance(ip, tm.InitProducerIdRequest) and (ip.transactional_id, ip.transaction_timeout_ms) == (TID, 30_000)
    assert s.sent[1].node == 0
    m.begin_transaction()
    m.maybe_add_partition(("out", 1))
    m.maybe_add_partition(TopicPartition("out", 0))
    offsets = m.send_offsets_to_transaction({("in", 0): 5, TopicPartition("in", 1): OffsetAndMetadata(9, "x", 2)},
                                            tm.ConsumerGroupMetadata("g", 3, "m-1", "inst"))
    commit_before = len(s.sent)
    assert s.run(m) == [ADD_PARTITIONS, ADD_OFFSETS, FIND_COORDINATOR, TXN_OFFSET_COMMIT]
    add = s.sent[commit_before].message
    assert add.partitions == (("out", 0), ("out", 1)) and (add.producer_id, add.producer_epoch) == (7, 0)
    assert s.sent[commit_before + 1].message.group_id == "g"
    assert isinstance(s.sent[commit_before + 2].message, gm.FindCoordinatorRequest)
    toc = s.sent[commit_before + 3].message
    assert isinstance(toc, tm.TxnOffsetCommitRequest)
    assert toc.offsets == (("in", 0, 5, -1, ""), ("in", 1, 9, 2, "x"))
    assert (toc.generation_id, toc.member_id, toc.group_instance_id) == (3, "m-1", "inst")
    assert offsets.done and offsets.error is None
    assert m.is_send_to_partition_allowed(("out", 0)) and not m.is_send_to_partition_allowed(("out", 5))
    commit = m.commit_transaction()
    assert s.step(m, incomplete=True) is None  # EndTxn waits for the batches in flight
    assert s.run(m) == [END_TXN]
    end = s.sent[-1].message
    assert isinstance(end, tm.EndTxnRequest) and end.committed and end.producer_epoch == 0
    assert commit.done and commit.error is None and m.state == S.READY
    assert m.producer_epoch == 1  # KIP-890: the bumped epoch from the EndTxn response


def test_a_transaction_with_nothing_added_ends_without_an_end_txn() -> None:
    m, s = reach(S.READY)
    m.begin_transaction()
    r = m.commit_transaction()
    assert s.run(m) == [] and r.done and r.error is None and m.state == S.READY


def test_end_txn_without_a_new_epoch_keeps_the_epoch() -> None:
    m, s = reach(S.IN_TRANSACTION)
    m.commit_transaction()
    corr = s.corr + 1
    req = m.next_request(0, corr)
    assert req is not None and req.kind == END_TXN
    assert m.on_response(tm.EndTxnResponse(corr), 0)  # a coordinator without KIP-890: -1/-1
    assert (m.producer_id, m.producer_epoch, m.state) == (7, 0, S.READY)


def test_abort_fails_unsent_records_and_waits_for_those_in_flight() -> None:
    m, s = reach(S.IN_TRANSACTION)
    assert m.undrained_batches_error() is None
    m.maybe_add_partition(("out", 3))  # its batch was never sent: its AddPartitions never went either
    r = m.abort_transaction()
    err = m.undrained_batches_error()
    assert isinstance(err, TransactionAbortedError) and TID in str(err)
    # a batch of out-0 sent before the abort and waiting for its retry may still go (it may be in the
    # log; EndTxn waits for it); out-3 was never added: its batches were failed, never drained
    assert m.is_send_to_partition_allowed(("out", 0)) and not m.is_send_to_partition_allowed(("out", 3))
    assert s.step(m, incomplete=True) is None
    assert s.run(m) == [END_TXN]  # no AddPartitionsToTxn for out-3
    assert not s.sent[-1].message.committed and r.done and r.error is None and m.state == S.READY
    assert m.undrained_batches_error() is None


def test_abortable_error_fails_undrained_batches_with_it_and_abort_recovers() -> None:
    m, s = reach(S.ABORTABLE_ERROR)
    assert isinstance(m.undrained_batches_error(), TransactionAbortableError)
    m.abort_transaction()
    assert s.run(m) == [END_TXN] and m.state == S.READY and m.last_error is None
    m.begin_transaction()


def test_a_batch_error_on_the_produce_path() -> None:
    m, _ = reach(S.IN_TRANSACTION)
    m.on_batch_error(TopicPartition("out", 0), InvalidProducerEpochError("x"))  # KIP-588: abortable on produce
    assert m.state == S.ABORTABLE_ERROR
    m, _ = reach(S.IN_TRANSACTION)
    m.on_batch_error(TopicPartition("out", 0), ProducerFencedError("x"))
    assert m.state == S.FATAL_ERROR


def test_an_answer_after_a_fence_changes_nothing() -> None:
    m, s = reach(S.IN_TRANSACTION)
    m.maybe_add_partition(("out", 1))
    req = m.next_request(0, 50)
    assert req is not None and req.kind == ADD_PARTITIONS
    m.on_batch_error(TopicPartition("out", 0), ProducerFencedError("fenced on produce"))
    assert m.on_response(tm.AddPartitionsToTxnResponse(50), 0)
    assert m.state == S.FATAL_ERROR and not m.is_send_to_partition_allowed(("out", 1))
    assert m.next_request(0, 51) is None and not m.has_pending_request()
    m._check()
    m, s = reach(S.COMMITTING_TRANSACTION)
    req = m.next_request(0, 60)
    assert req is not None and req.kind == END_TXN
    r = m._call[1] if m._call else None
    m.on_batch_error(TopicPartition("out", 0), ProducerFencedError("fenced on produce"))
    assert m.on_response(tm.EndTxnResponse(60, producer_id=7, producer_epoch=1), 0)
    assert m.state == S.FATAL_ERROR and m.producer_epoch == 0
    assert r is not None and r.done and isinstance(r.error, ProducerFencedError)
    m._check()


def test_a_late_or_unknown_answer_is_ignored() -> None:
    m, s = reach(S.IN_TRANSACTION)
    m.commit_transaction()
    req = m.next_request(0, 99)
    assert req is not None
    assert not m.on_response(tm.EndTxnResponse(98), 0)
    m.on_no_response(98, 0)
    assert m.state == S.COMMITTING_TRANSACTION
    m.on_no_response(99, 0)  # timed out: look the coordinator up again, then retry
    s.now = 200
    assert s.run(m) == [FIND_COORDINATOR, END_TXN] and m.state == S.READY


# ---- response errors -----------------------------------------------------------------------------
R, F, A, AB, X = (ErrorKind.RETRIABLE, ErrorKind.FIND_COORDINATOR, ErrorKind.ABORTABLE, ErrorKind.ABORTABLE_BUMP,
                  ErrorKind.FATAL)
KINDS = (INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, TXN_OFFSET_COMMIT, END_TXN)
#: error -> its kind for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn (Kafka's handlers)
CLASSIFICATION = {
    NotCoordinatorError: (F, F, F, F, F),
    CoordinatorNotAvailableError: (F, F, F, F, F),
    CoordinatorLoadInProgressError: (R, R, R, R, R),
    ConcurrentTransactionsError: (R, R, R, R, R),
    UnknownTopicOrPartitionError: (R, R, R, R, R),
    NotLeaderError: (R, R, R, R, R),  # any other retriable error class (Kafka's RetriableException)
    RequestTimedOutError: (R, R, R, F, R),
    TransactionAbortableError: (A, A, A, A, A),
    InvalidProducerIdMappingError: (X, AB, AB, X, AB),
    UnknownMemberIdError: (X, X, X, A, X),
    IllegalGenerationError: (X, X, X, A, X),
    FencedInstanceIdError: (X, X, X, A, X),
    ProducerFencedError: (X, X, X, X, X),
    InvalidProducerEpochError: (X, X, X, X, X),
    TransactionalIdAuthorizationFailedError: (X, X, X, X, X),
    InvalidTxnStateError: (X, X, X, X, X),
    InvalidTransactionTimeoutError: (X, X, X, X, X),
    InvalidRequestError: (X, X, X, X, X),
}


@pytest.mark.parametrize("error", list(CLASSIFICATION), ids=lambda e: e.__name__)
def test_classification(error: type) -> None:
    assert tuple(classify(k, error) for k in KINDS) == CLASSIFICATION[error]


def at_request(kind: int) -> Tuple[TransactionManager, Script, TxnResult]:
    """A manager whose next request is ``kind`` (coordinators known)."""
    if kind == INIT_PRODUCER_ID:
        m, s = TransactionManager(TID), Script()
        r = m.init_transactions()
        s.step(m)  # FindCoordinator
        return m, s, r
    m, s = reach(S.IN_TRANSACTION)
    if kind == ADD_PARTITIONS:
        m.maybe_add_partition(("out", 4))
        return m, s, TxnResult("send")
    r = m.send_offsets_to_transaction({("in", 0): 1}, "g")
    if kind in (ADD_OFFSETS, TXN_OFFSET_COMMIT):
        if kind == TXN_OFFSET_COMMIT:
            s.step(m)
            s.step(m)  # AddOffsets, FindCoordinator(group)
        return m, s, r
    s.run(m)
    return m, s, m.commit_transaction()


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: tmod.REQUEST_NAMES[k])
@pytest.mark.parametrize("error", list(CLASSIFICATION), ids=lambda e: e.__name__)
def test_each_response_error_is_handled_by_its_kind(kind: int, error: type) -> None:
    m, s, result = at_request(kind)
    before = m.state
    req = s.step(m, error)
    assert req is not None and req.kind == kind
    expected = classify(kind, error)
    if expected in (R, F):
        assert m.state == before and not result.done
        backoff = 20 if (kind, error) == (ADD_PARTITIONS, ConcurrentTransactionsError) else 100  # Kafka's
        s.now += backoff - 1
        assert m.next_request(s.now, 1000) is None  # backing off
        s.now += 1
        nxt = m.next_request(s.now, 1001)
        assert nxt is not None and nxt.kind == (FIND_COORDINATOR if expected == F else kind)
    elif expected in (A, AB):
        assert m.state == S.ABORTABLE_ERROR and type(m.last_error) is (
            CommitFailedError if error in (UnknownMemberIdError, IllegalGenerationError) else error)
        assert m.epoch_bump_required == (expected == AB)
        if kind != ADD_PARTITIONS:
            assert result.done and result.error is m.last_error
    else:
        assert m.state == S.FATAL_ERROR
        fenced = error in (ProducerFencedError, InvalidProducerEpochError)
        assert type(m.last_error) is (ProducerFencedError if fenced else error)
        if kind != ADD_PARTITIONS:
            assert result.done and result.error is m.last_error
        with pytest.raises(type(m.last_error)):
            m.abort_transaction()
    m._check()


def test_abort_after_an_unknown_producer_id_bumps_the_epoch_instead_of_end_txn() -> None:
    m, s = reach(S.IN_TRANSACTION)
    m.maybe_add_partition(("out", 4))
    s.step(m, InvalidProducerIdMappingError)
    r = m.abort_transaction()
    assert m.state == S.ABORTING_TRANSACTION and isinstance(m.undrained_batches_error(), TransactionAbortedError)
    s.epoch = 5
    assert s.run(m) == [INIT_PRODUCER_ID]
    ip = s.sent[-1].message
    assert (ip.producer_id, ip.producer_epoch) == (7, 0)  # KIP-360: the current id and epoch
    assert r.done and r.error is None and m.state == S.READY and m.producer_epoch == 5


# ---- against the real coordinator ----------------------------------------------------------------
class Broker:
    """The transaction coordinator (and a toy group coordinator for TxnOffsetCommit) behind the
    manager's requests: appends and markers are acknowledged at once, in order."""

    def __init__(self, transaction_version: int = 2) -> None:
        self.pids = iter(range(1000, 2000))
        self.coord = TransactionCoordinator(lambda: next(self.pids), partitions=4,
                                            transaction_version=transaction_version)
        for p in range(4):
            assert self.coord.load(p, 0, [], 0) == []
        self.now = 0
        self.markers: List[Tuple[str, int, int, int, bool]] = []  # (topic, partition, pid, epoch, committed)
        self.pending_offsets: Dict[Tuple[int, str], Dict[Tuple[str, int], int]] = {}  # (pid, group) -> offsets
        self.committed_offsets: Dict[str, Dict[Tuple[str, int], int]] = {}
        self.held: List[Any] = []
        self.corr = 10_000

    def drive(self, out: TxnOutcome) -> TxnOutcome:
        """Acknowledge appends and markers until the outcome answers the request (or nothing is left)."""
        reply = out if out.reply else None
        todo = [out]
        while todo:
            o = todo.pop(0)
            for mk in o.markers:
                self.markers.append((mk.topic, mk.partition, mk.producer_id, mk.producer_epoch, mk.committed))
                if mk.topic == OFFSETS_TOPIC:
                    for (pid, group), offs in list(self.pending_offsets.items()):
                        if pid == mk.producer_id:
                            if mk.committed:
                                self.committed_offsets.setdefault(group, {}).update(offs)
                            del self.pending_offsets[(pid, group)]
                todo.append(self.coord.on_marker_written(o.transactional_id, mk.topic, mk.partition, self.now))
            if o.append is not None:
                nxt = self.coord.on_log_append(o.transactional_id, None, self.now)
                if nxt.reply and reply is None:
                    reply = nxt
                todo.append(nxt)
        self.coord._check()
        return reply if reply is not None else TxnOutcome("", reply=True)

    def handle(self, msg: Any) -> Any:
        c, now = msg.correlation_id, self.now
        if isinstance(msg, (tm.FindTransactionCoordinatorRequest, gm.FindCoordinatorRequest)):
            return gm.FindCoordinatorResponse(c, node_id=0)
        if isinstance(msg, tm.TxnOffsetCommitRequest):
            m = self.coord.describe(msg.transactional_id)
            if m is None or (m.producer_id, m.producer_epoch) != (msg.producer_id, msg.producer_epoch):
                return tm.TxnOffsetCommitResponse(c, error=ProducerFencedError)
            self.pending_offsets.setdefault((msg.producer_id, msg.group_id), {}).update(
                {(t, p): off for t, p, off, _, _ in msg.offsets})
            return tm.TxnOffsetCommitResponse(c)
        if isinstance(msg, tm.InitProducerIdRequest):
            exp = (msg.producer_id, msg.producer_epoch) if msg.producer_id >= 0 else None
            out = self.drive(self.coord.init_producer_id(msg.transactional_id, msg.transaction_timeout_ms, now, exp))
            return InitProducerIdResponse(c, error=type(out.error) if out.error else None,
                                          producer_id=out.producer_id, producer_epoch=out.producer_epoch)
        if isinstance(msg, tm.AddPartitionsToTxnRequest):
            out = self.drive(self.coord.add_partitions(msg.transactional_id, msg.producer_id, msg.producer_epoch,
                                                       msg.partitions, now))
            return tm.AddPartitionsToTxnResponse(c, error=type(out.error) if out.error else None)
        if isinstance(msg, tm.AddOffsetsToTxnRequest):
            out = self.drive(self.coord.add_offsets(msg.transactional_id, msg.producer_id, msg.producer_epoch,
                                                    msg.group_id, now))
            return tm.AddOffsetsToTxnResponse(c, error=type(out.error) if out.error else None)
        assert isinstance(msg, tm.EndTxnRequest), msg
        out = self.drive(self.coord.end_txn(msg.transactional_id, msg.producer_id, msg.producer_epoch,
                                            msg.committed, now))
        if out.error is not None:
            return tm.EndTxnResponse(c, error=type(out.error), message=str(out.error))
        return tm.EndTxnResponse(c, producer_id=out.producer_id, producer_epoch=out.producer_epoch)

    def run(self, m: TransactionManager, hold: Optional[int] = None) -> None:
        """Send the manager's requests until it has none; a request of kind ``hold`` is also kept
        in ``held`` (to be delivered again later)."""
        for _ in range(100):
            self.corr += 1
            req = m.next_request(self.now, self.corr)
            if req is None:
                if m.has_pending_request():
                    self.now += 100  # backing off after a retriable error
                    continue
                return
            if req.kind == hold:
                self.held.append(req.message)
            m.on_response(self.handle(req.message), self.now)
            m._check()
        raise AssertionError("the manager never finished")


def state_of(b: Broker, tid: str = TID) -> TransactionState:
    m = b.coord.describe(tid)
    assert m is not None
    return m.state


def test_end_to_end_init_begin_add_send_offsets_commit_then_abort() -> None:
    b, m = Broker(), TransactionManager(TID)
    r = m.init_transactions()
    b.run(m)
    assert r.done and r.error is None and m.state == S.READY and state_of(b) == TransactionState.EMPTY
    pid, epoch = m.producer_id, m.producer_epoch
    m.begin_transaction()
    m.maybe_add_partition(("out", 0))
    m.maybe_add_partition(("out", 2))
    off = m.send_offsets_to_transaction({("in", 0): 10, ("in", 1): 20}, tm.ConsumerGroupMetadata("g", 1, "m-1"))
    b.run(m)
    assert off.done and off.error is None
    txn = b.coord.describe(TID)
    assert txn is not None and txn.state == TransactionState.ONGOING
    assert {("out", 0), ("out", 2)} <= txn.partitions and any(t == OFFSETS_TOPIC for t, _ in txn.partitions)
    assert b.committed_offsets == {}  # not visible before the commit
    c = m.commit_transaction()
    b.run(m)
    assert c.done and c.error is None and m.state == S.READY
    assert state_of(b) == TransactionState.COMPLETE_COMMIT
    assert {(t, p) for t, p, *_ in b.markers} >= {("out", 0), ("out", 2)}
    assert all(mk[2:] == (pid, epoch + 1, True) for mk in b.markers)  # the markers carry the bumped epoch
    assert m.producer_epoch == epoch + 1  # KIP-890: the manager took it from the EndTxn response
    assert b.committed_offsets == {"g": {("in", 0): 10, ("in", 1): 20}}
    # a second transaction, aborted: its offsets never become visible
    b.markers.clear()
    m.begin_transaction()
    m.maybe_add_partition(("out", 1))
    m.send_offsets_to_transaction({("in", 0): 99}, "g")
    b.run(m)
    a = m.abort_transaction()
    b.run(m)
    assert a.done and a.error is None and m.state == S.READY and state_of(b) == TransactionState.COMPLETE_ABORT
    assert all(not mk[4] and mk[3] == epoch + 2 for mk in b.markers)
    assert b.committed_offsets == {"g": {("in", 0): 10, ("in", 1): 20}}
    assert m.producer_epoch == epoch + 2


def test_a_second_producer_with_the_same_id_fences_the_first() -> None:
    b, m1, m2 = Broker(), TransactionManager(TID), TransactionManager(TID)
    m1.init_transactions()
    b.run(m1)
    m1.begin_transaction()
    m1.maybe_add_partition(("out", 0))
    b.run(m1)
    r2 = m2.init_transactions()
    b.run(m2)  # first answer ConcurrentTransactions (the open transaction is aborted), then a new epoch
    assert r2.done and r2.error is None and m2.state == S.READY
    # the fence bumped the epoch (0 -> 1), the abort of the open transaction bumped it again (KIP-890,
    # its ABORT marker carries 2), and the retried InitProducerId got 3
    assert (m2.producer_id, m2.producer_epoch) == (m1.producer_id, m1.producer_epoch + 3)
    assert b.markers == [("out", 0, m1.producer_id, m1.producer_epoch + 2, False)]
    # the zombie's next step is refused, and every call after that raises ProducerFencedError
    c = m1.commit_transaction()
    b.run(m1)
    assert c.done and isinstance(c.error, ProducerFencedError) and m1.state == S.FATAL_ERROR
    for call in (m1.begin_transaction, m1.commit_transaction, m1.abort_transaction, m1.init_transactions):
        with pytest.raises(ProducerFencedError):
            call()
    # the new producer works
    m2.begin_transaction()
    m2.maybe_add_partition(("out", 0))
    b.run(m2)
    ok = m2.commit_transaction()
    b.run(m2)
    assert ok.done and ok.error is None and state_of(b) == TransactionState.COMPLETE_COMMIT


def test_a_zombie_send_after_fencing_is_fatal() -> None:
    b, m1, m2 = Broker(), TransactionManager(TID), TransactionManager(TID)
    m1.init_transactions()
    b.run(m1)
    m2.init_transactions()
    b.run(m2)
    m1.begin_transaction()
    m1.maybe_add_partition(("out", 0))
    b.run(m1)  # AddPartitionsToTxn with the old epoch
    assert m1.state == S.FATAL_ERROR and isinstance(m1.last_error, ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        m1.maybe_add_partition(("out", 1))


@pytest.mark.parametrize("transaction_version", [2, 1])
def test_a_delayed_end_txn_of_a_finished_transaction_does_not_touch_the_next(transaction_version: int) -> None:
    """With the KIP-890 bump (transaction_version 2) the late EndTxn is fenced; the test-only switch
    (transaction_version 1, no bump) shows the anomaly it prevents: the late abort aborts transaction 2."""
    b, m = Broker(transaction_version), TransactionManager(TID)
    m.init_transactions()
    b.run(m)
    m.begin_transaction()
    m.maybe_add_partition(("out", 0))
    b.run(m)
    m.abort_transaction()
    b.run(m, hold=END_TXN)  # the EndTxn(abort) of transaction 1 is delivered, and kept to deliver again
    assert state_of(b) == TransactionState.COMPLETE_ABORT and len(b.held) == 1
    m.begin_transaction()
    m.maybe_add_partition(("out", 1))
    b.run(m)
    assert state_of(b) == TransactionState.ONGOING
    b.markers.clear()
    late = b.handle(b.held[0])  # Jepsen's reordering: the old abort arrives during transaction 2
    if transaction_version == 1:
        assert late.error is None and state_of(b) == TransactionState.COMPLETE_ABORT
        assert b.markers == [("out", 1, m.producer_id, m.producer_epoch, False)]  # transaction 2 lost
        return
    assert late.error is ProducerFencedError  # KIP-890: its epoch is the previous one
    txn = b.coord.describe(TID)
    assert txn is not None and txn.state == TransactionState.ONGOING and txn.partitions == {("out", 1)}
    assert b.markers == []  # nothing of transaction 2 was aborted
    assert not m.on_response(late, b.now)  # and the manager ignores the stale answer
    c = m.commit_transaction()
    b.run(m)
    assert c.done and c.error is None and state_of(b) == TransactionState.COMPLETE_COMMIT
    assert [mk[:2] + (mk[4],) for mk in b.markers] == [("out", 1, True)]


def test_abort_after_an_abortable_init_producer_id_initializes_again() -> None:
    m, s, r = at_request(INIT_PRODUCER_ID)
    s.step(m, TransactionAbortableError)
    assert m.state == S.ABORTABLE_ERROR and r.done and isinstance(r.error, TransactionAbortableError)
    a = m.abort_transaction()
    assert s.step(m) is not None and m.state == S.READY  # no EndTxn (nothing started): InitProducerId again
    assert s.sent[-1].kind == INIT_PRODUCER_ID and a.done and a.error is None and m.producer_id == 7


def test_an_end_txn_answered_after_a_batch_failed_fails_the_commit() -> None:
    m, s = reach(S.COMMITTING_TRANSACTION)
    r = m.commit_transaction()
    req = m.next_request(0, 70)
    assert req is not None and req.kind == END_TXN
    m.on_batch_error(TopicPartition("out", 0), TransactionAbortableError("late batch failure"))
    assert m.on_response(tm.EndTxnResponse(70, producer_id=7, producer_epoch=1), 0)
    assert m.state == S.ABORTABLE_ERROR and r.done and isinstance(r.error, TransactionAbortableError)
    m._check()
    m.abort_transaction()
    assert s.run(m) == [END_TXN] and m.state == S.READY
