"""The transaction coordinator's state machine (pylog.replication.txn_coordinator), table-driven.

Every request (InitProducerId, AddPartitionsToTxn, EndTxn commit/abort, with the
current, previous or a wrong producer id/epoch) in every state a transactional
id can be in (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
CompleteAbort, and with an append pending), with and without the KIP-890 epoch
bump: allowed ones reach the expected state, refused ones give the exact error
and change nothing. Plus fencing, epoch exhaustion, timeouts, the Jepsen
delayed-EndTxn anomaly, append failures and failover.
"""
from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Optional, Tuple, Type

import pytest

from pylog.errors import (
    ConcurrentTransactionsError,
    CorruptRecordError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    NotCoordinatorError,
    ProducerFencedError,
    PylogError,
    TransactionAbortableError,
)
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group
from pylog.replication.txn_coordinator import (
    MAX_EPOCH,
    VALID_PREVIOUS,
    TransactionCoordinator,
    TxnMarker,
    TxnOutcome,
)
from pylog.replication.txn_log import TransactionState as S
from pylog.replication.txn_log import TxnLogValue, decode_key, decode_value, encode_key, encode_value

TID = "copier-1"
CEPOCH = 5
TP_A, TP_B, TP_C = ("out", 0), ("out", 1), ("out", 2)


class Driver:
    """A coordinator on one __transaction_state partition, with a 'log' of what it appended."""

    def __init__(self, transaction_version: int = 2, **kw: object):
        self.ids = itertools.count(1000)
        self.c = TransactionCoordinator(lambda: next(self.ids), partitions=1, transaction_version=transaction_version,
                                        **kw)  # type: ignore[arg-type]
        self.c.load(0, CEPOCH, [], 0)
        self.log: List[Tuple[bytes, Optional[bytes]]] = []
        self.markers: List[TxnMarker] = []
        self.now = 100

    def settle(self, out: TxnOutcome, *, ack_markers: bool = True) -> TxnOutcome:
        """Do what ``out`` asks (append succeeds, markers written) until quiet; return the reply."""
        reply = out if out.reply else None
        pending = [out]
        while pending:
            o = pending.pop(0)
            self.markers.extend(o.markers)
            if o.append is not None:
                assert o.append.coordinator_epoch == CEPOCH and o.append.partition == 0
                self.log.append((o.append.key, o.append.value))
                r = self.c.on_log_append(o.transactional_id, None, self.now)
                if r.reply and reply is None:
                    reply = r
                pending.append(r)
            if ack_markers:
                for mk in o.markers:
                    pending.append(self.c.on_marker_written(o.transactional_id, mk.topic, mk.partition, self.now))
            self.c._check()
        return reply if reply is not None else TxnOutcome(out.transactional_id)

    def init(self, **kw: object) -> TxnOutcome:
        return self.settle(self.c.init_producer_id(TID, 60_000, self.now, **kw))  # type: ignore[arg-type]

    def add(self, pid: int, epoch: int, *tps: Tuple[str, int]) -> TxnOutcome:
        return self.settle(self.c.add_partitions(TID, pid, epoch, tps or [TP_A], self.now))

    def end(self, pid: int, epoch: int, commit: bool, **kw: bool) -> TxnOutcome:
        return self.settle(self.c.end_txn(TID, pid, epoch, commit, self.now), **kw)

    @property
    def m(self):  # type: ignore[no-untyped-def]
        m = self.c.describe(TID)
        assert m is not None
        return m


def ok(r: TxnOutcome) -> TxnOutcome:
    assert r.reply and r.error is None, r.error
    return r


def test_valid_previous_states_are_kafkas() -> None:
    assert VALID_PREVIOUS == {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    assert [s.kafka_name for s in S] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                         "CompleteAbort", "Dead", "PrepareEpochFence"]


# ---- reaching each state ------------------------------------------------------------------------
# each setup returns (driver, pid, epoch the producer holds now, epoch of its previous transaction or None)


def _empty(tv: int) -> Tuple[Driver, int, int, Optional[int]]:
    d = Driver(tv)
    r = ok(d.init())
    return d, r.producer_id, r.producer_epoch, None


