"""Static membership (KIP-345, ``group.instance.id``, JoinGroup v5+) with real clients: a static member
that closes and comes back within its session timeout takes its old slot and partitions back without a
rebalance (the generation does not move), under a new member id."""
from __future__ import annotations

import time

import pytest

from pylog.errors import GroupIdNotFoundError

from .group_clients import KINDS, Clients

TOPIC = "static"
GROUP = "statics"
WAIT_S = 60.0  # a liveness bound only


def _settled(cluster, members, n: int, partitions: int = 4):
    """Poll until the group is Stable with ``n`` members, each member holds what the coordinator says,
    and every partition is assigned. (A leader that assigned before its client had the topic's metadata
    hands out nothing - kafka-python logs "No partition metadata for topic" - and rejoins once the
    metadata arrives: an all-empty Stable generation is not settled yet.)"""
    deadline = time.monotonic() + WAIT_S
    while True:
        for m in members:
            m.take()
        try:
            d = cluster.describe_group(GROUP)
        except GroupIdNotFoundError:
            d = None
        if d is not None and d.state == "Stable" and len(d.members) == n:
            by_client = {x.client_id: {p for _, p in x.assignment} for x in d.members}
            assigned = set().union(*by_client.values()) if by_client else set()
            if assigned == set(range(partitions)) and all(by_client.get(m.name) == m.assignment() for m in members):
                return d
        assert time.monotonic() < deadline, d


@pytest.mark.parametrize("kind", KINDS)
def test_a_static_member_comes_back_without_a_rebalance(pylog_kafka, kind):
    cluster = pylog_kafka
    cluster.create_topic(TOPIC, partitions=4)
    clients = Clients(kind, cluster.bootstrap_servers)
    try:
        a = clients.member(GROUP, TOPIC, "a", instance="host-a")
        b = clients.member(GROUP, TOPIC, "b", instance="host-b")
        d = _settled(cluster, [a, b], 2)
        generation = d.generation
        a_parts = a.assignment()
        old_id = next(x.member_id for x in d.members if x.group_instance_id == "host-a")
        clients.close(a)  # a static member's close sends no LeaveGroup: its slot waits for it
        d = cluster.describe_group(GROUP)
        assert d.generation == generation and {x.group_instance_id for x in d.members} == {"host-a", "host-b"}
        a2 = clients.member(GROUP, TOPIC, "a", instance="host-a")
        d = _settled(cluster, [a2, b], 2)
        assert d.generation == generation  # no rebalance
        assert a2.assignment() == a_parts
        new_id = next(x.member_id for x in d.members if x.group_instance_id == "host-a")
        assert new_id != old_id and new_id.startswith("host-a")
    finally:
        clients.close_all()
