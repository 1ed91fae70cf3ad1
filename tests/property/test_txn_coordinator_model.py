"""The transaction coordinator under random requests, append results, marker acks, timeouts and failovers.

A hypothesis state machine drives one coordinator (and its successors after a
failover) for two transactional ids with requests carrying current and stale
epochs, appends that succeed or fail, markers acknowledged in any order,
timeouts, and failovers (a new coordinator loads the acknowledged log; what the
old one had in flight is lost). After every step:

* ``_check()`` holds (Kafka's state invariants);
* every refusal is one of Kafka's transaction errors;
* the log is the truth: a coordinator loaded from the acknowledged records has
  the live one's state, producer id and epoch for every id whose last transition
  completed (nothing half-applied);
* with the KIP-890 bump, every (transactional id, producer id, epoch) of a marker
  names one outcome: no marker of the same epoch says COMMIT once and ABORT
  another time (without the bump - the test-only switch - this is exactly what
  fails, as ``test_txn_coordinator`` shows with the delayed EndTxn).
"""
from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Set, Tuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pylog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaStorageError,
    ProducerFencedError,
    PylogError,
)
from pylog.replication.txn_coordinator import TransactionCoordinator, TxnLogAppend, TxnMarker, TxnOutcome
from pylog.replication.txn_log import TransactionState as S

TIDS = ("t1", "t2")
TPS = [("out", 0), ("out", 1), ("in", 0)]
EXPECTED = (ConcurrentTransactionsError, InvalidProducerIdMappingError, InvalidTxnStateError, ProducerFencedError,
            KafkaStorageError)  # the last: a failed append, answered with its error


