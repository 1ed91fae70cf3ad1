"""The transactional Producer (issue 17 item 1): the TransactionManager wired into Producer/Sender.

These tests run on a simulated in-process cluster whose brokers do not host a transaction
coordinator: :class:`StandIn` answers the transactional requests on every broker with the real
:class:`~pylog.replication.txn_coordinator.TransactionCoordinator` (its appends acknowledged at once)
and writes its COMMIT/ABORT markers straight into the leader's log (RF 1), so what is checked is the
client: the calls and their state errors, the requests and their order, the batches' bits, producer
id, epoch and sequences, the futures. The end-to-end tests on brokers that host the coordinator are
tests/sim/test_transactions_producer.py.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

from pylog.client.txn_manager import TxnState
from pylog.client.types import OffsetAndMetadata, TopicPartition
from pylog.cluster import Cluster
from pylog.errors import (
    InvalidConfigurationError,
    InvalidGroupIdError,
    InvalidTxnStateError,
    ProducerClosedError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from pylog.replication import group_messages as gm
from pylog.replication import txn_messages as tm
from pylog.replication.messages import InitProducerIdResponse, MultiProduceRequest, ProduceRequest
from pylog.replication.txn_coordinator import TransactionCoordinator, TxnOutcome
from pylog.storage.control_record import marker_of_batch

TID = "copier-1"
_TXN_REQUESTS = (tm.FindTransactionCoordinatorRequest, tm.InitProducerIdRequest, tm.AddPartitionsToTxnRequest,
                 tm.AddOffsetsToTxnRequest, tm.TxnOffsetCommitRequest, tm.EndTxnRequest)


class StandIn:
    """The transaction coordinator (and a toy TxnOffsetCommit) behind every broker of ``c``."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        pids = iter(range(1000, 2000))
        self.coord = TransactionCoordinator(lambda: next(pids), partitions=1)
        assert self.coord.load(0, 0, [], 0) == []
        self.seen: List[Any] = []  # transactional requests and produce requests, in arrival order
        self.hold: Set[type] = set()  # request classes left unanswered
        self.fail: Dict[type, Any] = {}  # request class -> error class answered (once)
        self.pending_offsets: Dict[Tuple[int, str], Dict[Tuple[str, int], int]] = {}
        self.committed_offsets: Dict[str, Dict[Tuple[str, int], int]] = {}
        for bid in list(c.brokers):
            inner = c.transport.handlers[bid]
            c.transport.handlers[bid] = self._wrap(bid, inner)
            verifier = getattr(c.brokers[bid].rm, "txn_verifier", None)
            if verifier is not None:  # KIP-890 part 1 would ask the brokers' own coordinator, not this one
                verifier.coordinator_for = None

    def _wrap(self, bid: int, inner: Any) -> Any:
        def handler(src: Any, msg: Any) -> None:
            if isinstance(msg, (ProduceRequest, MultiProduceRequest)):
                self.seen.append(msg)
            if not isinstance(msg, _TXN_REQUESTS):
                inner(src, msg)
                return
            self.seen.append(msg)
            if type(msg) in self.hold:
                return
            err = self.fail.pop(type(msg), None)
            resp = self._answer(bid, msg) if err is None else self._error(msg, err)
            self.c.transport.send(bid, src, resp)
        return handler

    @staticmethod
    def _error(msg: Any, err: type) -> Any:
        c = msg.correlation_id
        return {tm.InitProducerIdRequest: lambda: InitProducerIdResponse(c, error=err),
                tm.AddPartitionsToTxnRequest: lambda: tm.AddPartitionsToTxnResponse(c, error=err),
                tm.AddOffsetsToTxnRequest: lambda: tm.AddOffsetsToTxnResponse(c, error=err),
                tm.TxnOffsetCommitRequest: lambda: tm.TxnOffsetCommitResponse(c, error=err),
                tm.EndTxnRequest: lambda: tm.EndTxnResponse(c, error=err)}[type(msg)]()

    def _drive(self, out: TxnOutcome) -> TxnOutcome:
        now = self.c.scheduler.clock.now_ms()
        reply = out if out.reply else None
        todo = [out]
        while todo:
            o = todo.pop(0)
            for mk in o.markers:
                self._write_marker(mk)
                todo.append(self.coord.on_marker_written(o.transactional_id, mk.topic, mk.partition, now))
            if o.append is not None:
                nxt = self.coord.on_log_append(o.transactional_id, None, now)
                if nxt.reply and reply is None:
                    reply = nxt
                todo.append(nxt)
        return reply if reply is not None else TxnOutcome("", reply=True)

    def _write_marker(self, mk: Any) -> None:
        if mk.topic == "__consumer_offsets":
            for (pid, group), offs in list(self.pending_offsets.items()):
                if pid == mk.producer_id:
                    if mk.committed:
                        self.committed_offsets.setdefault(group, {}).update(offs)
                    del self.pending_offsets[(pid, group)]
            return
        st = self.c.store.partitions[(mk.topic, mk.partition)]
        part = self.c.brokers[st.leader].rm.partitions[(mk.topic, mk.partition)]
        part.log.append_marker(mk.producer_id, mk.producer_epoch, mk.committed, mk.coordinator_epoch,
                               part.leader_epoch)

    def _answer(self, bid: int, msg: Any) -> Any:
        c, now = msg.correlation_id, self.c.scheduler.clock.now_ms()
        if isinstance(msg, tm.FindTransactionCoordinatorRequest):
            return gm.FindCoordinatorResponse(c, node_id=bid)
        if isinstance(msg, tm.TxnOffsetCommitRequest):
            self.pending_offsets.setdefault((msg.producer_id, msg.group_id), {}).update(
                {(t, p): off for t, p, off, _, _ in msg.offsets})
            return tm.TxnOffsetCommitResponse(c)
        if isinstance(msg, tm.InitProducerIdRequest):
            exp = (msg.producer_id, msg.producer_epoch) if msg.producer_id >= 0 else None
            out = self._drive(self.coord.init_producer_id(msg.transactional_id, msg.transaction_timeout_ms, now, exp))
            return InitProducerIdResponse(c, error=type(out.error) if out.error else None,
                                          producer_id=out.producer_id, producer_epoch=out.producer_epoch)
        if isinstance(msg, tm.AddPartitionsToTxnRequest):
            out = self._drive(self.coord.add_partitions(msg.transactional_id, msg.producer_id, msg.producer_epoch,
                                                        msg.partitions, now))
            return tm.AddPartitionsToTxnResponse(c, error=type(out.error) if out.error else None)
        if isinstance(msg, tm.AddOffsetsToTxnRequest):
            out = self._drive(self.coord.add_offsets(msg.transactional_id, msg.producer_id, msg.producer_epoch,
                                                     msg.group_id, now))
            return tm.AddOffsetsToTxnResponse(c, error=type(out.error) if out.error else None)
        assert isinstance(msg, tm.EndTxnRequest), msg
        out = self._drive(self.coord.end_txn(msg.transactional_id, msg.producer_id, msg.producer_epoch,
                                             msg.committed, now))
        if out.error is not None:
            return tm.EndTxnResponse(c, error=type(out.error), message=str(out.error))
        return tm.EndTxnResponse(c, producer_id=out.producer_id, producer_epoch=out.producer_epoch)

    def kinds(self) -> List[str]:
        return [type(m).__name__ for m in self.seen]