def _ongoing(tv: int) -> Tuple[Driver, int, int, Optional[int]]:
    d, pid, e, _ = _empty(tv)
    ok(d.add(pid, e))
    return d, pid, e, None


def _prepare(commit: bool) -> Callable[[int], Tuple[Driver, int, int, Optional[int]]]:
    def setup(tv: int) -> Tuple[Driver, int, int, Optional[int]]:
        d, pid, e, _ = _ongoing(tv)
        r = ok(d.end(pid, e, commit, ack_markers=False))  # markers not acknowledged yet
        return d, pid, r.producer_epoch, e
    return setup


def _complete(commit: bool) -> Callable[[int], Tuple[Driver, int, int, Optional[int]]]:
    def setup(tv: int) -> Tuple[Driver, int, int, Optional[int]]:
        d, pid, e, _ = _ongoing(tv)
        r = ok(d.end(pid, e, commit))
        return d, pid, r.producer_epoch, e
    return setup


SETUPS = {
    S.EMPTY: _empty, S.ONGOING: _ongoing, S.PREPARE_COMMIT: _prepare(True), S.PREPARE_ABORT: _prepare(False),
    S.COMPLETE_COMMIT: _complete(True), S.COMPLETE_ABORT: _complete(False),
}

OK = None
# (state, request) -> expected: OK plus the state after, or the error class (state unchanged)
# requests: init; add (a new partition); end_commit / end_abort with the producer's current epoch;
# retry_commit / retry_abort with the epoch of the previous transaction (what a late or retried
# EndTxn carries under KIP-890)
Expect = Tuple[Optional[Type[PylogError]], Optional[S]]
TABLE_V2: Dict[Tuple[S, str], Expect] = {
    (S.EMPTY, "init"): (OK, S.EMPTY),
    (S.EMPTY, "add"): (OK, S.ONGOING),
    (S.EMPTY, "end_commit"): (InvalidTxnStateError, None),
    (S.EMPTY, "end_abort"): (InvalidTxnStateError, None),
    (S.ONGOING, "init"): (ConcurrentTransactionsError, S.COMPLETE_ABORT),  # fenced: the open txn is aborted
    (S.ONGOING, "add"): (OK, S.ONGOING),
    (S.ONGOING, "end_commit"): (OK, S.COMPLETE_COMMIT),
    (S.ONGOING, "end_abort"): (OK, S.COMPLETE_ABORT),
    (S.PREPARE_COMMIT, "init"): (ConcurrentTransactionsError, None),
    (S.PREPARE_COMMIT, "add"): (ConcurrentTransactionsError, None),
    (S.PREPARE_COMMIT, "end_commit"): (ProducerFencedError, None),  # the current epoch: not a retry
    (S.PREPARE_COMMIT, "end_abort"): (ProducerFencedError, None),
    (S.PREPARE_COMMIT, "retry_commit"): (ConcurrentTransactionsError, None),
    (S.PREPARE_COMMIT, "retry_abort"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "init"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "add"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "end_commit"): (ProducerFencedError, None),
    (S.PREPARE_ABORT, "end_abort"): (ProducerFencedError, None),
    (S.PREPARE_ABORT, "retry_commit"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "retry_abort"): (ConcurrentTransactionsError, None),
    (S.COMPLETE_COMMIT, "init"): (OK, S.EMPTY),
    (S.COMPLETE_COMMIT, "add"): (OK, S.ONGOING),
    (S.COMPLETE_COMMIT, "end_commit"): (ProducerFencedError, None),
    (S.COMPLETE_COMMIT, "end_abort"): (ProducerFencedError, None),
    (S.COMPLETE_COMMIT, "retry_commit"): (OK, S.COMPLETE_COMMIT),  # a retry of the commit: success, no change
    (S.COMPLETE_COMMIT, "retry_abort"): (InvalidTxnStateError, None),
    (S.COMPLETE_ABORT, "init"): (OK, S.EMPTY),
    (S.COMPLETE_ABORT, "add"): (OK, S.ONGOING),
    (S.COMPLETE_ABORT, "end_commit"): (ProducerFencedError, None),
    (S.COMPLETE_ABORT, "end_abort"): (ProducerFencedError, None),
    (S.COMPLETE_ABORT, "retry_commit"): (InvalidTxnStateError, None),
    (S.COMPLETE_ABORT, "retry_abort"): (OK, S.COMPLETE_ABORT),
}
# without the bump (Kafka's TV1): the epoch does not move at EndTxn, so "retry" == current epoch
TABLE_V1: Dict[Tuple[S, str], Expect] = {
    (S.EMPTY, "init"): (OK, S.EMPTY),
    (S.EMPTY, "add"): (OK, S.ONGOING),
    (S.EMPTY, "end_commit"): (InvalidTxnStateError, None),
    (S.EMPTY, "end_abort"): (InvalidTxnStateError, None),
    (S.ONGOING, "init"): (ConcurrentTransactionsError, S.COMPLETE_ABORT),
    (S.ONGOING, "add"): (OK, S.ONGOING),
    (S.ONGOING, "end_commit"): (OK, S.COMPLETE_COMMIT),
    (S.ONGOING, "end_abort"): (OK, S.COMPLETE_ABORT),
    (S.PREPARE_COMMIT, "init"): (ConcurrentTransactionsError, None),
    (S.PREPARE_COMMIT, "add"): (ConcurrentTransactionsError, None),
    (S.PREPARE_COMMIT, "end_commit"): (ConcurrentTransactionsError, None),
    (S.PREPARE_COMMIT, "end_abort"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "init"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "add"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "end_commit"): (ConcurrentTransactionsError, None),
    (S.PREPARE_ABORT, "end_abort"): (ConcurrentTransactionsError, None),
    (S.COMPLETE_COMMIT, "init"): (OK, S.EMPTY),
    (S.COMPLETE_COMMIT, "add"): (OK, S.ONGOING),
    (S.COMPLETE_COMMIT, "end_commit"): (OK, S.COMPLETE_COMMIT),
    (S.COMPLETE_COMMIT, "end_abort"): (InvalidTxnStateError, None),
    (S.COMPLETE_ABORT, "init"): (OK, S.EMPTY),
    (S.COMPLETE_ABORT, "add"): (OK, S.ONGOING),
    (S.COMPLETE_ABORT, "end_commit"): (InvalidTxnStateError, None),
    (S.COMPLETE_ABORT, "end_abort"): (OK, S.COMPLETE_ABORT),
}


