"""Consumer groups of real Kafka clients against a pylog cluster (issue 16), one run per client library.

A group of up to three members of one library (kafka-python, confluent-kafka, aiokafka) consumes a
6-partition topic while members join and leave; after each rebalance every partition is owned by
exactly one member, as the coordinator recorded it. Each member commits synchronously what it read. Then every
member closes, and a new member of the same group reads exactly from the committed offsets on: every
record below a committed offset was read before, nothing below it is read again, nothing above is lost.
The records are produced by pylog's in-process producer between the membership changes.
"""
from __future__ import annotations

import time
from typing import Dict, List, Set, Tuple

import pytest

from pylog.errors import GroupIdNotFoundError

from .group_clients import KINDS, Clients, Member

TOPIC = "orders"
PARTITIONS = 6
GROUP = "billing"
#: a liveness bound only (a group that never settles fails the test instead of hanging it)
SETTLE_S = 90.0


class Run:
    """What the members of one test read and committed."""

    def __init__(self, cluster, clients: Clients):
        self.cluster = cluster
        self.clients = clients
        self.producer = cluster.producer(acks="all")
        self.produced: Dict[int, int] = {p: 0 for p in range(PARTITIONS)}  # partition -> log end
        self.reads: List[Tuple[str, int, int]] = []  # (member, partition, offset), in order
        self.failed_commits: Set[int] = set()  # partitions a member read but could not commit
        self.members: List[Member] = []

    def produce(self, per_partition: int) -> None:
        futures = []
        for p in range(PARTITIONS):
            for _ in range(per_partition):
                n = self.produced[p]
                futures.append(self.producer.send(TOPIC, f"{p}:{n}".encode(), partition=p))
                self.produced[p] = n + 1
        for f in futures:
            f.result(30)

    def round(self) -> None:
        """Every member polls once and commits what it read.

        (Ownership is checked once a rebalance settled, not in between: kafka-python keeps reporting its
        old assignment until the new one arrives, by design, while it already rejoined.)"""
        for m in self.members:
            self._note(m, *m.take())

    def _note(self, m: Member, recs: List[Tuple[int, int, bytes]], failed: Set[int]) -> None:
        for p, off, value in recs:
            assert value == f"{p}:{off}".encode(), (m.name, p, off, value)
            self.reads.append((m.name, p, off))
        self.failed_commits |= failed

    def settle(self) -> None:
        """Poll until the group is Stable with exactly these members, each holding what the coordinator
        says, together every partition once."""
        deadline = time.monotonic() + SETTLE_S
        want = {m.name for m in self.members}
        while True:
            self.round()
            try:
                d = self.cluster.describe_group(GROUP)
            except GroupIdNotFoundError as exc:  # the first member has not joined yet
                d = exc
                assert time.monotonic() < deadline, f"group never settled: {d}"
                continue
            if d.state == "Stable" and {m.client_id for m in d.members} == want and len(d.members) == len(want):
                by_client = {m.client_id: {p for _, p in m.assignment} for m in d.members}
                mine = {m.name: m.assignment() for m in self.members}
                owned = [p for ps in mine.values() for p in ps]
                if mine == by_client and sorted(owned) == list(range(PARTITIONS)):
                    return
            assert time.monotonic() < deadline, f"group never settled: {d}"

    def start(self, name: str) -> Member:
        m = self.clients.member(GROUP, TOPIC, name)
        self.members.append(m)
        return m

    def stop(self, m: Member) -> None:
        self.members.remove(m)
        self._note(m, *self.clients.close(m))


@pytest.mark.parametrize("kind", KINDS)
def test_group_of_three_rebalances_commits_and_restarts_from_committed_offsets(pylog_kafka, kind):
    cluster = pylog_kafka
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, min_insync_replicas=2)
    clients = Clients(kind, cluster.bootstrap_servers)
    run = Run(cluster, clients)
    try:
        run.produce(5)
        a = run.start("a")
        run.settle()
        assert a.assignment() == set(range(PARTITIONS))
        run.produce(5)
        run.start("b")
        run.settle()
        run.produce(5)
        c = run.start("c")
        run.settle()
        assert all(len(m.assignment()) == 2 for m in run.members)  # range: 6 partitions over 3 members
        generation = cluster.describe_group(GROUP).generation
        run.stop(c)  # LeaveGroup: the other two take over c's partitions
        run.settle()
        assert cluster.describe_group(GROUP).generation > generation
        run.produce(5)
        for _ in range(3):
            run.round()
        for m in list(run.members):
            run.stop(m)
        committed = {p: v.offset for (t, p), v in cluster.list_group_offsets(GROUP).items() if t == TOPIC}
        assert cluster.describe_group(GROUP).state == "Empty"
        before = {(p, off) for _, p, off in run.reads}
        # Nothing skipped: every offset below the committed one was read by some member.
        for p, off in committed.items():
            assert {(p, o) for o in range(off)} <= before, (p, off)
        # Read twice only where a commit was refused by a rebalance (Kafka's at-least-once).
        seen: Set[Tuple[int, int]] = set()
        for _, p, off in run.reads:
            assert (p, off) not in seen or p in run.failed_commits, (p, off)
            seen.add((p, off))

        run.produce(3)
        mark = len(run.reads)
        restarted = run.start("d")
        run.settle()
        deadline = time.monotonic() + SETTLE_S
        while len(run.reads) - mark < sum(run.produced[p] - committed.get(p, 0) for p in range(PARTITIONS)):
            run.round()
            assert time.monotonic() < deadline, "the restarted member did not read everything"
        after: Dict[int, List[int]] = {}
        for name, p, off in run.reads[mark:]:
            assert name == restarted.name
            after.setdefault(p, []).append(off)
        # Exactly from the committed offset (the log start where nothing was committed) to the end.
        assert after == {p: list(range(committed.get(p, 0), run.produced[p])) for p in range(PARTITIONS)
                         if run.produced[p] > committed.get(p, 0)}
        assert {p: v.offset for (t, p), v in cluster.list_group_offsets(GROUP).items()} == run.produced
    finally:
        clients.close_all()