def log_batches(c: Cluster, topic: str, partition: int) -> List[Any]:
    st = c.store.partitions[(topic, partition)]
    log = c.brokers[st.leader].rm.partitions[(topic, partition)].log
    return log.read_batches(0, 1 << 30) if log.log_end_offset else []


def data_batches(c: Cluster, topic: str, partition: int) -> List[Any]:
    return [b for b in log_batches(c, topic, partition) if not b.is_control]


def markers(c: Cluster, topic: str, partition: int) -> List[Tuple[int, int, bool]]:
    """(producer id, epoch, committed) of every COMMIT/ABORT marker, in log order."""
    out = []
    for b in log_batches(c, topic, partition):
        if b.is_control:
            m = marker_of_batch(b)
            assert m is not None
            out.append((b.producer_id, b.producer_epoch, m.committed))
    return out


@pytest.fixture
def sim(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=17)
    c.create_topic("out", partitions=2, replication_factor=1)
    c.stand_in = StandIn(c)  # type: ignore[attr-defined]
    yield c
    c.close()


def test_calls_out_of_order_raise_invalid_txn_state(sim):
    plain = sim.producer()
    with pytest.raises(InvalidTxnStateError, match="transactional_id"):
        plain.init_transactions()
    with pytest.raises(InvalidTxnStateError):
        plain.begin_transaction()
    p = sim.producer(transactional_id=TID)
    with pytest.raises(InvalidTxnStateError, match="UNINITIALIZED"):
        p.send("out", b"x")
    with pytest.raises(InvalidTxnStateError):
        p.begin_transaction()
    with pytest.raises(InvalidTxnStateError):
        p.commit_transaction()
    p.init_transactions()
    with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
        p.send("out", b"x", partition=0)  # outside a transaction
    with pytest.raises(InvalidTxnStateError):
        p.abort_transaction()
    p.begin_transaction()
    with pytest.raises(InvalidTxnStateError):
        p.begin_transaction()
    with pytest.raises(InvalidConfigurationError, match="group_metadata"):
        p.send_offsets_to_transaction({("in", 0): 5}, None)
    with pytest.raises(InvalidConfigurationError, match="timeout"):
        p.commit_transaction(timeout=-1)
    p.commit_transaction()  # nothing was added: no EndTxn
    assert "EndTxnRequest" not in sim.stand_in.kinds()
    with pytest.raises(InvalidTxnStateError, match="READY"):  # the C fast path has no open batch to use
        p.send("out", b"after the commit", partition=0)
    p.close()
    with pytest.raises(ProducerClosedError):
        p.begin_transaction()


