"""The transaction coordinator hosted on the brokers (issue 17 item 2, pylog/runtime/txn_host.py) and
KIP-890 part 1 on the produce path (pylog/replication/txn_verification.py), end to end on in-process
clusters (the seeded simulator, and one real-time cluster): the client's TransactionManager sends its
requests over the transport, transactional batches go in through ProduceRequest, and the markers, the
``__transaction_state`` records and the coordinator's state are read back from the brokers."""
from __future__ import annotations

import os
import random
import shutil
from typing import Any, Dict, List, Optional, Tuple

import pytest

from pylog.client._node import ClientNode
from pylog.client.txn_manager import ANY_NODE, TransactionManager, TxnState
from pylog.cluster import Cluster
from pylog.errors import (
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    NotCoordinatorError,
    ProducerFencedError,
    TransactionAbortableError,
)
from pylog.record import Record, encode_batch
from pylog.replication.messages import ACKS_ALL, ProduceRequest, ProduceResponse
from pylog.replication.txn_log import (
    TRANSACTION_STATE_TOPIC,
    TransactionState,
    decode_key,
    decode_value,
    partition_for_transactional_id,
)
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group
from pylog.replication.txn_messages import AddOffsetsToTxnRequest, EndTxnRequest, FindTransactionCoordinatorRequest
from pylog.storage.control_record import marker_of_batch

S = TransactionState
TID = "copier-1"


