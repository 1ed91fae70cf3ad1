"""The coordinator holds an AddPartitionsToTxn/AddOffsetsToTxn that arrives while the id's previous
transaction is completing (PrepareCommit written, markers going out) and answers it once the Complete
record is appended, instead of CONCURRENT_TRANSACTIONS and the client's 20 ms back-off
(pylog/runtime/txn_host.py, docs/transactions.md "Hosting"); a hold is bounded. Seeded simulator:
the leader of the transaction's partition is slowed so that its marker (and so the Complete record)
is still outstanding when the next transaction begins."""
from __future__ import annotations

from typing import Any, List

from pylog.client.txn_manager import TransactionManager
from pylog.cluster import Cluster
from pylog.errors import ConcurrentTransactionsError, NotCoordinatorError
from pylog.replication.messages import Outbox
from pylog.replication.txn_log import TransactionState
from pylog.replication.txn_messages import AddPartitionsToTxnResponse

from test_txn_host import TID, Wire, coordinator_broker, init, begin_with, sim_cluster, txn_state, wait_state

S = TransactionState


def _answers(m: TransactionManager) -> List[Any]:
    """Every AddPartitionsToTxn answer the manager gets from now on."""
    seen: List[Any] = []
    orig = m.on_response

    def on_response(resp: Any, now_ms: int) -> Any:
        if isinstance(resp, AddPartitionsToTxnResponse):
            seen.append(resp)
        return orig(resp, now_ms)

    m.on_response = on_response  # type: ignore[method-assign]
    return seen


def _commit_with_slow_marker(c: Cluster, w: Wire, m: TransactionManager, extra_ms: int) -> int:
    """A transaction on a partition led by a broker other than the coordinator, committed with that
    leader slowed by ``extra_ms``: returns the coordinator; the transaction is left in PrepareCommit."""
    co = coordinator_broker(c)
    p = next(p for p in range(3) if c.leader_of("out", p) != co)
    begin_with(w, m, ("out", p))
    resp = w.produce(m, "out", p, [b"a"])
    assert resp.error is None, resp
    c.transport.slow(c.leader_of("out", p), extra_ms)  # type: ignore[attr-defined]
    r = m.commit_transaction()
    w.run(m)
    assert r.done and r.error is None, r
    st = txn_state(c)
    assert st.state == S.PREPARE_COMMIT and st.pending is not None, st  # the marker is still outstanding
    return co


def test_add_partitions_right_after_commit_waits_for_complete_instead_of_concurrent_transactions(tmp_path: Any) -> None:
    c = sim_cluster(tmp_path)
    try:
        w = Wire(c)
        m = init(w)
        co = _commit_with_slow_marker(c, w, m, 30)
        host = c.brokers[co].txn
        assert host is not None
        seen = _answers(m)
        p2 = next(p for p in range(3) if c.leader_of("out", p) == co)
        begin_with(w, m, ("out", p2))  # the next transaction: its partition added in one round
        assert [r.error for r in seen] == [None], seen
        assert host.held == 1 and host.concurrent_transactions_answers == 0
        st = wait_state(c, S.ONGOING)
        assert st.partitions == {("out", p2)}
        c.transport.slow(c.leader_of("out", 0), 0)  # type: ignore[attr-defined]
        for b in c.brokers.values():
            b._check()
    finally:
        c.close()


def test_a_hold_that_outlives_its_bound_is_answered_concurrent_transactions(tmp_path: Any) -> None:
    c = sim_cluster(tmp_path)
    try:
        w = Wire(c)
        m = init(w)
        co = _commit_with_slow_marker(c, w, m, 1_000)  # the marker takes far longer than the hold's bound
        host = c.brokers[co].txn
        assert host is not None and host.completion_hold_ms == 200
        seen = _answers(m)
        p2 = next(p for p in range(3) if c.leader_of("out", p) == co)
        begin_with(w, m, ("out", p2))  # the client retries until the previous transaction is complete
        errors = [r.error for r in seen]
        assert errors[0] is ConcurrentTransactionsError and errors[-1] is None, errors
        assert host.concurrent_transactions_answers == errors.count(ConcurrentTransactionsError) >= 1
        assert host.held >= 1
        st = wait_state(c, S.ONGOING)
        assert st.partitions == {("out", p2)}
        assert txn_state(c).producer_epoch == m.producer_epoch
        for b in c.brokers.values():
            b._check()
    finally:
        c.close()


def test_unload_answers_a_held_request_not_coordinator(tmp_path: Any) -> None:
    """The coordinator unloads the id's partition while holding: the held request is answered
    NotCoordinator at once (the client then finds the new coordinator), nothing stays held."""
    c = sim_cluster(tmp_path)
    try:
        w = Wire(c)
        m = init(w)
        co = _commit_with_slow_marker(c, w, m, 1_000)
        host = c.brokers[co].txn
        assert host is not None
        host.completion_hold_ms = 10_000_000  # only the unload can answer it
        p2 = next(p for p in range(3) if c.leader_of("out", p) == co)
        m.begin_transaction()
        m.maybe_add_partition(("out", p2))
        req = m.next_request(c.now_ms, w.node.next_corr())
        assert req is not None and req.node == co
        box: List[Any] = []
        c.scheduler.run_sync(lambda: w.node.request(co, req.message, 60_000, box.append))
        c.advance(20)
        assert not box and TID in host._held
        out = Outbox()
        host._unload(host.coordinator.partition_for(TID), out)  # what sync does when the leadership moved
        answers = [msg for _, msg in out.items if isinstance(msg, AddPartitionsToTxnResponse)]
        assert [(a.correlation_id, a.error) for a in answers] == [(req.message.correlation_id, NotCoordinatorError)]
        assert host._held == {}
    finally:
        c.close()
