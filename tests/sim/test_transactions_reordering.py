"""Jepsen's reordering (Bufstream 0.1.0, Kafka before KIP-890) on the simulated cluster.

A producer aborts transaction 1; its EndTxn(abort) reaches the coordinator and
completes, but a copy of it is delayed in the network (the client's retry of a
request whose first copy was only slow). Transaction 2 of the same producer
then begins and writes to another partition, and the delayed EndTxn(abort) of
transaction 1 arrives in the middle of it.

* With KIP-890's epoch bump (``transaction_version=2``, the default), every
  EndTxn bumps the producer epoch: transaction 2 runs at a higher epoch, the
  late request carries the old one and is refused (``ProducerFencedError``);
  transaction 2 commits, and a read_committed consumer reads it whole.
* With the test-only switch that turns the bump off (``transaction_version=1``,
  Kafka's TV1), the late request carries the current epoch and aborts
  transaction 2: its records are aborted in the log, the producer's commit
  fails, and the read_committed consumer never sees them - the anomaly the
  bump prevents.

The delayed copy is the producer's own EndTxn message, captured on the
simulated network as it was sent and delivered again later, from the same
client node to the same coordinator broker. Everything else is the real
cluster: hosted coordinator, markers written by the partition leaders, the
read_committed fetch path, and the raw log read back as the oracle
(:func:`pylog.simulation.txn.log_outcomes`).
"""
from __future__ import annotations

from typing import Any, List, Tuple

import pytest

from pylog.cluster import Cluster
from pylog.errors import ProducerFencedError, PylogError
from pylog.replication.txn_messages import EndTxnRequest, EndTxnResponse
from pylog.simulation.txn import ABORTED, COMMITTED, leader_log, log_outcomes

TOPIC = "out"


class Tap:
    """Records what the simulated network carries (EndTxn requests and their answers)."""

    def __init__(self, c: Cluster):
        self.c = c
        self.requests: List[Tuple[Any, Any, EndTxnRequest]] = []
        self.responses: List[EndTxnResponse] = []
        transport = c.transport
        inner = transport.send

        def send(src: Any, dst: Any, msg: Any) -> None:
            if isinstance(msg, EndTxnRequest):
                self.requests.append((src, dst, msg))
            elif isinstance(msg, EndTxnResponse):
                self.responses.append(msg)
            inner(src, dst, msg)

        transport.send = send  # type: ignore[method-assign]

    def deliver_again(self, request: Tuple[Any, Any, EndTxnRequest]) -> None:
        src, dst, msg = request
        self.c.transport.send(src, dst, msg)


def set_transaction_version(c: Cluster, version: int) -> None:
    """The test-only switch (``Broker.txn_config["transaction_version"]``, docs/transactions.md) on every
    broker: for the coordinator each builds when it (re)starts, and for the one it hosts now."""
    for b in c.brokers.values():
        b.txn_config["transaction_version"] = version
        assert b.txn is not None
        b.txn.coordinator.transaction_version = version


def committed_values(c: Cluster, partition: int) -> Tuple[set, set]:
    c.advance(500)  # the markers go out after the EndTxn is answered
    p = leader_log(c, (TOPIC, partition))
    o = log_outcomes(p.log, p.high_watermark)
    return set(o.with_outcome(COMMITTED).values()), set(o.with_outcome(ABORTED).values())


def read_committed(c: Cluster) -> set:
    reader = c.consumer(None, [TOPIC], isolation_level="read_committed", fetch_max_wait_ms=50)
    hws = {p.partition: p.high_watermark for p in c.describe(TOPIC)}
    got = set()
    for _ in range(100):
        records = reader.poll(0.2)
        got.update(r.value for r in records)
        if not records and all(reader.position(TOPIC, q) >= hw for q, hw in hws.items()):
            break
    reader.close(autocommit=False)
    return got


@pytest.mark.parametrize("transaction_version", [2, 1])
@pytest.mark.parametrize("first_ends_with", ["abort", "commit"])
def test_a_delayed_end_txn_cannot_end_the_next_transaction(tmp_path, transaction_version, first_ends_with):
    c = Cluster(tmp_path, brokers=3, seed=17 + transaction_version)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3, min_insync_replicas=2)
        tap = Tap(c)
        p = c.producer(transactional_id="jepsen", acks="all")
        set_transaction_version(c, transaction_version)
        p.init_transactions()

        p.begin_transaction()
        p.send(TOPIC, b"t1", partition=0)
        p.flush()
        if first_ends_with == "abort":
            p.abort_transaction()
        else:
            p.commit_transaction()
        assert len(tap.requests) == 1 and tap.requests[0][2].committed == (first_ends_with == "commit")
        late = tap.requests[0]

        p.begin_transaction()
        p.send(TOPIC, b"t2-a", partition=1)
        p.send(TOPIC, b"t2-b", partition=1)
        p.flush()  # transaction 2's records are in the log, its transaction open
        answered = len(tap.responses)
        tap.deliver_again(late)  # Jepsen's reordering: transaction 1's EndTxn arrives now
        c.advance(200)
        assert len(tap.responses) == answered + 1  # the coordinator answered it
        late_answer = tap.responses[-1]

        if transaction_version == 2:
            assert late_answer.error is ProducerFencedError  # its epoch is the finished transaction's
            p.commit_transaction()  # transaction 2 is untouched and commits
            committed, aborted = committed_values(c, 1)
            assert committed == {b"t2-a", b"t2-b"} and not aborted
            assert {b"t2-a", b"t2-b"} <= read_committed(c)
            return

        # transaction_version=1: no bump, so the late EndTxn carries the current epoch
        if first_ends_with == "abort":
            assert late_answer.error is None  # ... and ends transaction 2: aborted
            with pytest.raises(PylogError):
                p.commit_transaction()
            committed, aborted = committed_values(c, 1)
            assert aborted == {b"t2-a", b"t2-b"} and not committed  # transaction 2 lost
            assert not {b"t2-a", b"t2-b"} & read_committed(c)
        else:
            # a late COMMIT of transaction 1 commits transaction 2 before its producer decided:
            # the producer's own abort then comes too late
            assert late_answer.error is None
            committed, _ = committed_values(c, 1)
            assert committed == {b"t2-a", b"t2-b"}  # committed behind the producer's back
            with pytest.raises(PylogError):
                p.abort_transaction()
            assert {b"t2-a", b"t2-b"} <= read_committed(c)
    finally:
        c.close()
