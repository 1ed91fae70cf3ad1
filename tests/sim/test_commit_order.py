"""Issue 14 item 5: committed offsets never move backwards because of a retried commit.

A commit whose connection drops with the request in flight fails with a retriable NetworkError. Before the
fix the consumer retried it after its backoff even though a newer commit of the same partition had been
sent meanwhile; arriving after the newer one, the retry moved the group's committed offset back.
"""
from __future__ import annotations

import pytest

from pylog import errors
from pylog.cluster import Cluster


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_commit_retried_after_a_newer_commit_does_not_move_the_offset_back(tmp_path, seed):
    c = Cluster(tmp_path, brokers=3, seed=seed)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer()
        for i in range(20):
            p.send("t", b"%d" % i)
        p.flush()
        cons = c.consumer("g", [])
        cons.assign([("t", 0)])
        cons.commit({("t", 0): 5})
        coordinator = cons._coordinator
        older = cons.commit_async({("t", 0): 10})
        c.transport.drop_connection(cons._node.node_id, coordinator)  # the older commit is lost in flight
        newer = cons.commit_async({("t", 0): 15})  # on a new connection
        assert newer.result(10) == {("t", 0): 15}
        c.scheduler.wait_until(older.done, 10_000)
        c.advance(3_000)  # time for any retry of the older commit to arrive
        assert cons.committed("t", 0) == 15  # before the fix: 10, the older commit's retry landed last
        with pytest.raises(errors.NetworkError, match="not retried"):
            older.result()
        assert cons._node.disconnects >= 1  # (a fetch may have been in flight on it too)
        c._check()
    finally:
        c.close()


def test_a_commit_lost_with_its_connection_is_retried_on_a_new_one(tmp_path):
    """Without a newer commit the retry is what Kafka does: the commit lands, on a new connection."""
    c = Cluster(tmp_path, brokers=3, seed=4)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        cons = c.consumer("g", [])
        cons.assign([("t", 0)])
        cons.commit({("t", 0): 0})
        fut = cons.commit_async({("t", 0): 7})
        c.transport.drop_connection(cons._node.node_id, cons._coordinator)
        assert fut.result(10) == {("t", 0): 7}
        assert cons._node.disconnects >= 1  # (a fetch may have been in flight on it too)
        assert cons.committed("t", 0) == 7
    finally:
        c.close()
