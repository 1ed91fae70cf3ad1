"""Producer ``buffer_memory`` / ``max_block_ms`` (Kafka's BufferPool): a bounded buffer, a blocking
``send``, BufferExhaustedError after ``max_block_ms``, and nothing accepted is lost."""
from __future__ import annotations

import threading
import time

import pytest

from pylog.cluster import Cluster
from pylog.errors import (
    BufferExhaustedError,
    InvalidConfigurationError,
    ProducerClosedError,
    RecordTooLargeError,
)

VALUE = b"x" * 100  # 116 bytes with the record overhead: a 1000-byte batch closes after 9 records
PER_BATCH = 9


@pytest.fixture
def sim(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=5)
    c.create_topic("t", partitions=1, replication_factor=1)
    yield c
    c.close()


def available(p) -> int:
    return next(m.value for m in p.metrics() if m.name == "pylog_producer_buffer_available_bytes")


def test_send_blocks_max_block_ms_then_raises_and_loses_nothing_accepted(sim):
    p = sim.producer(batch_size=1000, buffer_memory=3000, max_block_ms=5000, request_timeout_ms=500)
    sim.partition_network([0])  # nothing is acknowledged: batches keep their memory
    accepted = [p.send("t", VALUE) for _ in range(3 * PER_BATCH)]  # three batches: the buffer is full
    assert available(p) == 0
    t0 = sim.now_ms
    with pytest.raises(BufferExhaustedError) as info:
        p.send("t", VALUE)
    assert sim.now_ms - t0 >= 5000  # it waited max_block_ms of (virtual) time
    assert "t-0" in str(info.value) and "buffer_memory=3000" in str(info.value)
    assert not any(f.done() for f in accepted)
    sim.heal_network()
    p.flush()
    assert [f.result().offset for f in accepted] == list(range(3 * PER_BATCH))
    assert available(p) == 3000  # every batch gave its memory back
    p.close()


def test_a_blocked_send_goes_on_when_acknowledgements_free_room(sim):
    p = sim.producer(batch_size=1000, buffer_memory=3000, max_block_ms=60_000, request_timeout_ms=500)
    sim.partition_network([0])
    first = [p.send("t", VALUE) for _ in range(3 * PER_BATCH)]
    t0 = sim.now_ms
    sim.scheduler.call_later(2000, sim.heal_network)
    late = p.send("t", b"late")  # blocks until the first batches are acknowledged
    assert sim.now_ms - t0 >= 2000
    assert all(f.done() for f in first[:PER_BATCH])
    p.flush()
    assert [f.result().offset for f in first + [late]] == list(range(3 * PER_BATCH + 1))
    p.close()


def test_a_record_larger_than_the_buffer_is_refused_at_once(sim):
    p = sim.producer(buffer_memory=1000, batch_size=500)
    t0 = sim.now_ms
    with pytest.raises(RecordTooLargeError, match="buffer_memory=1000"):
        p.send("t", b"y" * 2000)
    assert sim.now_ms == t0
    assert p.send("t", b"small").result().offset == 0
    p.close()


@pytest.mark.parametrize("kw", [{"buffer_memory": 0}, {"buffer_memory": True}, {"max_block_ms": -1},
                                {"max_block_ms": 1.5}, {"buffer_memory": 1000, "batch_size": 1001}])
def test_bad_buffer_settings_are_refused(sim, kw):
    with pytest.raises(InvalidConfigurationError, match=next(iter(kw))):
        sim.producer(**kw)  # the message names the setting (for the last case, both)


def _wait_for_queue(p, threads: list, length: int) -> None:
    """Until ``length`` senders wait for room (no sleep-based timing: polls the producer's queue)."""
    while len(p._room_queue) < length:
        assert all(t.is_alive() for t in threads), "a sender finished without blocking"
        time.sleep(0.001)


def test_real_time_sender_wakes_when_the_broker_comes_back(tmp_path):
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(batch_size=1000, buffer_memory=3000, max_block_ms=120_000, request_timeout_ms=300,
                       retry_backoff_ms=20)
        c.stop_broker(0, clean=True, shutdown_timeout_ms=100)
        futures = []
        errors = []

        def produce() -> None:
            try:
                for i in range(4 * PER_BATCH):
                    futures.append(p.send("t", b"%03d" % i + VALUE[3:]))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        sender = threading.Thread(target=produce)
        sender.start()
        _wait_for_queue(p, [sender], 1)
        assert len(futures) == 3 * PER_BATCH  # the 28th record waits for room
        c.start_broker(0)
        sender.join(60)
        assert not sender.is_alive() and errors == []
        p.flush(60)
        got = [f.result(timeout=60) for f in futures]
        assert [m.offset for m in got] == list(range(4 * PER_BATCH))
        p.close()
    finally:
        c.close()