def test_commit_sends_transactional_batches_after_add_partitions_then_end_txn(sim):
    p = sim.producer(transactional_id=TID, transaction_timeout_ms=30_000)
    p.init_transactions()
    init = next(m for m in sim.stand_in.seen if isinstance(m, tm.InitProducerIdRequest))
    assert (init.transactional_id, init.transaction_timeout_ms) == (TID, 30_000)
    p.begin_transaction()
    futs = [p.send("out", b"a%d" % i, partition=i % 2) for i in range(10)]
    futs.append(p.send("out", b"v", key=b"k"))  # the keyed path (C) too
    p.commit_transaction()
    assert all(f.done() for f in futs) and [f.result().offset for f in futs[:4]] == [0, 0, 1, 1]
    kinds = sim.stand_in.kinds()
    first_produce = min(i for i, k in enumerate(kinds) if k.endswith("ProduceRequest"))
    assert kinds.index("AddPartitionsToTxnRequest") < first_produce
    assert kinds[-1] == "EndTxnRequest" and sim.stand_in.seen[-1].committed
    assert all(k != "ProduceRequest" or m.transactional_id == TID for k, m in zip(kinds, sim.stand_in.seen))
    multi = [m for m in sim.stand_in.seen if isinstance(m, MultiProduceRequest)]
    assert all(part.transactional_id == TID for m in multi for part in m.parts)
    pid = p._txn.producer_id
    for part in (0, 1):
        bs = data_batches(sim, "out", part)
        assert bs and all(b.is_transactional and b.producer_id == pid for b in bs)
        assert markers(sim, "out", part) == [(pid, 1, True)]  # KIP-890: the marker carries epoch + 1
    assert (p._txn.producer_epoch, p._txn.state) == (1, TxnState.READY)