class Wire:
    """A client on the cluster's transport: sends requests, drives a TransactionManager, produces
    transactional batches (pylog.record helpers) to partition leaders."""

    def __init__(self, c: Cluster, name: str = "txntest"):
        self.c = c
        self.node = ClientNode(name, c.scheduler, c.transport)
        self.seqs: Dict[Tuple[int, int, str, int], int] = {}

    def send(self, dst: Any, make: Any, timeout_ms: int = 30_000) -> List[Any]:
        box: List[Any] = []
        self.c.scheduler.run_sync(lambda: self.node.request(dst, make(self.node.next_corr()), timeout_ms, box.append))
        return box

    def wait(self, box: List[Any], timeout_ms: int = 60_000) -> Any:
        for _ in range(timeout_ms // 10 + 10):
            if box:
                return box[0]
            self.c.advance(10)
        raise AssertionError("no answer")

    def call(self, dst: Any, make: Any, timeout_ms: int = 30_000) -> Any:
        return self.wait(self.send(dst, make, timeout_ms), timeout_ms + 1_000)

    def run(self, m: TransactionManager, steps: int = 400) -> None:
        """Send the manager's requests (any broker for a FindCoordinator) until it has none left."""
        for _ in range(steps):
            now = self.c.now_ms
            corr = self.node.next_corr()
            req = m.next_request(now, corr)
            if req is None:
                if not m.has_pending_request():
                    return
                self.c.advance(20)
                continue
            dst = req.node
            if dst == ANY_NODE:
                dst = next(b for b, br in sorted(self.c.brokers.items()) if br.running)
            box: List[Any] = []
            self.c.scheduler.run_sync(lambda: self.node.request(dst, req.message, 10_000, box.append))
            resp = self.wait(box, 20_000)
            if resp is None:
                m.on_no_response(corr, self.c.now_ms)
            else:
                m.on_response(resp, self.c.now_ms)
            m._check()
        raise AssertionError(f"the manager never finished: {m.state}")

    def produce(self, m: TransactionManager, topic: str, partition: int, values: List[bytes],
                *, epoch: Optional[int] = None, wait: bool = True) -> Any:
        """One transactional batch of ``m``'s producer (next sequence) to the partition's leader."""
        pid, ep = m.producer_id, m.producer_epoch if epoch is None else epoch
        key = (pid, ep, topic, partition)
        seq = self.seqs.get(key, 0)
        data = bytes(encode_batch([Record(value=v) for v in values], now_ms=self.c.now_ms, producer_id=pid,
                                  producer_epoch=ep, base_sequence=seq, transactional=True))
        self.seqs[key] = seq + len(values)
        leader = self.c.leader_of(topic, partition)
        box = self.send(leader, lambda corr: ProduceRequest(topic, partition, data, ACKS_ALL, 30_000, corr,
                                                           transactional_id=m.transactional_id))
        return self.wait(box) if wait else box


def sim_cluster(tmp_path: Any, seed: int = 17, **kwargs: Any) -> Cluster:
    c = Cluster(tmp_path, brokers=3, seed=seed, **kwargs)
    c.transaction_state_partitions = 3
    c.create_topic("out", partitions=3, replication_factor=3, min_insync_replicas=2)
    c.ensure_transaction_state_topic()
    return c


@pytest.fixture
def sim(tmp_path: Any) -> Any:
    c = sim_cluster(tmp_path)
    yield c
    c.close()


def coordinator_broker(c: Cluster, tid: str = TID) -> int:
    p = partition_for_transactional_id(tid, c.store.topics[TRANSACTION_STATE_TOPIC].partitions)
    return c.leader_of(TRANSACTION_STATE_TOPIC, p)


def txn_state(c: Cluster, tid: str = TID) -> Any:
    """The coordinator's view of ``tid`` on the broker that has it loaded (None when none has)."""
    for b in c.brokers.values():
        if b.running and b.txn is not None:
            m = b.txn.coordinator.describe(tid)
            if m is not None:
                return m
    return None


def wait_state(c: Cluster, state: TransactionState, tid: str = TID, timeout_ms: int = 60_000) -> Any:
    for _ in range(timeout_ms // 20):
        m = txn_state(c, tid)
        if m is not None and m.state == state and m.pending is None:
            return m
        c.advance(20)
    raise AssertionError(f"{tid} never reached {state.kafka_name}: {txn_state(c, tid)}")


def markers(c: Cluster, topic: str, partition: int, broker: Optional[int] = None) -> List[Tuple[int, int, bool, int]]:
    """(producer id, epoch, committed, coordinator epoch) of every marker in a replica's log."""
    b = c.leader_of(topic, partition) if broker is None else broker
    log = c.brokers[b].rm.partitions[(topic, partition)].log  # type: ignore[union-attr]
    out = []
    for batch in log.read_batches(0, 1 << 24):
        if batch.is_control:
            mk = marker_of_batch(batch)
            assert mk is not None
            out.append((batch.producer_id, batch.producer_epoch, mk.committed, mk.coordinator_epoch))
    return out


def state_records(c: Cluster, tid: str = TID) -> List[TransactionState]:
    """The states written for ``tid`` to its ``__transaction_state`` partition, in order (leader's log)."""
    p = partition_for_transactional_id(tid, c.store.topics[TRANSACTION_STATE_TOPIC].partitions)
    log = c.brokers[c.leader_of(TRANSACTION_STATE_TOPIC, p)].rm.partitions[(TRANSACTION_STATE_TOPIC, p)].log  # type: ignore[union-attr]
    out = []
    for batch in log.read_batches(0, 1 << 24):
        for r in batch.records():
            if decode_key(r.key) == tid:
                v = decode_value(r.value)
                assert v is not None
                out.append(v.state)
    return out


def init(w: Wire, tid: str = TID, **kwargs: Any) -> TransactionManager:
    m = TransactionManager(tid, **kwargs)
    r = m.init_transactions()
    w.run(m)
    assert r.done and r.error is None and m.state == TxnState.READY, r
    return m


def begin_with(w: Wire, m: TransactionManager, *tps: Tuple[str, int]) -> None:
    m.begin_transaction()
    for tp in tps:
        m.maybe_add_partition(tp)
    w.run(m)
    assert all(m.is_send_to_partition_allowed(tp) for tp in tps)


def _check_all(c: Cluster) -> None:
    for b in c.brokers.values():
        b._check()


# ---- commit and abort ---------------------------------------------------------------------------
def test_commit_writes_markers_on_every_partition_then_complete_commit(sim: Cluster) -> None:
    w = Wire(sim)
    m = init(w)
    pid, epoch = m.producer_id, m.producer_epoch
    begin_with(w, m, ("out", 0), ("out", 2))
    for tp in (("out", 0), ("out", 2)):
        for vals in ([b"a", b"b"], [b"c"]):
            resp = w.produce(m, tp[0], tp[1], vals)
            assert isinstance(resp, ProduceResponse) and resp.error is None, resp
    assert sim.brokers[sim.leader_of("out", 0)].rm.partitions[("out", 0)].last_stable_offset == 0  # type: ignore[union-attr]
    r = m.commit_transaction()
    w.run(m)
    assert r.done and r.error is None and m.producer_epoch == epoch + 1  # KIP-890: the bumped epoch
    wait_state(sim, S.COMPLETE_COMMIT)
    state_p = partition_for_transactional_id(TID, 3)
    coordinator_epoch = sim.store.partitions[(TRANSACTION_STATE_TOPIC, state_p)].leader_epoch
    for p in (0, 2):
        for b in sim.store.partitions[("out", p)].isr:  # every in-sync replica has the marker
            assert markers(sim, "out", p, b) == [(pid, epoch + 1, True, coordinator_epoch)], (p, b)
        leader = sim.brokers[sim.leader_of("out", p)].rm.partitions[("out", p)]  # type: ignore[union-attr]
        assert leader.last_stable_offset == leader.high_watermark == 4
    assert markers(sim, "out", 1) == []  # not in the transaction
    assert state_records(sim) == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    _check_all(sim)


def test_abort_writes_abort_markers_and_the_txnindex(sim: Cluster) -> None:
    w = Wire(sim)
    m = init(w)
    pid, epoch = m.producer_id, m.producer_epoch
    begin_with(w, m, ("out", 1))
    first = w.produce(m, "out", 1, [b"x", b"y"]).base_offset
    r = m.abort_transaction()
    w.run(m)
    assert r.done and r.error is None
    wait_state(sim, S.COMPLETE_ABORT)
    assert [mk[:3] for mk in markers(sim, "out", 1)] == [(pid, epoch + 1, False)]
    log = sim.brokers[sim.leader_of("out", 1)].rm.partitions[("out", 1)].log  # type: ignore[union-attr]
    assert [(a.producer_id, a.first_offset) for a in log.aborted_transactions(0, log.log_end_offset)] == [(pid, first)]
    # the next transaction runs at the bumped epoch and commits
    begin_with(w, m, ("out", 1))
    assert w.produce(m, "out", 1, [b"z"]).error is None
    m.commit_transaction()
    w.run(m)
    wait_state(sim, S.COMPLETE_COMMIT)
    assert [mk[1:3] for mk in markers(sim, "out", 1)] == [(epoch + 1, False), (epoch + 2, True)]
    _check_all(sim)


def test_find_coordinator_names_the_leader_of_the_ids_partition(sim: Cluster) -> None:
    w = Wire(sim)
    for b in sim.brokers:
        resp = w.call(b, lambda corr: FindTransactionCoordinatorRequest(TID, corr))
        assert resp.error is None and resp.node_id == coordinator_broker(sim)


# ---- fencing ------------------------------------------------------------------------------------
def test_second_init_fences_the_first_and_aborts_its_open_transaction(sim: Cluster) -> None:
    w = Wire(sim)
    m1 = init(w)
    pid, e = m1.producer_id, m1.producer_epoch
    begin_with(w, m1, ("out", 0))
    assert w.produce(m1, "out", 0, [b"zombie"]).error is None
    m2 = init(w)  # answered ConcurrentTransactions first (the abort), then a new epoch
    assert (m2.producer_id, m2.producer_epoch) == (pid, e + 3)
    wait_state(sim, S.EMPTY)
    # the open transaction was aborted with the bumped epochs (fence + 1, KIP-890 abort + 1)
    assert [mk[:3] for mk in markers(sim, "out", 0)] == [(pid, e + 2, False)]
    assert state_records(sim) == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]
    # the zombie: its batches are refused by the partition, its commit by the coordinator
    assert w.produce(m1, "out", 0, [b"late"]).error is InvalidProducerEpochError
    c = m1.commit_transaction()
    w.run(m1)
    assert isinstance(c.error, ProducerFencedError) and m1.state == TxnState.FATAL_ERROR
    _check_all(sim)


def test_transaction_open_longer_than_its_timeout_is_aborted(tmp_path: Any) -> None:
    c = sim_cluster(tmp_path, transaction_abort_timed_out_transaction_cleanup_interval_ms=200)
    try:
        w = Wire(c)
        m = init(w, transaction_timeout_ms=1_000)
        pid, e = m.producer_id, m.producer_epoch
        begin_with(w, m, ("out", 2))
        assert w.produce(m, "out", 2, [b"slow"]).error is None
        c.advance(500)
        assert txn_state(c).state == S.ONGOING  # not yet
        wait_state(c, S.COMPLETE_ABORT, timeout_ms=5_000)
        assert [mk[:3] for mk in markers(c, "out", 2)] == [(pid, e + 2, False)]
        r = m.commit_transaction()
        w.run(m)
        assert isinstance(r.error, ProducerFencedError)  # the timeout fenced the producer
        _check_all(c)
    finally:
        c.close()


# ---- failover -----------------------------------------------------------------------------------
def test_new_coordinator_completes_a_transaction_left_in_prepare_commit(tmp_path: Any) -> None:
    """The coordinator crashes after PrepareCommit while a partition of the transaction has no leader
    (its only replica is down, so no marker can be written there); the broker that takes over the
    ``__transaction_state`` partition loads PrepareCommit and writes every marker with its own
    coordinator epoch once the partition is back."""
    c = sim_cluster(tmp_path, seed=23)
    try:
        tid = next(t for t in (f"copier-{i}" for i in range(100)) if coordinator_broker(c, t) == 0)
        c.create_topic("solo", partitions=1, replication_factor=1, start_index=1)  # on broker 1 only
        assert c.store.partitions[("solo", 0)].replicas == (1,)
        w = Wire(c)
        m = init(w, tid)
        pid, e = m.producer_id, m.producer_epoch
        begin_with(w, m, ("out", 0), ("solo", 0))
        assert w.produce(m, "out", 0, [b"a"]).error is None
        assert w.produce(m, "solo", 0, [b"b"]).error is None
        state_p = partition_for_transactional_id(tid, 3)
        old_epoch = c.store.partitions[(TRANSACTION_STATE_TOPIC, state_p)].leader_epoch
        c.stop_broker(1, clean=False)  # solo-0 has no leader now
        r = m.commit_transaction()
        w.run(m)
        assert r.done and r.error is None  # answered once PrepareCommit is in the log
        c.advance(1_000)
        assert txn_state(c, tid).state == S.PREPARE_COMMIT
        c.stop_broker(0, clean=False)  # the coordinator crashes in PrepareCommit
        c.start_broker(1)
        m2 = wait_state(c, S.COMPLETE_COMMIT, tid, timeout_ms=120_000)
        new_epoch = c.store.partitions[(TRANSACTION_STATE_TOPIC, state_p)].leader_epoch
        assert new_epoch > old_epoch and m2.producer_epoch == e + 1
        assert coordinator_broker(c, tid) != 0
        assert [mk for mk in markers(c, "solo", 0)] == [(pid, e + 1, True, new_epoch)]
        # out-0 may have the old coordinator's marker, then the new one's (a duplicate: it completes nothing)
        out_markers = markers(c, "out", 0)
        assert out_markers[-1] == (pid, e + 1, True, new_epoch) and all(mk[:3] == (pid, e + 1, True) for mk in out_markers)
        assert c.brokers[c.leader_of("out", 0)].rm.partitions[("out", 0)].log.producer_state.first_unstable_offset is None  # type: ignore[union-attr]
        _check_all(c)
    finally:
        c.close()


def test_requests_to_a_broker_that_lost_the_partition_get_not_coordinator(sim: Cluster) -> None:
    w = Wire(sim)
    m = init(w)
    old = coordinator_broker(sim)
    sim.stop_broker(old, clean=True)  # controlled shutdown: leadership moves first
    sim.start_broker(old)
    sim.advance(1_000)
    assert coordinator_broker(sim) != old  # (seeded: the leadership stays with the broker it moved to)
    assert sim.brokers[old].txn.coordinator.loaded_partitions() == []  # type: ignore[union-attr]
    resp = w.call(old, lambda corr: EndTxnRequest(TID, m.producer_id, m.producer_epoch, True, corr))
    assert resp.error is NotCoordinatorError
    begin_with(w, m, ("out", 0))  # the manager looks the coordinator up again
    m.commit_transaction()
    w.run(m)
    wait_state(sim, S.COMPLETE_COMMIT)


# ---- KIP-890 part 1 -----------------------------------------------------------------------------
def test_transactional_produce_to_a_partition_not_added_is_refused(sim: Cluster) -> None:
    w = Wire(sim)
    m = init(w)
    begin_with(w, m, ("out", 0))
    resp = w.produce(m, "out", 1, [b"sneaky"])  # out-1 was never added
    assert resp.error is TransactionAbortableError, resp
    log = sim.brokers[sim.leader_of("out", 1)].rm.partitions[("out", 1)].log  # type: ignore[union-attr]
    assert log.log_end_offset == 0  # nothing appended
    m.maybe_add_partition(("out", 1))
    w.run(m)
    w.seqs.clear()
    resp = w.produce(m, "out", 1, [b"now added"])
    assert resp.error is None and log.log_end_offset == 1


def test_batches_waiting_for_verification_are_appended_in_order(sim: Cluster) -> None:
    w = Wire(sim)
    m = init(w)
    begin_with(w, m, ("out", 2))
    boxes = [w.produce(m, "out", 2, [f"v{i}".encode()], wait=False) for i in range(3)]
    resps = [w.wait(b) for b in boxes]
    assert [r.error for r in resps] == [None, None, None]
    assert [r.base_offset for r in resps] == [0, 1, 2]


def test_a_fenced_producer_is_refused_at_verification(sim: Cluster) -> None:
    w = Wire(sim)
    m1 = init(w)
    m2 = init(w)  # m1 fenced (no open transaction: nothing to abort)
    assert m2.producer_epoch == m1.producer_epoch + 1
    resp = w.produce(m1, "out", 0, [b"zombie"])
    assert resp.error is InvalidProducerEpochError  # the coordinator's ProducerFenced, as Kafka maps it


# ---- real time ----------------------------------------------------------------------------------
def test_commit_on_a_real_time_cluster(tmp_path: Any) -> None:
    with Cluster(tmp_path, brokers=3) as c:
        c.transaction_state_partitions = 2
        c.create_topic("out", partitions=2, replication_factor=3, min_insync_replicas=2)
        c.ensure_transaction_state_topic()
        w = Wire(c)
        m = init(w)
        begin_with(w, m, ("out", 0), ("out", 1))
        for p in (0, 1):
            assert w.produce(m, "out", p, [b"r"]).error is None
        r = m.commit_transaction()
        w.run(m)
        assert r.done and r.error is None
        wait_state(c, S.COMPLETE_COMMIT)
        for p in (0, 1):
            assert [mk[2] for mk in markers(c, "out", p)] == [True]



def test_markers_unanswered_by_a_crashed_leader_go_to_the_next_one(tmp_path: Any) -> None:
    """The coordinator's markers to a partition leader are lost (a one-way cut), then that leader
    crashes: once the metadata names another leader, the request is given up and the markers go there."""
    c = Cluster(tmp_path, brokers=4, seed=29)
    try:
        c.transaction_state_partitions = 1
        c.ensure_transaction_state_topic()
        coord = c.leader_of(TRANSACTION_STATE_TOPIC, 0)
        outsider = next(b for b in c.brokers if b not in c.store.partitions[(TRANSACTION_STATE_TOPIC, 0)].replicas)
        start = next(i for i in range(4) if outsider == sorted(c.brokers)[i])
        c.create_topic("d", partitions=1, replication_factor=2, start_index=start, shift=0)
        replicas = c.store.partitions[("d", 0)].replicas
        assert replicas[0] == outsider and coord not in replicas, (replicas, coord)
        w = Wire(c)
        m = init(w)
        pid, e = m.producer_id, m.producer_epoch
        begin_with(w, m, ("d", 0))
        assert w.produce(m, "d", 0, [b"a"]).error is None
        c.partition_network([coord], [outsider], one_way=True)  # the markers to the leader are lost
        r = m.commit_transaction()
        w.run(m)
        assert r.done and r.error is None
        c.advance(2_000)
        host = c.brokers[coord].txn
        assert host is not None and host.markers_sent == 1 and host.markers_written == 0
        assert txn_state(c).state == S.PREPARE_COMMIT
        c.stop_broker(outsider, clean=False)
        # virtual time: well before the request's 30 s timeout, the leader change gives it up
        wait_state(c, S.COMPLETE_COMMIT, timeout_ms=10_000)
        assert host.markers_sent >= 2 and host.markers_written == 1  # sent again (until the new leader has it)
        assert c.leader_of("d", 0) == replicas[1]
        assert [mk[:3] for mk in markers(c, "d", 0)] == [(pid, e + 1, True)]
        _check_all(c)
    finally:
        c.close()


def test_add_offsets_puts_the_groups_offsets_partition_in_the_transaction(sim: Cluster) -> None:
    w = Wire(sim)
    m = init(w)
    pid, e = m.producer_id, m.producer_epoch
    coord = coordinator_broker(sim)
    no_topic = w.call(coord, lambda corr: AddOffsetsToTxnRequest(TID, pid, e, "g", corr))
    assert no_topic.error is CoordinatorNotAvailableError  # no __consumer_offsets yet: retriable
    sim.ensure_offsets_topic()
    resp = w.call(coord, lambda corr: AddOffsetsToTxnRequest(TID, pid, e, "g", corr))
    assert resp.error is None
    gp = partition_for_group("g", sim.store.topics[OFFSETS_TOPIC].partitions)
    assert txn_state(sim).partitions == {(OFFSETS_TOPIC, gp)}
    end = w.call(coord, lambda corr: EndTxnRequest(TID, pid, e, True, corr))
    assert end.error is None and (end.producer_id, end.producer_epoch) == (pid, e + 1)
    wait_state(sim, S.COMPLETE_COMMIT)
    assert [mk[:3] for mk in markers(sim, OFFSETS_TOPIC, gp)] == [(pid, e + 1, True)]


# ---- seeded crashes -----------------------------------------------------------------------------
RETRIABLE_PRODUCE = ("NotLeaderError", "NotEnoughReplicasError", "NotEnoughReplicasAfterAppendError",
                     "RequestTimedOutError", "UnknownTopicOrPartitionError")


def produce_until_answered(w: Wire, m: TransactionManager, topic: str, partition: int, value: bytes) -> Optional[type]:
    """One transactional batch, resent (same bytes) to whoever leads until it is acknowledged or
    refused for good; the final error class (None: appended)."""
    pid, ep = m.producer_id, m.producer_epoch
    key = (pid, ep, topic, partition)
    seq = w.seqs.get(key, 0)
    data = bytes(encode_batch([Record(value=value)], now_ms=w.c.now_ms, producer_id=pid, producer_epoch=ep,
                              base_sequence=seq, transactional=True))
    for _ in range(300):
        leader = w.c.leader_of(topic, partition)
        resp = None
        if leader >= 0 and w.c.brokers[leader].running:
            resp = w.call(leader, lambda corr: ProduceRequest(topic, partition, data, ACKS_ALL, 5_000, corr,
                                                              transactional_id=m.transactional_id), 5_000)
        if resp is not None and resp.error is None:
            w.seqs[key] = seq + 1
            return None
        if resp is not None and resp.error.__name__ not in RETRIABLE_PRODUCE:
            return resp.error  # type: ignore[no-any-return]
        w.c.advance(100)
    raise AssertionError(f"{topic}-{partition}: never answered")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_transactions_stay_atomic_across_random_coordinator_crashes(tmp_path: Any, seed: int) -> None:
    """Seeded: transactions over random partitions, committed or aborted at random, while the broker
    leading the ``__transaction_state`` partition (or another broker) crashes at a random moment (and
    comes back). After
    everything settles: no transaction is left open on any partition, the markers of each producer
    epoch agree across partitions, and every commit the client saw succeed has its COMMIT marker on
    every partition it wrote to. Replay one: ``pytest tests/unit/test_txn_host.py -k 'random and <seed>'``;
    more seeds: ``PYLOG_SOAK=1 pytest tests/unit/test_txn_host.py -m soak`` (PYLOG_SOAK_SEEDS, default 300)."""
    crash_scenario(tmp_path, seed)


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(os.environ.get("PYLOG_SOAK") != "1", reason="soak run: set PYLOG_SOAK=1")
def test_soak_transactions_across_random_coordinator_crashes(tmp_path: Any) -> None:
    for seed in range(1000, 1000 + int(os.environ.get("PYLOG_SOAK_SEEDS", "300"))):
        crash_scenario(tmp_path / f"seed-{seed}", seed)
        shutil.rmtree(tmp_path / f"seed-{seed}", ignore_errors=True)


def crash_scenario(tmp_path: Any, seed: int) -> None:
    rng = random.Random(seed)
    c = Cluster(tmp_path, brokers=3, seed=seed)
    try:
        c.transaction_state_partitions = 1
        c.create_topic("out", partitions=3, replication_factor=3, min_insync_replicas=2)
        c.ensure_transaction_state_topic()
        w = Wire(c)
        m = init(w)
        committed: List[Tuple[int, int, List[int]]] = []  # (pid, epoch of the markers, partitions)
        def down() -> List[int]:
            return [b for b, br in sorted(c.brokers.items()) if not br.running]

        for t in range(6):
            if down() and rng.random() < 0.6:
                c.start_broker(down()[0])
            parts = sorted(rng.sample(range(3), rng.randint(1, 3)))
            m.begin_transaction()
            for p in parts:
                m.maybe_add_partition(("out", p))
            w.run(m)
            if m.state != TxnState.IN_TRANSACTION:
                assert m.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR), m.state
            failed = None
            for p in parts:
                if m.state == TxnState.IN_TRANSACTION:
                    failed = produce_until_answered(w, m, "out", p, f"{t}-{p}".encode()) or failed
            if failed is not None:
                m.on_batch_error(("out", parts[0]), failed(f"{failed.__name__}"))
            commit = failed is None and m.state == TxnState.IN_TRANSACTION and rng.random() < 0.7
            pid, epoch = m.producer_id, m.producer_epoch
            # the coordinator, or (one time in three) any broker: a leader of the transaction's partitions
            victim = c.leader_of(TRANSACTION_STATE_TOPIC, 0) if rng.random() < 0.67 else rng.randrange(3)
            if not down() and victim >= 0 and rng.random() < 0.7:  # at most one broker down at a time
                c.scheduler.call_later(rng.randint(0, 40), c.brokers[victim].stop, False)
            if m.state == TxnState.FATAL_ERROR:
                m = init(w)  # a restarted copier with the same transactional id
                continue
            r = m.commit_transaction() if commit else m.abort_transaction()
            w.run(m, steps=2_000)
            if commit and r.error is None:
                committed.append((pid, epoch + 1, parts))
            if m.state != TxnState.READY:
                m = init(w)
        c.advance(100)  # a crash scheduled in the last round has happened
        for b in down():
            c.start_broker(b)
        wait_state_in(c, (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT))
        c.advance(2_000)
        assert c.scheduler.wait_until(lambda: c._serving([("out", p) for p in range(3)]), 60_000)
        by_epoch: Dict[Tuple[int, int], set] = {}
        for p in range(3):
            leader = c.brokers[c.leader_of("out", p)].rm.partitions[("out", p)]  # type: ignore[union-attr]
            assert leader.log.producer_state.first_unstable_offset is None, (p, leader.log.producer_state.ongoing)
            for pid, ep, result, _ in markers(c, "out", p):
                by_epoch.setdefault((pid, ep), set()).add(result)
        assert all(len(results) == 1 for results in by_epoch.values()), by_epoch  # atomic
        for pid, ep, parts in committed:
            for p in parts:
                assert (pid, ep, True) in [mk[:3] for mk in markers(c, "out", p)], (pid, ep, p)
        assert committed, "no transaction committed: the scenario tests nothing"
        _check_all(c)
    finally:
        c.close()


def wait_state_in(c: Cluster, states: Tuple[TransactionState, ...], tid: str = TID, timeout_ms: int = 120_000) -> Any:
    for _ in range(timeout_ms // 50):
        m = txn_state(c, tid)
        if m is not None and m.state in states and m.pending is None:
            return m
        c.advance(50)
    raise AssertionError(f"{tid} never settled: {txn_state(c, tid)}")