def _request(d: Driver, req: str, pid: int, epoch: int, prev: Optional[int]) -> TxnOutcome:
    if req == "init":
        return d.init()
    if req == "add":
        return d.add(pid, epoch, TP_B)
    commit = req.endswith("commit")
    e = prev if req.startswith("retry") else epoch
    assert e is not None
    return d.end(pid, e, commit)


CASES = [(2, s, r, exp) for (s, r), exp in TABLE_V2.items()] + [(1, s, r, exp) for (s, r), exp in TABLE_V1.items()]


@pytest.mark.parametrize("tv,state,req,expect", CASES, ids=[f"tv{c[0]}-{c[1].kafka_name}-{c[2]}" for c in CASES])
def test_transition_table(tv: int, state: S, req: str, expect: Expect) -> None:
    d, pid, epoch, prev = SETUPS[state](tv)
    assert d.m.state == state
    before = d.m
    log_before = len(d.log)
    r = _request(d, req, pid, epoch, prev)
    err, after = expect
    if err is None:
        assert r.error is None, r.error
        assert d.m.state == after
    else:
        assert type(r.error) is err, r.error
        if after is None:  # refused: nothing changed, nothing written
            assert d.m == before
            assert len(d.log) == log_before
        else:
            assert d.m.state == after
    d.c._check()


@pytest.mark.parametrize("state", list(SETUPS))
@pytest.mark.parametrize("tv", [1, 2])
def test_wrong_producer_id_and_stale_epoch_are_refused_in_every_state(tv: int, state: S) -> None:
    d, pid, epoch, _ = SETUPS[state](tv)
    before = d.m
    for r in (d.add(pid + 77, epoch), d.end(pid + 77, epoch, True), d.end(pid + 77, epoch, False)):
        assert type(r.error) is InvalidProducerIdMappingError
    r = d.add(pid, epoch - 1 if epoch > 0 else epoch + 5)
    assert type(r.error) is ProducerFencedError
    r = d.end(pid, epoch + 5, True)
    assert type(r.error) is ProducerFencedError
    assert d.m == before


