"""Producer id expiry (Kafka's producer.id.expiration.ms, KIP-854) in simulated time.

* ``ProducerStateManager.remove_expired_producers`` against a dict model of each producer's last
  batch timestamp (hypothesis), snapshots without the expired ids, and an expired id that writes
  again being accepted at any sequence (Kafka's rule for a producer without state);
* a simulated cluster with ``producer_id_expiration_ms``: every replica forgets an idle producer after
  the expiration and not before, a clean restart's snapshot no longer lists it, and the same producer
  sending again - also across a leader crash while it sends - leaves every record in the log exactly
  once, in order.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.cluster import Cluster
from pylog.errors import InvalidConfigurationError, OutOfOrderSequenceError
from pylog.storage.producer_state import ProducerStateManager, decode_snapshot, snapshot_name

EXPIRATION = 60_000
CHECK = 1_000
TOPIC = "events"


@given(st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 4), st.integers(0, 200)),  # (pid, ms since the last event)
    st.tuples(st.just("expire"), st.integers(0, 300), st.integers(1, 250)),  # (ms later, expiration)
), max_size=60))
def test_expiry_matches_a_model_of_last_write_times(tmp_path_factory, events):
    ps = ProducerStateManager(str(tmp_path_factory.mktemp("p")))
    model: dict = {}  # pid -> (timestamp of its last batch, next sequence)
    now = offset = 0
    for kind, a, b in events:
        if kind == "write":
            pid, now = a, now + b
            seq = model.get(pid, (0, 0))[1]
            assert ps.check(pid, 0, seq, seq) is None
            ps.update(pid, 0, seq, seq, offset, offset, now)
            offset += 1
            model[pid] = (now, seq + 1)
        else:
            now += a
            gone = ps.remove_expired_producers(now, b)
            expect = sorted(pid for pid, (ts, _) in model.items() if now - ts >= b)
            assert gone == expect
            for pid in expect:
                del model[pid]
        assert sorted(ps.producers) == sorted(model)
        ps._check()
    ps.map_end_offset = offset
    written = decode_snapshot(open(ps.take_snapshot(), "rb").read())
    assert sorted(e.producer_id for e in written) == sorted(model)


def test_an_expired_producer_may_continue_at_any_sequence(tmp_path):
    ps = ProducerStateManager(str(tmp_path))
    ps.update(7, 0, 0, 9, 0, 9, 1_000)
    assert ps.remove_expired_producers(1_000 + EXPIRATION - 1, EXPIRATION) == []
    with pytest.raises(OutOfOrderSequenceError, match="sequence 11"):
        ps.check(7, 0, 11, 11)
    assert ps.remove_expired_producers(1_000 + EXPIRATION, EXPIRATION) == [7]
    assert ps.check(7, 0, 11, 11) is None  # no state: accepted, as Kafka accepts an unknown producer
    ps.update(7, 0, 11, 11, 10, 10, 1_000 + EXPIRATION)
    with pytest.raises(OutOfOrderSequenceError, match="expected 12"):
        ps.check(7, 0, 13, 13)  # and sequences are checked again from there
    assert ps.expired_producers == 1


# ------------------------------------------------------------------ a cluster
def replicas_state(c: Cluster, pid: int) -> dict:
    """broker -> does its replica of events-0 know ``pid``."""
    out = {}
    for b in c.brokers.values():
        if b.running and b.rm is not None and (TOPIC, 0) in b.rm.partitions:
            out[b.broker_id] = pid in b.rm.partitions[(TOPIC, 0)].producer_state.producers
    return out


def read_all(c: Cluster) -> list:
    reader = c.consumer(None, [TOPIC], fetch_max_wait_ms=50)
    hw = c.describe(TOPIC)[0].high_watermark
    got: list = []
    for _ in range(200):
        got += reader.poll(0.2)
        if len(got) >= hw:
            break
    reader.close()
    return [r.value for r in got]


def test_replicas_forget_an_idle_producer_which_then_writes_again_without_duplicates_or_loss(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=9, producer_id_expiration_ms=EXPIRATION,
                producer_id_expiration_check_interval_ms=CHECK)
    try:
        c.create_topic(TOPIC, partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", linger_ms=0)
        for i in range(10):
            p.send(TOPIC, b"%d" % i).result()
        pid = p.producer_id
        assert pid >= 0
        c.advance(500)  # followers fetch the last batch
        assert replicas_state(c, pid) == {0: True, 1: True, 2: True}
        last_write = c.now_ms
        c.advance(EXPIRATION - 2 * CHECK)
        assert replicas_state(c, pid) == {0: True, 1: True, 2: True}  # not before the expiration
        c.advance(3 * CHECK + 500)
        assert c.now_ms - last_write > EXPIRATION
        assert replicas_state(c, pid) == {0: False, 1: False, 2: False}  # leader and followers

        # a clean restart snapshots the state: the expired id is not in it
        follower = next(b for b in range(3) if b != c.leader_of(TOPIC))
        c.stop_broker(follower, clean=True)
        part_dir = os.path.join(c.brokers[follower].log_dir, f"{TOPIC}-0")
        snaps = sorted(n for n in os.listdir(part_dir) if n.endswith(".snapshot"))
        assert snaps and snaps[-1] == snapshot_name(10)
        with open(os.path.join(part_dir, snaps[-1]), "rb") as f:
            assert [e.producer_id for e in decode_snapshot(f.read())] == []
        c.start_broker(follower)
        c.advance(3_000)

        # the same producer goes on (sequence 10 onwards): accepted as a producer without state
        futs = [p.send(TOPIC, b"%d" % i) for i in range(10, 20)]
        assert [f.result().offset for f in futs] == list(range(10, 20))
        assert p.producer_id == pid
        c.advance(500)
        assert all(replicas_state(c, pid).values())
        # ... and keeps going while its leader crashes: retries are recognised by the new leader
        futs = [p.send(TOPIC, b"%d" % i) for i in range(20, 40)]
        c.advance(3)
        c.stop_broker(c.leader_of(TOPIC), clean=False)
        for f in futs:
            f.result()
        assert read_all(c) == [b"%d" % i for i in range(40)]
        c._check()
    finally:
        c.close()


def test_a_producer_that_keeps_writing_is_never_expired(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=2, producer_id_expiration_ms=EXPIRATION,
                producer_id_expiration_check_interval_ms=CHECK)
    try:
        c.create_topic(TOPIC, partitions=1, replication_factor=1)
        p = c.producer(acks="all")
        p.send(TOPIC, b"0").result()
        pid = p.producer_id
        for i in range(1, 6):
            c.advance(EXPIRATION // 2)
            p.send(TOPIC, b"%d" % i).result()
            assert replicas_state(c, pid) == {0: True}
        ps = c.brokers[0].rm.partitions[(TOPIC, 0)].producer_state
        assert ps.producers[pid].last_seq == 5 and ps.expired_producers == 0
        assert read_all(c) == [b"%d" % i for i in range(6)]
    finally:
        c.close()


def test_expiration_settings_are_checked(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="producer_id_expiration_ms"):
        Cluster(tmp_path, brokers=1, seed=1, producer_id_expiration_ms=-5)