def test_real_time_waiting_senders_get_room_first_come_first_served(tmp_path):
    """Kafka's BufferPool order: a sender that needs little room does not overtake an earlier one
    that needs more. The big record waits first, then the small one. Half of the buffer comes back
    (broker 0's batches are acknowledged) while broker 1 is still down: the small record would fit
    now, but it is not its turn, so it gets its room only after the big one, once broker 1's
    batches are acknowledged too, and lands after the big record in the log. (Waking every waiter at
    every completion, as before, let the small record through first.)"""
    c = Cluster(tmp_path, brokers=2)
    try:
        c.create_topic("t", partitions=2, replication_factor=1, start_index=0)  # t-0 on broker 0, t-1 on 1
        leaders = {pt: c.leader_of("t", pt) for pt in (0, 1)}
        p = c.producer(batch_size=1000, buffer_memory=4000, max_block_ms=120_000, request_timeout_ms=300,
                       retry_backoff_ms=20)
        for b in (0, 1):
            c.stop_broker(b, clean=True, shutdown_timeout_ms=100)
        held = {pt: [p.send("t", VALUE, partition=pt) for _ in range(2 * PER_BATCH)] for pt in (0, 1)}  # full
        results: dict = {}

        def send(name: str, value: bytes) -> None:
            results[name] = p.send("t", value, partition=0)

        big = threading.Thread(target=send, args=("big", b"B" * 2500))  # needs 2577 bytes of room
        big.start()
        _wait_for_queue(p, [big], 1)
        small = threading.Thread(target=send, args=("small", b"small"))  # needs 1000
        small.start()
        _wait_for_queue(p, [big, small], 2)
        c.start_broker(leaders[0])
        assert [f.result(timeout=60).offset for f in held[0]] == list(range(2 * PER_BATCH))
        assert available(p) == 2000  # room for the small batch, not for the big one
        c.start_broker(leaders[1])
        big.join(60)
        small.join(60)
        assert not big.is_alive() and not small.is_alive()
        p.flush(60)
        assert [f.result(timeout=60).offset for f in held[1]] == list(range(2 * PER_BATCH))
        assert results["big"].result(timeout=60).offset == 2 * PER_BATCH
        assert results["small"].result(timeout=60).offset == 2 * PER_BATCH + 1
        assert available(p) == 4000 and not p._room_queue
        p.close()
    finally:
        c.close()


def test_real_time_a_head_that_times_out_passes_the_turn_on(tmp_path):
    """The first waiter needs more room than will come before max_block_ms; it raises
    BufferExhaustedError, and the sender queued behind it, whose smaller batch fits, goes on at once
    (no starvation behind a head that gave up); its record is delivered once the broker is back.
    The small sender writes to another partition: were both deadlines to pass at once on a loaded
    machine, a small sender going on out of turn (room is there at its deadline) must not open a
    batch the big one could then join instead of giving up."""
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("t", partitions=2, replication_factor=1)
        p = c.producer(batch_size=1000, buffer_memory=4000, max_block_ms=400, request_timeout_ms=300,
                       retry_backoff_ms=20)
        c.stop_broker(0, clean=True, shutdown_timeout_ms=100)
        filler = [p.send("t", VALUE, partition=0) for _ in range(3 * PER_BATCH)]  # 3000 of 4000 bytes held
        outcome: dict = {}

        def send(name: str, value: bytes, partition: int) -> None:
            try:
                outcome[name] = p.send("t", value, partition=partition)
            except BaseException as exc:
                outcome[name] = exc

        big = threading.Thread(target=send, args=("big", b"B" * 2500, 0))  # 2577 bytes: no room
        big.start()
        _wait_for_queue(p, [big], 1)
        small = threading.Thread(target=send, args=("small", b"small", 1))  # room, but not its turn
        small.start()
        _wait_for_queue(p, [big, small], 2)
        big.join(60)
        small.join(60)
        assert isinstance(outcome["big"], BufferExhaustedError)
        assert "2577 bytes" in str(outcome["big"]) and "max_block_ms=400" in str(outcome["big"])
        assert not isinstance(outcome["small"], BaseException)
        assert not p._room_queue
        c.start_broker(0)
        p.flush(60)
        assert [f.result(timeout=60).offset for f in filler] == list(range(3 * PER_BATCH))
        assert outcome["small"].result(timeout=60).offset == 0
        assert available(p) == 4000
        p.close()
    finally:
        c.close()


def test_real_time_close_wakes_every_waiting_sender(tmp_path):
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(batch_size=1000, buffer_memory=2000, max_block_ms=120_000)
        c.stop_broker(0, clean=True, shutdown_timeout_ms=100)
        for _ in range(2 * PER_BATCH):
            p.send("t", VALUE)
        raised: list = []

        def send() -> None:
            try:
                p.send("t", VALUE)
            except BaseException as exc:
                raised.append(exc)

        senders = [threading.Thread(target=send) for _ in range(3)]
        for i, t in enumerate(senders):
            t.start()
            _wait_for_queue(p, senders[: i + 1], i + 1)
        p.close(0)
        for t in senders:
            t.join(60)
        assert not any(t.is_alive() for t in senders)
        assert len(raised) == 3 and all(isinstance(e, ProducerClosedError) for e in raised)
    finally:
        c.close()


def test_bufferpool_wait_metrics_count_blocked_sends(sim):
    p = sim.producer(batch_size=1000, buffer_memory=2000, max_block_ms=60_000, request_timeout_ms=500)
    metric = {m.name: m.value for m in p.metrics()}
    assert metric["pylog_producer_bufferpool_waits_total"] == 0
    for _ in range(2 * PER_BATCH):
        p.send("t", VALUE)  # fills the buffer; an open batch never waits
    assert p.buffer_waits == 0
    sim.partition_network([0])
    sim.scheduler.call_later(1000, sim.heal_network)
    p.send("t", VALUE)  # blocks once, until the first batches are acknowledged
    metric = {m.name: m.value for m in p.metrics()}
    assert metric["pylog_producer_bufferpool_waits_total"] >= 1
    p.flush()
    p.close()