def test_requests_for_unknown_ids_bad_timeouts_and_other_partitions() -> None:
    d = Driver()
    assert type(d.add(1, 0).error) is InvalidProducerIdMappingError
    assert type(d.end(1, 0, True).error) is InvalidProducerIdMappingError
    for bad in (0, -1, 900_001):
        r = d.c.init_producer_id(TID, bad, 0)
        assert type(r.error) is InvalidTransactionTimeoutError and r.reply and r.append is None
    with pytest.raises(InvalidRequestError):
        d.c.init_producer_id("", 1000, 0)
    c = TransactionCoordinator(lambda: 1, partitions=3)
    with pytest.raises(NotCoordinatorError, match="not loaded"):
        c.init_producer_id(TID, 1000, 0)


def test_pending_append_makes_every_request_concurrent() -> None:
    d = Driver()
    r = ok(d.init())
    out = d.c.add_partitions(TID, r.producer_id, r.producer_epoch, [TP_A], d.now)
    assert out.append is not None and not out.reply
    for o in (d.c.init_producer_id(TID, 1000, d.now), d.c.add_partitions(TID, r.producer_id, r.producer_epoch, [TP_B], d.now),
              d.c.end_txn(TID, r.producer_id, r.producer_epoch, True, d.now)):
        assert type(o.error) is ConcurrentTransactionsError
    assert d.c.describe(TID).state == S.EMPTY  # type: ignore[union-attr]
    ok(d.c.on_log_append(TID, None, d.now))
    assert d.m.state == S.ONGOING and d.m.partitions == {TP_A}


# ---- init, fencing, exhaustion ------------------------------------------------------------------

def test_init_assigns_a_producer_id_and_bumps_the_epoch_each_time() -> None:
    d = Driver()
    r1 = ok(d.init())
    r2 = ok(d.init())
    assert (r1.producer_id, r1.producer_epoch) == (1000, 0)
    assert (r2.producer_id, r2.producer_epoch) == (1000, 1)
    assert decode_value(d.log[-1][1]) == TxnLogValue(1000, 1, 60_000, S.EMPTY, frozenset(), d.now, -1,
                                                     previous_producer_id=1000, client_transaction_version=2)
    assert decode_key(d.log[-1][0]) == TID


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction() -> None:
    d = Driver()
    a = ok(d.init())
    ok(d.add(a.producer_id, a.producer_epoch, TP_A, TP_B))
    fence = d.init()  # producer B, same transactional id
    assert type(fence.error) is ConcurrentTransactionsError
    aborts = [mk for mk in d.markers if not mk.committed]
    assert {(mk.topic, mk.partition) for mk in aborts} == {TP_A, TP_B}
    assert all(mk.producer_id == a.producer_id and mk.producer_epoch > a.producer_epoch
               and mk.coordinator_epoch == CEPOCH for mk in aborts)
    assert d.m.state == S.COMPLETE_ABORT
    b = ok(d.init())  # B's retry
    assert b.producer_epoch > aborts[0].producer_epoch
    # the zombie: every request is refused as fenced (its epoch is not even "previous")
    assert type(d.add(a.producer_id, a.producer_epoch).error) is ProducerFencedError
    assert type(d.end(a.producer_id, a.producer_epoch, True).error) is ProducerFencedError
    assert type(d.end(a.producer_id, a.producer_epoch, False).error) is ProducerFencedError
    assert type(d.c.init_producer_id(TID, 1000, d.now, expected=(a.producer_id, a.producer_epoch)).error) \
        is ProducerFencedError
    ok(d.add(b.producer_id, b.producer_epoch))


def test_the_zombie_is_fenced_while_its_transaction_is_still_being_aborted() -> None:
    d = Driver()
    a = ok(d.init())
    ok(d.add(a.producer_id, a.producer_epoch))
    out = d.c.init_producer_id(TID, 60_000, d.now)
    assert out.append is not None  # PrepareAbort not yet appended: the epoch is bumped already
    assert type(d.c.end_txn(TID, a.producer_id, a.producer_epoch, True, d.now).error) is ProducerFencedError