class CoordinatorMachine(RuleBasedStateMachine):
    transaction_version = 2

    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count(1)
        self.cepoch = 0
        self.c = self._new()
        self.log: List[Tuple[bytes, Optional[bytes]]] = []
        self.appends: Dict[str, TxnLogAppend] = {}
        self.markers: List[Tuple[str, TxnMarker]] = []
        self.epochs: Dict[str, Set[Tuple[int, int]]] = {t: set() for t in TIDS}  # (pid, epoch) seen per id
        self.outcomes: Dict[Tuple[str, int, int], bool] = {}
        self.latest: Dict[str, Tuple[int, int]] = {}  # the last (pid, epoch) a reply handed out, per id
        self.now = 0
        self._handle_all(self.c.load(0, self.cepoch, [], self.now))

    def _new(self) -> TransactionCoordinator:
        c = TransactionCoordinator(lambda: next(self.ids), partitions=1, transaction_version=self.transaction_version)
        return c

    def _handle(self, out: TxnOutcome) -> None:
        if out.reply and out.error is not None:
            assert isinstance(out.error, EXPECTED), out.error
        if out.reply and out.error is None and out.producer_id >= 0:
            self.epochs[out.transactional_id].add((out.producer_id, out.producer_epoch))
            self.latest[out.transactional_id] = (out.producer_id, out.producer_epoch)
        if out.append is not None:
            assert out.transactional_id not in self.appends
            self.appends[out.transactional_id] = out.append
        for mk in out.markers:
            self.markers.append((out.transactional_id, mk))
            if self.transaction_version >= 2:
                key = (out.transactional_id, mk.producer_id, mk.producer_epoch)
                assert self.outcomes.setdefault(key, mk.committed) == mk.committed, (key, mk)

    def _handle_all(self, outs: List[TxnOutcome]) -> None:
        for o in outs:
            self._handle(o)

    def _producer(self, data: st.DataObject, tid: str) -> Tuple[int, int]:
        known = sorted(self.epochs[tid])
        if not known:  # no producer yet: a made-up one (refused) now and then, else initialize
            return (99, 0)
        if data.draw(st.sampled_from([True, True, True, False])):  # mostly the producer's current epoch
            return self.latest[tid]
        pid, epoch = data.draw(st.sampled_from(known))
        return pid, max(0, epoch + data.draw(st.sampled_from([0, 0, 0, 0, 0, -1, 1, -2])))

    @rule(tid=st.sampled_from(TIDS), timeout=st.sampled_from([200, 100_000]))
    def init(self, tid: str, timeout: int) -> None:
        self._handle(self.c.init_producer_id(tid, timeout, self.now))

    @rule(tid=st.sampled_from(TIDS), tps=st.sets(st.sampled_from(TPS), min_size=1, max_size=2), data=st.data())
    def add(self, tid: str, tps: Set[Tuple[str, int]], data: st.DataObject) -> None:
        if not self.epochs[tid] and data.draw(st.booleans()):
            return self.init(tid, 100_000)
        pid, epoch = self._producer(data, tid)
        self._handle(self.c.add_partitions(tid, pid, epoch, sorted(tps), self.now))

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans(), data=st.data())
    def end(self, tid: str, commit: bool, data: st.DataObject) -> None:
        if not self.epochs[tid] and data.draw(st.booleans()):
            return self.init(tid, 100_000)
        pid, epoch = self._producer(data, tid)
        self._handle(self.c.end_txn(tid, pid, epoch, commit, self.now))

    @precondition(lambda self: bool(self.appends))
    @rule(data=st.data(), ok=st.sampled_from([True, True, True, False]))
    def append_done(self, data: st.DataObject, ok: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.appends)))
        rec = self.appends.pop(tid)
        if ok:
            self.log.append((rec.key, rec.value))
        self._handle(self.c.on_log_append(tid, None if ok else KafkaStorageError(5, "disk"), self.now))

    @precondition(lambda self: bool(self.markers))
    @rule(data=st.data())
    def marker_done(self, data: st.DataObject) -> None:
        tid, mk = self.markers.pop(data.draw(st.integers(0, len(self.markers) - 1)))
        self._handle(self.c.on_marker_written(tid, mk.topic, mk.partition, self.now))

    @precondition(lambda self: bool(self.appends or self.markers))
    @rule()
    def settle(self) -> None:
        """Every append succeeds and every marker is acknowledged, until nothing is left in flight."""
        while self.appends or self.markers:
            if self.appends:
                tid, rec = sorted(self.appends.items())[0]
                del self.appends[tid]
                self.log.append((rec.key, rec.value))
                self._handle(self.c.on_log_append(tid, None, self.now))
            else:
                tid, mk = self.markers.pop(0)
                self._handle(self.c.on_marker_written(tid, mk.topic, mk.partition, self.now))

    @rule(dt=st.integers(1, 150))
    def tick(self, dt: int) -> None:
        self.now += dt
        self._handle_all(self.c.abort_timed_out(self.now))

    @rule()
    def failover(self) -> None:
        self.cepoch += 1
        self.c = self._new()
        self.appends.clear()  # the old coordinator's in-flight work is lost
        self.markers.clear()
        self._handle_all(self.c.load(0, self.cepoch, list(self.log), self.now))

    @invariant()
    def consistent(self) -> None:
        self.c._check()
        fresh = TransactionCoordinator(lambda: 10**9, partitions=1, transaction_version=self.transaction_version)
        fresh.load(0, self.cepoch, list(self.log), self.now)
        for tid in self.c.transactional_ids():
            live = self.c.describe(tid)
            assert live is not None
            if live.has_failed_epoch_fence or (live.pending is not None and live.pending.kind != "complete"):
                continue  # an in-memory epoch bump, or a transition whose record is not in yet
            if live.producer_epoch < 0:
                assert fresh.describe(tid) is None  # created, its first record not in the log yet
                continue
            logged = fresh.describe(tid)
            assert logged is not None, tid
            assert (logged.state, logged.producer_id, logged.producer_epoch) == \
                (live.state, live.producer_id, live.producer_epoch), tid
            if live.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):  # markers being acked shrink the live set
                assert logged.partitions == live.partitions, tid


class CoordinatorMachineWithoutBump(CoordinatorMachine):
    transaction_version = 1


TestCoordinatorModel = CoordinatorMachine.TestCase
TestCoordinatorModelWithoutBump = CoordinatorMachineWithoutBump.TestCase
