"""describe_transactions / list_transactions (Kafka's Admin.describeTransactions / listTransactions,
KIP-664, the duration filter of KIP-994), served by the brokers' transaction coordinators over the
transport, on in-process clusters: a seeded RF 3 one (failover, filters) and a real-time one."""
from __future__ import annotations

from typing import Any

import pytest

from pylog.cluster import Cluster
from pylog.errors import InvalidRequestError, TransactionalIdNotFoundError
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC, partition_for_transactional_id


@pytest.fixture
def cluster(tmp_path: Any) -> Any:
    c = Cluster(tmp_path, brokers=3, seed=31)
    c.create_topic("out", partitions=3, replication_factor=3, min_insync_replicas=2)
    yield c
    c.close()


def settled_state(c: Cluster, tid: str, want: str) -> str:
    """The described state of ``tid`` once it is ``want`` (commit/abort return when PrepareX is durable;
    the markers, then the Complete record, follow), or the last one seen after 50 tries."""
    state = ""
    for _ in range(50):
        state = c.describe_transactions([tid])[tid].state
        if state == want:
            break
        c.advance(100)
    return state


def coordinator_of(c: Cluster, tid: str) -> int:
    n = c.store.topics[TRANSACTION_STATE_TOPIC].partitions
    return c.store.partitions[(TRANSACTION_STATE_TOPIC, partition_for_transactional_id(tid, n))].leader


def test_an_open_transaction_is_described_and_listed(cluster: Cluster) -> None:
    c = cluster
    p = c.producer(transactional_id="copier-1", transaction_timeout_ms=45_000)
    p.init_transactions()
    p.begin_transaction()
    began = c.now_ms
    p.send("out", b"a", partition=0).result()
    p.send("out", b"b", partition=2).result()
    d = c.describe_transactions(["copier-1"])["copier-1"]
    assert (d.transactional_id, d.state, d.producer_id, d.producer_epoch) == (
        "copier-1", "Ongoing", p.producer_id, p.producer_epoch)  # type: ignore[attr-defined]
    assert d.transaction_timeout_ms == 45_000
    assert d.transaction_start_time_ms is not None and began <= d.transaction_start_time_ms <= c.now_ms
    assert d.topic_partitions == (("out", 0), ("out", 2))
    assert d.coordinator_id == coordinator_of(c, "copier-1")
    rows = c.list_transactions()
    assert [(r.transactional_id, r.producer_id, r.state) for r in rows] == [
        ("copier-1", p.producer_id, "Ongoing")]  # type: ignore[attr-defined]
    assert c.list_transactions(state_filters=["Ongoing", "PrepareCommit"]) == rows
    assert c.list_transactions(state_filters=["CompleteCommit"]) == []
    assert c.list_transactions(producer_id_filters=[p.producer_id]) == rows  # type: ignore[attr-defined]
    assert c.list_transactions(producer_id_filters=[p.producer_id + 1]) == []  # type: ignore[attr-defined]
    p.commit_transaction()
    assert settled_state(c, "copier-1", "CompleteCommit") == "CompleteCommit"
    assert c.describe_transactions("copier-1")["copier-1"].topic_partitions == ()
    assert [r.state for r in c.list_transactions()] == ["CompleteCommit"]
    p.close()


def test_every_coordinator_answers_for_its_own_ids(cluster: Cluster) -> None:
    """Several ids spread over the brokers: the merged list names each once, with its own state."""
    c = cluster
    producers = {f"t{i}": c.producer(transactional_id=f"t{i}") for i in range(8)}
    for tid, p in producers.items():
        p.init_transactions()
        if int(tid[1:]) % 2:
            p.begin_transaction()
            p.send("out", tid.encode(), partition=int(tid[1:]) % 3).result()
    assert len({coordinator_of(c, tid) for tid in producers}) > 1  # really spread over several brokers
    rows = c.list_transactions()
    assert [(r.transactional_id, r.state) for r in rows] == [
        (tid, "Ongoing" if int(tid[1:]) % 2 else "Empty") for tid in sorted(producers)]
    described = c.describe_transactions(sorted(producers))
    assert {t: d.state for t, d in described.items()} == {r.transactional_id: r.state for r in rows}
    assert all(d.coordinator_id == coordinator_of(c, t) for t, d in described.items())
    assert all(d.transaction_start_time_ms is None for t, d in described.items() if d.state == "Empty")
    for p in producers.values():
        p.close()


def test_the_duration_filter_keeps_transactions_open_longer(cluster: Cluster) -> None:
    c = cluster
    p = c.producer(transactional_id="slow")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"x", partition=1).result()
    c.advance(5_000)
    assert [r.transactional_id for r in c.list_transactions(duration_filter_ms=1_000)] == ["slow"]
    assert c.list_transactions(duration_filter_ms=30_000) == []
    p.abort_transaction()
    p.close()


def test_a_new_coordinator_describes_the_transaction_it_loaded(cluster: Cluster) -> None:
    c = cluster
    p = c.producer(transactional_id="copier-9")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"a", partition=1).result()
    old = coordinator_of(c, "copier-9")
    c.stop_broker(old, clean=False)
    c.scheduler.wait_until(lambda: coordinator_of(c, "copier-9") not in (old, -1), 30_000)
    d = c.describe_transactions(["copier-9"])["copier-9"]
    assert d.coordinator_id not in (old, -1)
    assert (d.state, d.topic_partitions, d.producer_id) == ("Ongoing", (("out", 1),), p.producer_id)  # type: ignore[attr-defined]
    c.start_broker(old)
    p.close()


def test_unknown_and_bad_requests(cluster: Cluster) -> None:
    c = cluster
    with pytest.raises(TransactionalIdNotFoundError, match="nobody"):  # no __transaction_state yet
        c.describe_transactions(["nobody"])
    assert c.list_transactions() == []
    p = c.producer(transactional_id="someone")
    p.init_transactions()
    with pytest.raises(TransactionalIdNotFoundError, match="nobody"):
        c.describe_transactions(["someone", "nobody"])
    with pytest.raises(InvalidRequestError):
        c.describe_transactions([""])
    with pytest.raises(InvalidRequestError, match="Ongiong"):
        c.list_transactions(state_filters=["Ongiong"])
    p.close()


def test_real_time_cluster(tmp_path: Any) -> None:
    c = Cluster(tmp_path, brokers=3)
    try:
        c.create_topic("out", partitions=2, replication_factor=3, min_insync_replicas=2)
        p = c.producer(transactional_id="rt")
        p.init_transactions()
        p.begin_transaction()
        p.send("out", b"v", partition=1).result()
        d = c.describe_transactions(["rt"])["rt"]
        assert (d.state, d.topic_partitions) == ("Ongoing", (("out", 1),))
        assert [r.transactional_id for r in c.list_transactions(state_filters=["Ongoing"])] == ["rt"]
        p.abort_transaction()
        assert settled_state(c, "rt", "CompleteAbort") == "CompleteAbort"
        p.close()
    finally:
        c.close()