def test_expected_epoch_retry_returns_the_same_epoch() -> None:
    d = Driver()
    a = ok(d.init())
    b = ok(d.init(expected=(a.producer_id, a.producer_epoch)))
    assert b.producer_epoch == a.producer_epoch + 1
    again = ok(d.init(expected=(a.producer_id, a.producer_epoch)))  # the reply to b was lost: a retry
    assert again.producer_epoch == b.producer_epoch


OLD_PID = 77


def _at_epoch(d: Driver, epoch: int, state: S = S.EMPTY, parts: frozenset = frozenset()) -> None:
    v = TxnLogValue(OLD_PID, epoch, 60_000, state, parts, 1, 1 if parts else -1, client_transaction_version=2)
    d.c.load(0, CEPOCH, [(encode_key(TID), encode_value(v))], d.now)


def test_init_with_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    d = Driver()
    _at_epoch(d, MAX_EPOCH - 1)
    r = ok(d.init())
    assert r.producer_id != OLD_PID and r.producer_epoch == 0
    assert d.m.previous_producer_id == OLD_PID


def test_end_txn_with_exhausted_epoch_rotates_the_producer_id_kip890() -> None:
    d = Driver()
    _at_epoch(d, MAX_EPOCH - 1, S.ONGOING, frozenset({TP_A}))
    r = ok(d.end(OLD_PID, MAX_EPOCH - 1, True))
    assert r.producer_epoch == MAX_EPOCH and d.markers[-1].producer_epoch == MAX_EPOCH
    assert d.m.state == S.COMPLETE_COMMIT and d.m.producer_id != OLD_PID and d.m.producer_epoch == 0
    # a retry of that EndTxn after the rotation is still recognised
    again = ok(d.end(OLD_PID, MAX_EPOCH - 1, True))
    assert again.producer_id == d.m.producer_id


# ---- KIP-890: the delayed EndTxn (Jepsen) --------------------------------------------------------

@pytest.mark.parametrize("late_commit", [True, False])
def test_late_end_txn_cannot_touch_the_next_transaction_with_the_bump(late_commit: bool) -> None:
    d = Driver(transaction_version=2)
    p = ok(d.init())
    ok(d.add(p.producer_id, p.producer_epoch, TP_A))
    r = ok(d.end(p.producer_id, p.producer_epoch, True))  # txn 1 committed; the reply carries epoch + 1
    e2 = r.producer_epoch
    assert e2 == p.producer_epoch + 1
    ok(d.add(p.producer_id, e2, TP_B))  # txn 2 open
    late = d.end(p.producer_id, p.producer_epoch, late_commit)  # txn 1's EndTxn, delayed past txn 2's start
    assert type(late.error) is ProducerFencedError
    assert d.m.state == S.ONGOING and d.m.partitions == {TP_B}
    n = len(d.markers)
    ok(d.end(p.producer_id, e2, True))
    assert [(m.topic, m.partition, m.committed) for m in d.markers[n:]] == [("out", 1, True)]


def test_without_the_bump_a_late_end_txn_aborts_the_next_transaction() -> None:
    """The anomaly KIP-890 removes: with transaction_version=1 the delayed abort hits txn 2."""
    d = Driver(transaction_version=1)
    p = ok(d.init())
    ok(d.add(p.producer_id, p.producer_epoch, TP_A))
    r = ok(d.end(p.producer_id, p.producer_epoch, True))
    assert r.producer_epoch == p.producer_epoch  # no bump
    ok(d.add(p.producer_id, p.producer_epoch, TP_B))
    n = len(d.markers)
    late = d.end(p.producer_id, p.producer_epoch, False)
    assert late.error is None  # accepted: txn 2 is aborted by txn 1's late message
    assert [(m.topic, m.partition, m.committed) for m in d.markers[n:]] == [("out", 1, False)]
    assert d.m.state == S.COMPLETE_ABORT


# ---- add offsets, verification ------------------------------------------------------------------

def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    d = Driver(offsets_partitions=50)
    p = ok(d.init())
    ok(d.settle(d.c.add_offsets(TID, p.producer_id, p.producer_epoch, "billing", d.now)))
    assert d.m.partitions == {(OFFSETS_TOPIC, partition_for_group("billing", 50))}


