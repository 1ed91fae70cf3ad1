"""The transactional producer end to end (issue 17 item 1) on a seeded, simulated RF 3 cluster whose
brokers host the transaction coordinator and write the markers: commit makes every record visible in
every partition, abort none, a second producer with the same transactional id fences the first, and
the offsets sent with a transaction are the group's only if it commits.

What the reader sees is checked twice: through a ``read_committed`` consumer, and in the replicas'
logs (the COMMIT/ABORT markers after the data, on every replica), so a read side that filtered
nothing would still fail the marker checks and the other way round.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any, Dict, List, Tuple

import pytest

from pylog.client.types import TopicPartition
from pylog.cluster import Cluster
from pylog.errors import CommitFailedError, InvalidTransactionTimeoutError, ProducerFencedError, TransactionAbortedError
from pylog.storage.control_record import marker_of_batch

TID = "copier-1"


def replica_batches(c: Cluster, topic: str, partition: int) -> Dict[int, List[Any]]:
    """broker -> the batches of its replica of ``topic``-``partition`` (data and control)."""
    def run() -> Dict[int, List[Any]]:
        out = {}
        for b in c.store.partitions[(topic, partition)].replicas:
            log = c.brokers[b].rm.partitions[(topic, partition)].log
            out[b] = log.read_batches(0, 1 << 30) if log.log_end_offset else []
        return out
    return c.scheduler.run_sync(run)


def outcome_per_replica(c: Cluster, topic: str, partition: int) -> Dict[int, List[Tuple[str, Any]]]:
    """broker -> its log as ("data", values) and ("commit"/"abort", producer id) entries."""
    out: Dict[int, List[Tuple[str, Any]]] = {}
    for b, batches in replica_batches(c, topic, partition).items():
        rows: List[Tuple[str, Any]] = []
        for batch in batches:
            if batch.is_control:
                m = marker_of_batch(batch)
                assert m is not None
                rows.append(("commit" if m.committed else "abort", batch.producer_id))
            else:
                assert batch.is_transactional
                rows.append(("data", tuple(r.value for r in batch.records())))
        out[b] = rows
    return out


def settle(c: Cluster, topic: str, partitions: int, markers: int) -> None:
    """Advance until every replica of each of the first ``partitions`` partitions holds ``markers``
    markers and the same log (a commit/abort call returns once the outcome is durable in the
    transaction log; the markers follow)."""
    def same() -> bool:
        for p in range(partitions):
            logs = list(outcome_per_replica(c, topic, p).values())
            if any(x != logs[0] for x in logs) or sum(kind != "data" for kind, _ in logs[0]) != markers:
                return False
        return True
    for _ in range(100):
        if same():
            return
        c.advance(100)
    raise AssertionError("the replicas did not converge")


def read_committed(c: Cluster, topic: str, expect: int, rounds: int = 40) -> List[bytes]:
    """What a read_committed consumer reads of ``topic`` from the start: polls until it has
    ``expect`` records (and a few more polls, to see what should not be there), at most ``rounds``."""
    cons = c.consumer(topics=[topic], isolation_level="read_committed", request_timeout_ms=1_000)
    cons.assign([TopicPartition(topic, p) for p in range(c.store.topics[topic].partitions)])
    got: List[bytes] = []
    try:
        for _ in range(rounds):
            got.extend(r.value for r in cons.poll(0.2))
            if len(got) >= expect and _ > 5:
                break
    finally:
        cons.close()
    return got


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=23)
    c.create_topic("out", partitions=3, replication_factor=3, min_insync_replicas=2)
    yield c
    c.close()


def test_commit_makes_every_record_visible_in_every_partition(cluster):
    c = cluster
    assert "__transaction_state" not in c.store.topics
    p = c.producer(transactional_id=TID)
    assert "__transaction_state" in c.store.topics  # the facade creates it for a transactional producer
    p.init_transactions()
    p.begin_transaction()
    futs = [p.send("out", b"c%02d" % i, partition=i % 3) for i in range(30)]
    p.flush()
    assert all(f.done() and f.exception() is None for f in futs)
    assert read_committed(c, "out", 0, rounds=5) == []  # written, acknowledged, not committed: above the LSO
    p.commit_transaction()
    settle(c, "out", 3, markers=1)
    pid = p._txn.producer_id
    for part in range(3):
        for rows in outcome_per_replica(c, "out", part).values():
            assert rows[-1] == ("commit", pid)
            assert sorted(v for kind, vs in rows if kind == "data" for v in vs) == \
                [b"c%02d" % i for i in range(part, 30, 3)]
    assert sorted(read_committed(c, "out", 30)) == [b"c%02d" % i for i in range(30)]
    c._check()


def test_abort_makes_nothing_visible_to_a_read_committed_reader(cluster):
    c = cluster
    p = c.producer(transactional_id=TID)
    p.init_transactions()
    p.begin_transaction()
    sent = [p.send("out", b"a%02d" % i, partition=i % 3) for i in range(30)]
    p.flush()  # in the logs, then aborted
    assert all(f.exception() is None for f in sent)
    p.abort_transaction()
    p.begin_transaction()
    kept = [p.send("out", b"k%02d" % i, partition=i % 3) for i in range(6)]
    p.commit_transaction()
    assert all(f.exception() is None for f in kept)
    settle(c, "out", 3, markers=2)
    pid = p._txn.producer_id
    for part in range(3):
        for rows in outcome_per_replica(c, "out", part).values():
            assert [r for r in rows if r[0] != "data"] == [("abort", pid), ("commit", pid)]
            assert rows[0][0] == "data" and rows[-1] == ("commit", pid)
    got = read_committed(c, "out", 6)
    assert sorted(got) == [b"k%02d" % i for i in range(6)]
    c._check()


def test_abort_fails_records_not_yet_sent(cluster):
    c = cluster
    p = c.producer(transactional_id=TID, linger_ms=60_000)
    p.init_transactions()
    p.begin_transaction()
    futs = [p.send("out", b"u%d" % i, partition=i % 3) for i in range(9)]
    p.abort_transaction()
    for f in futs:
        with pytest.raises(TransactionAbortedError):
            f.result()
    settle(c, "out", 3, markers=0)
    for part in range(3):
        for rows in outcome_per_replica(c, "out", part).values():
            assert [r for r in rows if r[0] == "data"] == []
    c._check()


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(cluster):
    c = cluster
    zombie = c.producer(transactional_id=TID)
    zombie.init_transactions()
    zombie.begin_transaction()
    for i in range(6):
        zombie.send("out", b"z%d" % i, partition=i % 3)
    zombie.flush()
    fresh = c.producer(transactional_id=TID)
    fresh.init_transactions()  # bumps the epoch, aborts the zombie's open transaction
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.send("out", b"late", partition=0)
    with pytest.raises(ProducerFencedError):
        zombie.begin_transaction()
    fresh.begin_transaction()
    for i in range(3):
        fresh.send("out", b"f%d" % i, partition=i)
    fresh.commit_transaction()
    settle(c, "out", 3, markers=2)
    assert sorted(read_committed(c, "out", 3)) == [b"f0", b"f1", b"f2"]
    for part in range(3):
        for rows in outcome_per_replica(c, "out", part).values():
            markers = [r[0] for r in rows if r[0] != "data"]
            assert markers == ["abort", "commit"]
    c._check()


def test_a_zombie_send_after_fencing_fails_its_record_and_then_every_call(cluster):
    c = cluster
    zombie = c.producer(transactional_id=TID)
    zombie.init_transactions()
    fresh = c.producer(transactional_id=TID)
    fresh.init_transactions()
    zombie.begin_transaction()  # local: the zombie does not know yet
    fut = zombie.send("out", b"zombie", partition=1)  # its AddPartitionsToTxn is fenced
    with pytest.raises(ProducerFencedError):
        fut.result()
    with pytest.raises(ProducerFencedError):
        zombie.send("out", b"again", partition=1)
    with pytest.raises(ProducerFencedError):
        zombie.abort_transaction()
    settle(c, "out", 3, markers=0)
    assert all(r[0] != "data" for rows in outcome_per_replica(c, "out", 1).values() for r in rows)


def test_send_offsets_to_transaction_commits_the_offsets_only_with_the_transaction(cluster):
    c = cluster
    c.create_topic("in", partitions=2, replication_factor=3, min_insync_replicas=2)
    plain = c.producer()
    for i in range(10):
        plain.send("in", b"i%d" % i, partition=i % 2)
    plain.flush()
    cons = c.consumer(group_id="copiers", topics=["in"], enable_auto_commit=False)
    records: List[Any] = []
    for _ in range(40):
        records.extend(cons.poll(0.2))
        if len(records) >= 10:
            break
    assert len(records) == 10
    nxt = {(r.topic, r.partition): r.offset + 1 for r in records}
    p = c.producer(transactional_id=TID)
    p.init_transactions()
    # aborted: the offsets are dropped
    p.begin_transaction()
    p.send("out", b"x", partition=0)
    p.send_offsets_to_transaction({("in", 0): 2, ("in", 1): 2}, cons.group_metadata())
    p.abort_transaction()
    c.advance(500)
    assert {tp: cons.committed(tp) for tp in (TopicPartition("in", 0), TopicPartition("in", 1))} == \
        {TopicPartition("in", 0): None, TopicPartition("in", 1): None}
    # committed: the offsets are the group's
    p.begin_transaction()
    for r in records:
        p.send("out", r.value.upper(), partition=r.partition)
    p.send_offsets_to_transaction(nxt, cons.group_metadata())
    p.commit_transaction()
    c.advance(500)
    assert {tp: cons.committed(tp) for tp in (TopicPartition("in", 0), TopicPartition("in", 1))} == \
        {TopicPartition("in", 0): 5, TopicPartition("in", 1): 5}
    cons.close()
    c._check()


def test_each_transaction_numbers_a_partition_from_zero_at_its_new_epoch(cluster):
    """KIP-890 bumps the epoch at every EndTxn: the leaders accept each transaction's first batch at
    sequence 0 under the new epoch (and every replica holds the same)."""
    c = cluster
    p = c.producer(transactional_id=TID)
    p.init_transactions()
    for txn in range(3):
        p.begin_transaction()
        for i in range(2):
            p.send("out", b"t%d-%d" % (txn, i), partition=0)
            p.flush()
        p.commit_transaction()
    settle(c, "out", 1, markers=3)
    for batches in replica_batches(c, "out", 0).values():
        data = [(b.producer_epoch, b.base_sequence) for b in batches if not b.is_control]
        marks = [b.producer_epoch for b in batches if b.is_control]
        base = data[0][0]
        assert data == [(base + t, s) for t in range(3) for s in (0, 1)]
        assert marks == [base + 1, base + 2, base + 3]
    assert sorted(read_committed(c, "out", 6)) == sorted(b"t%d-%d" % (t, i) for t in range(3) for i in range(2))


@pytest.mark.parametrize("clean", [True, False])
def test_the_transaction_commits_through_a_coordinator_failover(cluster, clean):
    """The broker hosting the transaction's coordinator stops mid-transaction: the producer's
    requests time out or are refused (NotCoordinator), it looks the coordinator up again, and the
    commit goes through the new one (loaded from the replicated ``__transaction_state``)."""
    c = cluster
    p = c.producer(transactional_id=TID, request_timeout_ms=2_000)
    p.init_transactions()
    coordinator = p._txn._coordinators[(1, TID)]
    p.begin_transaction()
    for i in range(6):
        p.send("out", b"f%d" % i, partition=i % 3)
    p.flush()
    c.stop_broker(coordinator, clean=clean)
    for i in range(6, 9):
        p.send("out", b"f%d" % i, partition=i % 3)
    p.commit_transaction()
    assert p._txn._coordinators[(1, TID)] != coordinator
    c.start_broker(coordinator)
    got = read_committed(c, "out", 9, rounds=60)
    assert sorted(got) == [b"f%d" % i for i in range(9)]  # all of it, once
    c._check()


def test_a_transaction_open_past_its_timeout_is_aborted_and_the_producer_fenced(cluster):
    """The coordinator aborts a transaction open longer than ``transaction_timeout_ms`` and bumps
    the epoch (Kafka's abortTimedOutTransactions): the producer's commit is then refused as fenced,
    and none of its records is visible."""
    c = cluster
    p = c.producer(transactional_id=TID, transaction_timeout_ms=1_000)
    p.init_transactions()
    p.begin_transaction()
    for i in range(3):
        p.send("out", b"late%d" % i, partition=i)
    p.flush()
    c.advance(30_000)
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    settle(c, "out", 3, markers=1)
    for part in range(3):
        for rows in outcome_per_replica(c, "out", part).values():
            assert rows[-1][0] == "abort"
    assert read_committed(c, "out", 0, rounds=5) == []


def test_a_timeout_above_the_coordinators_maximum_is_refused(cluster):
    p = cluster.producer(transactional_id=TID, transaction_timeout_ms=10**9)
    with pytest.raises(InvalidTransactionTimeoutError):
        p.init_transactions()
    with pytest.raises(InvalidTransactionTimeoutError):  # fatal: every later call raises it
        p.begin_transaction()


def test_a_partition_leader_failover_mid_transaction_writes_each_record_once(cluster):
    c = cluster
    p = c.producer(transactional_id=TID, request_timeout_ms=2_000, retry_backoff_ms=50)
    p.init_transactions()
    coordinator = p._txn._coordinators[(1, TID)]
    victim = next(c.leader_of("out", part) for part in range(3) if c.leader_of("out", part) != coordinator)
    p.begin_transaction()
    futs = [p.send("out", b"l%02d" % i, partition=i % 3) for i in range(12)]
    p.flush()
    c.stop_broker(victim, clean=False)
    futs += [p.send("out", b"l%02d" % i, partition=i % 3) for i in range(12, 24)]
    p.commit_transaction()
    assert all(f.exception() is None for f in futs)
    c.start_broker(victim)
    got = read_committed(c, "out", 24, rounds=60)
    assert sorted(got) == [b"l%02d" % i for i in range(24)]  # all, once
    c._check()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_on_a_lossy_network_read_committed_sees_exactly_the_committed_transactions(tmp_path, seed):
    """Lost requests and answers (10%): retries everywhere (produce, transactional requests,
    markers). A read_committed reader sees each record of a committed transaction once and none of
    an aborted one; the producer's futures agree. A failing seed replays with
    ``pytest tests/sim/test_transactions_producer.py -k "lossy and <seed>"``."""
    _lossy_run(tmp_path, seed)


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get("PYLOG_SOAK"), reason="soak run: set PYLOG_SOAK=1")
def test_on_a_lossy_network_soak(tmp_path):
    """PYLOG_SOAK=1 .venv/bin/python -m pytest tests/sim/test_transactions_producer.py -m soak
    (seeds 100..399; a failing seed is named in the assertion, replay it with _lossy_run)."""
    for seed in range(100, 400):
        try:
            _lossy_run(tmp_path / str(seed), seed)
        except Exception as exc:
            raise AssertionError(f"seed {seed}: {type(exc).__name__}: {exc}") from exc


def _lossy_run(tmp_path: Any, seed: int) -> None:
    import random
    rng = random.Random(seed)
    c = Cluster(tmp_path, brokers=3, seed=seed, loss=0.1, request_timeout_ms=1_000)
    try:
        c.create_topic("out", partitions=3, replication_factor=3, min_insync_replicas=2)
        p = c.producer(transactional_id=TID, request_timeout_ms=500, retry_backoff_ms=20)
        p.init_transactions()
        committed: List[bytes] = []
        for txn in range(6):
            p.begin_transaction()
            values = [b"t%d-%02d" % (txn, i) for i in range(rng.randrange(1, 20))]
            futs = [p.send("out", v, key=v) for v in values]
            if rng.random() < 0.5:
                p.flush()
            if rng.random() < 0.6:
                p.commit_transaction()
                assert all(f.exception() is None for f in futs)
                committed += values
            else:
                p.abort_transaction()
        counts = Counter(read_committed(c, "out", len(committed), rounds=80))
        assert sorted(counts) == sorted(committed) and set(counts.values()) <= {1}
    finally:
        c.close()


def test_offsets_of_a_member_fenced_by_a_rebalance_make_the_transaction_abortable(cluster):
    """KIP-447: the group coordinator refuses a TxnOffsetCommit whose generation is not the group's
    (CommitFailedError, abortable); the transaction is aborted and the offsets are not committed."""
    c = cluster
    c.create_topic("in", partitions=1, replication_factor=3, min_insync_replicas=2)
    cons = c.consumer(group_id="copiers", topics=["in"], enable_auto_commit=False)
    for _ in range(40):
        cons.poll(0.2)
        if cons.assignment():
            break
    meta = cons.group_metadata()
    stale = type(meta)(meta.group_id, meta.generation_id - 1, meta.member_id, meta.group_instance_id)
    p = c.producer(transactional_id=TID)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"x", partition=0)
    with pytest.raises(CommitFailedError):
        p.send_offsets_to_transaction({("in", 0): 1}, stale)
    with pytest.raises(CommitFailedError):
        p.commit_transaction()
    p.abort_transaction()
    assert cons.committed(TopicPartition("in", 0)) is None
    p.begin_transaction()  # the producer goes on
    p.send_offsets_to_transaction({("in", 0): 1}, cons.group_metadata())
    p.commit_transaction()
    for _ in range(20):
        if cons.committed(TopicPartition("in", 0)) == 1:
            break
        c.advance(100)
    assert cons.committed(TopicPartition("in", 0)) == 1
    cons.close()