def test_abort_fails_unsent_records_with_transaction_aborted_and_the_next_transaction_commits(sim):
    p = sim.producer(transactional_id=TID, linger_ms=60_000)
    p.init_transactions()
    p.begin_transaction()
    sent = p.send("out", b"sent", partition=0)
    p.flush()
    assert sent.result().offset == 0
    unsent = [p.send("out", b"unsent-%d" % i, partition=i % 2) for i in range(5)]  # lingering
    keyed = p.send("out", b"unsent", key=b"k")
    p.abort_transaction()
    for f in unsent + [keyed]:
        assert f.done()
        with pytest.raises(TransactionAbortedError, match=TID):
            f.result()
    assert [b.records()[0].value for b in data_batches(sim, "out", 0)] == [b"sent"]
    pid = p._txn.producer_id
    assert markers(sim, "out", 0) == [(pid, 1, False)]
    # the producer goes on: the next transaction runs at the new epoch
    p.begin_transaction()
    again = p.send("out", b"again", partition=0)
    p.commit_transaction()
    assert again.result().offset == 2  # after the data and the ABORT marker
    assert markers(sim, "out", 0) == [(pid, 1, False), (pid, 2, True)]


def test_a_new_epoch_restarts_the_sequences(sim):
    """KIP-890: every EndTxn bumps the epoch; a partition's batches of the next transaction are
    numbered from 0 under it (the leader would refuse sequence n under a new epoch)."""
    p = sim.producer(transactional_id=TID)
    p.init_transactions()
    seen: List[Tuple[int, int, int]] = []
    for txn in range(3):
        p.begin_transaction()
        for i in range(3):
            p.send("out", b"t%d-%d" % (txn, i), partition=0)
            p.flush()  # one batch each
        p.commit_transaction()
    for b in data_batches(sim, "out", 0):
        seen.append((b.producer_epoch, b.base_sequence, len(b)))
    assert seen == [(e, s, 1) for e in (0, 1, 2) for s in (0, 1, 2)]
    assert [e for _, e, _ in markers(sim, "out", 0)] == [1, 2, 3]


def test_an_abortable_error_fails_the_records_and_the_commit_then_abort_recovers(sim):
    p = sim.producer(transactional_id=TID)
    p.init_transactions()
    p.begin_transaction()
    sim.stand_in.fail[tm.AddPartitionsToTxnRequest] = TransactionAbortableError
    fut = p.send("out", b"x", partition=1)
    with pytest.raises(TransactionAbortableError):
        fut.result()
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        p.commit_transaction()
    with pytest.raises(TransactionAbortableError):
        p.send("out", b"y", partition=1)
    p.abort_transaction()
    assert data_batches(sim, "out", 1) == []
    p.begin_transaction()
    p.send("out", b"z", partition=1)
    p.commit_transaction()
    assert [b.records()[0].value for b in data_batches(sim, "out", 1)] == [b"z"]


def test_a_second_producer_with_the_same_id_fences_the_first(sim):
    zombie = sim.producer(transactional_id=TID)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("out", b"zombie", partition=0).result()
    fresh = sim.producer(transactional_id=TID)
    fresh.init_transactions()  # fences the zombie and aborts its open transaction
    assert fresh._txn.producer_id == zombie._txn.producer_id and fresh._txn.producer_epoch > zombie._txn.producer_epoch
    assert markers(sim, "out", 0)[-1][2] is False
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.send("out", b"again", partition=0)
    with pytest.raises(ProducerFencedError):
        zombie.begin_transaction()
    fresh.begin_transaction()
    fresh.send("out", b"fresh", partition=0)
    fresh.commit_transaction()
    assert markers(sim, "out", 0)[-1][2] is True


def test_send_offsets_to_transaction_sends_the_group_metadata_and_commits_with_the_transaction(sim):
    sim.ensure_offsets_topic()  # the group's FindCoordinator is answered by the real broker
    p = sim.producer(transactional_id=TID)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"x", partition=0)
    meta = tm.ConsumerGroupMetadata("g", 4, "m-1", "inst-1")
    p.send_offsets_to_transaction({("in", 0): 7, TopicPartition("in", 1): OffsetAndMetadata(9, "why")}, meta)
    commit = next(m for m in sim.stand_in.seen if isinstance(m, tm.TxnOffsetCommitRequest))
    assert (commit.group_id, commit.generation_id, commit.member_id, commit.group_instance_id) == ("g", 4, "m-1",
                                                                                                    "inst-1")
    assert sorted((t, pt, o, md) for t, pt, o, _, md in commit.offsets) == [("in", 0, 7, ""), ("in", 1, 9, "why")]
    assert sim.stand_in.committed_offsets == {}  # not before the transaction commits
    p.commit_transaction()
    assert sim.stand_in.committed_offsets == {"g": {("in", 0): 7, ("in", 1): 9}}
    kinds = sim.stand_in.kinds()
    assert kinds.index("AddOffsetsToTxnRequest") < kinds.index("TxnOffsetCommitRequest") < kinds.index("EndTxnRequest")