def test_verify_partitions_kip890_part1() -> None:
    d = Driver()
    p = ok(d.init())
    ok(d.add(p.producer_id, p.producer_epoch, TP_A))
    res = d.c.verify_partitions(TID, p.producer_id, p.producer_epoch, [TP_A, TP_C])
    assert res[TP_A] is None and type(res[TP_C]) is TransactionAbortableError
    stale = d.c.verify_partitions(TID, p.producer_id, p.producer_epoch - 1 if p.producer_epoch else 9, [TP_A])
    assert type(stale[TP_A]) is ProducerFencedError
    other = d.c.verify_partitions(TID, p.producer_id + 1, p.producer_epoch, [TP_A])
    assert type(other[TP_A]) is InvalidProducerIdMappingError
    d.end(p.producer_id, p.producer_epoch, True, ack_markers=False)
    busy = d.c.verify_partitions(TID, p.producer_id, p.producer_epoch + 1, [TP_A])
    assert type(busy[TP_A]) is ConcurrentTransactionsError


# ---- timeouts -----------------------------------------------------------------------------------

def test_timeout_aborts_and_fences_the_open_transaction() -> None:
    d = Driver()
    p = ok(d.init())
    d.now = 1_000
    ok(d.add(p.producer_id, p.producer_epoch, TP_A))
    assert d.c.abort_timed_out(1_000 + 60_000) == []  # start + timeout == now: not yet
    outs = d.c.abort_timed_out(1_000 + 60_001)
    assert len(outs) == 1 and not outs[0].reply and outs[0].append is not None
    r = d.settle(outs[0])
    assert not r.reply  # nobody waits for a timeout's abort
    assert [(m.topic, m.partition, m.committed) for m in d.markers] == [("out", 0, False)]
    assert d.markers[0].producer_epoch > p.producer_epoch
    assert d.m.state == S.COMPLETE_ABORT
    assert d.c.abort_timed_out(10**9) == []
    assert type(d.end(p.producer_id, p.producer_epoch, True).error) is ProducerFencedError
    assert type(d.add(p.producer_id, p.producer_epoch).error) is ProducerFencedError


# ---- append failures ----------------------------------------------------------------------------

def test_failed_append_changes_nothing_and_answers_the_error() -> None:
    d = Driver()
    p = ok(d.init())
    before = d.m
    out = d.c.add_partitions(TID, p.producer_id, p.producer_epoch, [TP_A], d.now)
    err = KafkaStorageError(5, "disk")
    r = d.c.on_log_append(TID, err, d.now)
    assert r.reply and r.error is err
    assert d.m == before and out.append is not None
    ok(d.add(p.producer_id, p.producer_epoch))  # and the retry works


def test_failed_complete_append_is_handed_back_for_retry() -> None:
    d = Driver()
    p = ok(d.init())
    ok(d.add(p.producer_id, p.producer_epoch, TP_A))
    end = d.c.end_txn(TID, p.producer_id, p.producer_epoch, True, d.now)
    r = d.c.on_log_append(TID, None, d.now)
    assert r.reply and r.error is None and len(r.markers) == 1
    last = d.c.on_marker_written(TID, "out", 0, d.now)
    assert last.append is not None and decode_value(last.append.value).state == S.COMPLETE_COMMIT  # type: ignore[union-attr]
    again = d.c.on_log_append(TID, KafkaStorageError(5, "disk"), d.now)
    assert again.append == last.append and d.m.state == S.PREPARE_COMMIT
    assert d.c.on_log_append(TID, None, d.now).error is None and d.m.state == S.COMPLETE_COMMIT
    assert end.append is not None


def test_failed_fence_does_not_bump_twice() -> None:
    d = Driver()
    p = ok(d.init())
    ok(d.add(p.producer_id, p.producer_epoch))
    first = d.c.init_producer_id(TID, 60_000, d.now)
    e1 = decode_value(first.append.value).producer_epoch  # type: ignore[union-attr]
    assert e1 == p.producer_epoch + 2  # the fence bump, then the abort's KIP-890 bump
    d.c.on_log_append(TID, KafkaStorageError(5, "disk"), d.now)
    assert d.m.state == S.ONGOING and d.m.has_failed_epoch_fence
    out = d.c.init_producer_id(TID, 60_000, d.now)
    assert decode_value(out.append.value).producer_epoch == e1  # type: ignore[union-attr]


