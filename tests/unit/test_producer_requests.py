"""The producer sends one produce request per leader broker (Kafka's ``RecordAccumulator.drain`` +
``Sender.sendProduceRequests``), and the replica manager answers a multi-partition request once, with
per-partition results."""
from __future__ import annotations

from collections import Counter

import pytest

from pylog.client.sender import MAX_REQUEST_BYTES
from pylog.cluster import Cluster
from pylog.errors import NotLeaderError
from pylog.replication.messages import MultiProduceRequest, MultiProduceResponse, ProduceRequest

PARTS = 12


@pytest.fixture
def sim(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=5)
    c.create_topic("t", partitions=PARTS, replication_factor=3, min_insync_replicas=2)
    yield c
    c.close()


def count_requests(c: Cluster, node_id: str) -> Counter:
    """Wrap the transport: count the produce requests ``node_id`` sends, per destination broker, and
    the batches they carry (``(dst, 'batches')``)."""
    seen: Counter = Counter()
    orig = c.transport.send

    def send(src, dst, msg):
        if src == node_id and isinstance(msg, (ProduceRequest, MultiProduceRequest)):
            seen[dst] += 1
            seen[(dst, "batches")] += len(msg.parts) if isinstance(msg, MultiProduceRequest) else 1
        return orig(src, dst, msg)

    c.transport.send = send
    return seen


def leaders(c: Cluster) -> Counter:
    return Counter(c.leader_of("t", p) for p in range(PARTS))


def test_one_request_per_leader_broker(sim):
    p = sim.producer(acks="all")
    seen = count_requests(sim, p._node.node_id)
    futs = [p.send("t", b"v%d" % i, partition=i % PARTS) for i in range(10 * PARTS)]
    p.flush()
    per_leader = leaders(sim)
    assert len(per_leader) > 1  # the partitions are spread over several leaders
    for broker, n in per_leader.items():
        assert seen[broker] == 1, (broker, seen)  # not one request per partition
        assert seen[(broker, "batches")] == n
    for i, f in enumerate(futs):
        md = f.result()
        assert (md.partition, md.offset) == (i % PARTS, i // PARTS)
    for part in range(PARTS):
        log = sim.brokers[sim.leader_of("t", part)].rm.partitions[("t", part)].log
        assert [r.value for r in log.read(0, 1 << 20)] == [b"v%d" % i for i in range(part, 10 * PARTS, PARTS)]


def test_batches_whose_linger_ends_together_share_a_request(sim):
    """Linger timers that expire in one pass of the loop drain in one wake-up, so their batches go in one
    request per leader (not one wake-up, and one request, per timer)."""
    p = sim.producer(acks="all", linger_ms=50)
    p.send("t", b"warm", partition=0).result()  # the producer id, so nothing waits for it below
    seen = count_requests(sim, p._node.node_id)
    futs = [p.send("t", b"v", partition=part) for part in range(PARTS)]
    sim.advance(20)
    assert not any(f.done() for f in futs)  # still lingering
    sim.advance(100)
    assert all(f.done() for f in futs)
    for broker, n in leaders(sim).items():
        assert seen[broker] == 1 and seen[(broker, "batches")] == n, (broker, seen)
    p.close()


def test_request_size_bound(sim):
    p = sim.producer(acks=1, batch_size=400_000, max_in_flight=5)
    seen = count_requests(sim, p._node.node_id)
    leader = sim.leader_of("t", 0)
    led = [part for part in range(PARTS) if sim.leader_of("t", part) == leader]
    assert len(led) >= 3
    futs = [p.send("t", b"y" * 200_000, partition=part) for part in led[:3] for _ in range(2)]
    p.flush()
    assert all(f.result().offset >= 0 for f in futs)
    # 3 batches of ~400 KB to one leader: the first two fit in MAX_REQUEST_BYTES, the third goes alone
    assert 2 * 400_000 < MAX_REQUEST_BYTES < 3 * 400_000
    assert seen[leader] == 2 and seen[(leader, "batches")] == 3


def test_multi_produce_answers_each_part(sim):
    """The replica manager appends each part and gives per-partition results in one response: a part for a
    partition the broker does not lead is refused (NotLeader) while the others are appended."""
    broker = sim.leader_of("t", 0)
    mine = [part for part in range(PARTS) if sim.leader_of("t", part) == broker][:2]
    other = next(part for part in range(PARTS) if sim.leader_of("t", part) != broker)
    rm = sim.brokers[broker].rm
    from pylog.record import encode_batch, Record

    data = encode_batch([Record(value=b"a")], now_ms=0)
    parts = tuple(ProduceRequest("t", part, data, 1, 1000, 0) for part in (mine[0], other, mine[1], mine[0]))
    out = sim.scheduler.run_sync(lambda: rm.handle("client-x", MultiProduceRequest(parts, 1, 1000, 77),
                                                   sim.now_ms))
    replies = [m for dst, m in out.items if dst == "client-x"]
    assert len(replies) == 1 and isinstance(replies[0], MultiProduceResponse)
    r = replies[0]
    assert r.correlation_id == 77
    assert [(x.topic, x.partition) for x in r.parts] == [("t", mine[0]), ("t", other), ("t", mine[1]), ("t", mine[0])]
    assert [x.error for x in r.parts] == [None, NotLeaderError, None, None]
    assert [x.base_offset for x in r.parts] == [0, -1, 0, 1]