def test_a_blocking_call_times_out_and_waits_again_when_called_again(sim):
    p = sim.producer(transactional_id=TID, max_block_ms=500)
    sim.stand_in.hold.add(tm.InitProducerIdRequest)
    with pytest.raises(RequestTimedOutError, match="init_transactions"):
        p.init_transactions()
    sim.stand_in.hold.clear()
    p.init_transactions(timeout=60)  # the same call: its request is retried after the request timeout
    assert p._txn.state == TxnState.READY


def test_close_aborts_an_open_transaction(sim):
    p = sim.producer(transactional_id=TID)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"x", partition=1).result()
    p.close()
    assert markers(sim, "out", 1) == [(p._txn.producer_id, 1, False)]


def test_group_metadata(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=3)
    try:
        c.create_topic("in", partitions=1, replication_factor=1)
        cons = c.consumer(group_id="g", topics=["in"], group_instance_id="i-1")
        for _ in range(20):
            cons.poll(0.2)
            if cons.assignment():
                break
        meta = cons.group_metadata()
        assert isinstance(meta, tm.ConsumerGroupMetadata)
        assert (meta.group_id, meta.group_instance_id) == ("g", "i-1")
        assert meta.generation_id >= 1 and meta.member_id and meta.member_id == cons.member_id
        with pytest.raises(InvalidGroupIdError):
            c.consumer().group_metadata()
    finally:
        c.close()


def test_real_time_calls_wait_for_the_loop(tmp_path):
    """Real time: the calls wait on the producer's condition while the loop thread drives the manager."""
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("out", partitions=2, replication_factor=1)
        c.stand_in = StandIn(c)  # type: ignore[attr-defined]
        p = c.producer(transactional_id=TID, linger_ms=600_000)  # a batch goes on commit or flush only
        p.init_transactions()
        p.begin_transaction()
        futs = [p.send("out", b"r%d" % i, partition=i % 2) for i in range(100)]
        p.commit_transaction()
        assert all(f.done() and f.exception() is None for f in futs)
        p.begin_transaction()
        p.send("out", b"x", partition=0)
        p.flush()
        late = p.send("out", b"y", key=b"k")
        p.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            late.result()
        pid = p._txn.producer_id
        assert c.scheduler.run_sync(lambda: markers(c, "out", 0)) == [(pid, 1, True), (pid, 2, False)]
    finally:
        c.close()


def test_a_shared_directory_cluster_runs_transactions(tmp_path):
    """``pylog.open`` (real time, the brokers hosting the coordinator, no stand-in): commit and abort
    as seen by a read_committed consumer."""
    import pylog

    q = pylog.open(tmp_path / "q")
    try:
        q.create_topic("out", partitions=2)
        p = q.producer(transactional_id="s-1")
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send("out", b"v%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        p.send("out", b"aborted", partition=0)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send("out", b"last", partition=0)
        p.commit_transaction()
        c = q.consumer(topics=["out"], isolation_level="read_committed")
        c.assign([TopicPartition("out", 0), TopicPartition("out", 1)])
        got: List[bytes] = []
        for _ in range(100):
            got += [r.value for r in c.poll(0.2)]
            if len(got) >= 5:
                break
        for _ in range(3):  # anything that should not be there would come now
            got += [r.value for r in c.poll(0.1)]
        assert sorted(got) == [b"last", b"v0", b"v1", b"v2", b"v3"]
    finally:
        q.close()