# ---- failover -----------------------------------------------------------------------------------

@pytest.mark.parametrize("commit", [True, False])
def test_failover_completes_a_transaction_left_in_prepare(commit: bool) -> None:
    d = Driver()
    p = ok(d.init())
    ok(d.add(p.producer_id, p.producer_epoch, TP_A, TP_B))
    r = ok(d.end(p.producer_id, p.producer_epoch, commit, ack_markers=False))  # the coordinator dies here
    log = list(d.log)
    ids = itertools.count(5000)
    c2 = TransactionCoordinator(lambda: next(ids), partitions=1)
    outs = c2.load(0, CEPOCH + 1, log, 0)
    assert len(outs) == 1
    mk = outs[0].markers
    assert {(m.topic, m.partition) for m in mk} == {TP_A, TP_B}
    assert all(m.committed == commit and m.coordinator_epoch == CEPOCH + 1 and m.producer_id == p.producer_id
               and m.producer_epoch == r.producer_epoch for m in mk)
    retry = c2.end_txn(TID, p.producer_id, p.producer_epoch, commit, 0)  # the client's retry of its EndTxn
    assert type(retry.error) is ConcurrentTransactionsError
    c2.on_marker_written(TID, "out", 0, 0)
    fin = c2.on_marker_written(TID, "out", 1, 0)
    assert fin.append is not None and fin.append.coordinator_epoch == CEPOCH + 1
    c2.on_log_append(TID, None, 0)
    c2._check()
    assert c2.describe(TID).state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)  # type: ignore[union-attr]
    again = c2.end_txn(TID, p.producer_id, p.producer_epoch, commit, 0)
    assert again.error is None and again.producer_epoch == r.producer_epoch


def test_load_last_value_wins_tombstones_and_unknown_keys() -> None:
    c = TransactionCoordinator(lambda: 1, partitions=1)
    v1 = TxnLogValue(7, 0, 1000, S.EMPTY)
    v2 = TxnLogValue(7, 1, 1000, S.EMPTY)
    recs = [(encode_key("a"), encode_value(v1)), (encode_key("a"), encode_value(v2, 0)),
            (encode_key("b"), encode_value(v1)), (encode_key("b"), None), (b"\x00\x07junk", b"")]
    assert c.load(0, 1, recs, 0) == []
    assert c.transactional_ids() == ["a"] and c.describe("a").producer_epoch == 1  # type: ignore[union-attr]
    with pytest.raises(CorruptRecordError, match="record 1"):
        c.load(0, 1, [(encode_key("a"), encode_value(v1)), (encode_key("a"), b"\x00\x00\x01")], 0)


def test_unload_forgets_and_answers_not_coordinator() -> None:
    d = Driver()
    ok(d.init())
    d.c.unload(0)
    assert d.c.describe(TID) is None
    with pytest.raises(NotCoordinatorError):
        d.c.end_txn(TID, 1000, 0, True, 0)


# ---- every allowed transition is taken, and only those ------------------------------------------

class Recording(Driver):
    """A driver that records each (state before, state after) completed transition."""

    def __init__(self, **kw: object):
        super().__init__(**kw)  # type: ignore[arg-type]
        self.seen: set = set()
        orig = self.c.on_log_append

        def wrapped(tid: str, error: Optional[PylogError], now_ms: int) -> TxnOutcome:
            before = self.c.describe(tid)
            r = orig(tid, error, now_ms)
            after = self.c.describe(tid)
            if before is not None and after is not None and error is None and before.pending is not None:
                self.seen.add((before.state, after.state))
            return r
        self.c.on_log_append = wrapped  # type: ignore[method-assign,assignment]


