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


def _wait_for_blocked_sender(p, thread: threading.Thread) -> None:
    """Until ``thread`` waits for room on the producer's condition (no sleep-based timing)."""
    while not p._room._waiters:  # the condition's waiter list: a send() inside _wait_for_room
        assert thread.is_alive(), "the sender finished without blocking"
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
        _wait_for_blocked_sender(p, sender)
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


def test_real_time_close_wakes_a_blocked_sender(tmp_path):
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(batch_size=1000, buffer_memory=2000, max_block_ms=120_000)
        c.stop_broker(0, clean=True, shutdown_timeout_ms=100)
        raised = []

        def produce() -> None:
            try:
                for _ in range(3 * PER_BATCH):
                    p.send("t", VALUE)
            except BaseException as exc:
                raised.append(exc)

        sender = threading.Thread(target=produce)
        sender.start()
        _wait_for_blocked_sender(p, sender)
        p.close(0)
        sender.join(60)
        assert not sender.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], ProducerClosedError)
    finally:
        c.close()