def test_every_allowed_transition_is_taken_and_no_other() -> None:
    d = Recording()
    p = ok(d.init())                                       # Empty -> Empty (new id)
    p = ok(d.init())                                       # Empty -> Empty
    ok(d.add(p.producer_id, p.producer_epoch, TP_A))       # Empty -> Ongoing
    ok(d.add(p.producer_id, p.producer_epoch, TP_B))       # Ongoing -> Ongoing
    e = ok(d.end(p.producer_id, p.producer_epoch, True)).producer_epoch  # Ongoing -> PrepareCommit -> CompleteCommit
    ok(d.add(p.producer_id, e, TP_A))                      # CompleteCommit -> Ongoing
    e = ok(d.end(p.producer_id, e, False)).producer_epoch  # Ongoing -> PrepareAbort -> CompleteAbort
    ok(d.add(p.producer_id, e, TP_A))                      # CompleteAbort -> Ongoing
    assert type(d.init().error) is ConcurrentTransactionsError  # Ongoing -> PrepareAbort (fence) -> CompleteAbort
    p = ok(d.init())                                       # CompleteAbort -> Empty
    ok(d.add(p.producer_id, p.producer_epoch, TP_A))
    e = ok(d.end(p.producer_id, p.producer_epoch, True)).producer_epoch
    ok(d.init())                                           # CompleteCommit -> Empty
    allowed = {(prev, new) for new, prevs in VALID_PREVIOUS.items() for prev in prevs
               if S.DEAD not in (prev, new) and S.PREPARE_EPOCH_FENCE not in (prev, new)}
    assert d.seen == allowed


PENDING = {
    "init": lambda d, p: d.c.init_producer_id(TID, 60_000, d.now),
    "add": lambda d, p: d.c.add_partitions(TID, p.producer_id, p.producer_epoch, [TP_C], d.now),
    "commit": lambda d, p: d.c.end_txn(TID, p.producer_id, p.producer_epoch, True, d.now),
    "abort": lambda d, p: d.c.end_txn(TID, p.producer_id, p.producer_epoch, False, d.now),
    "fence": lambda d, p: d.c.init_producer_id(TID, 60_000, d.now),
}


@pytest.mark.parametrize("kind", list(PENDING))
def test_every_request_is_concurrent_while_an_append_is_pending(kind: str) -> None:
    d = Driver()
    p = ok(d.init())
    if kind != "init":
        ok(d.add(p.producer_id, p.producer_epoch, TP_A))
    out = PENDING[kind](d, p)
    assert out.append is not None and not out.reply
    m = d.m
    cur = m.producer_epoch
    for req in (d.c.init_producer_id(TID, 60_000, d.now),
                d.c.add_partitions(TID, p.producer_id, cur, [TP_B], d.now),
                d.c.end_txn(TID, p.producer_id, cur, True, d.now),
                d.c.end_txn(TID, p.producer_id, cur, False, d.now)):
        assert req.reply and type(req.error) is ConcurrentTransactionsError, (kind, req.error)
    assert d.m == m


@pytest.mark.parametrize("call", [
    lambda c: c.add_partitions(TID, 1, 0, [("out", -1)], 0),
    lambda c: c.add_partitions(TID, 1, 0, [("", 0)], 0),
    lambda c: c.add_partitions(TID, 1, 0, ["out-0"], 0),
    lambda c: c.add_partitions(TID, "1", 0, [TP_A], 0),
    lambda c: c.end_txn(TID, 1, 40000, True, 0),
    lambda c: c.end_txn(TID, 1, 0, "yes", 0),
    lambda c: c.init_producer_id(TID, "60000", 0),
    lambda c: c.init_producer_id(TID, 60000, 0, expected=(1,)),
    lambda c: c.verify_partitions(TID, -5, 0, [TP_A]),
    lambda c: c.add_offsets(TID, 1, 0, 7, 0),
])
def test_bad_arguments_raise_invalid_request(call: Callable[[TransactionCoordinator], object]) -> None:
    d = Driver()
    with pytest.raises(InvalidRequestError):
        call(d.c)


def test_load_skips_ids_of_other_partitions() -> None:
    c = TransactionCoordinator(lambda: 1, partitions=50)
    other = next(t for t in ("a", "b", "c", "d") if c.partition_for(t) != c.partition_for("x"))
    v = TxnLogValue(7, 0, 1000, S.EMPTY)
    c.load(c.partition_for("x"), 1, [(encode_key("x"), encode_value(v)), (encode_key(other), encode_value(v))], 0)
    assert c.transactional_ids() == ["x"]
    c._check()
