"""The leader serves fetches without re-checking CRCs; the receivers still catch a damaged byte.

Kafka validates a batch's CRC when it is appended and leaves the check of
served bytes to the fetcher: a follower validates on append, a consumer
(``check.crcs``) on decode. pylog does the same: ``Log.fetch`` (the
fetch-serving path) checks framing only, every other reader (``read``,
``read_batches``, recovery, ``pylog verify``) still checks CRCs. These tests
damage one byte of a record on the leader's disk and show that neither a
consumer nor a follower ever takes it for data.
"""
from __future__ import annotations

import os
from typing import List, Tuple

import pytest

import pylog
from pylog.cluster import Cluster
from pylog.errors import CorruptRecordError
from pylog.record import scan


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x01]))


def _damage_value_of(log: pylog.Log, offset: int) -> Tuple[str, int]:
    """Flip the last value byte of the (single-record, header-less) batch holding ``offset``."""
    (batch,) = [b for b in log.read_batches(log.log_start_offset, 1 << 30) if b.base_offset == offset]
    position = batch.info.position + batch.info.size - 2  # the last byte is the header count (0)
    _flip(batch.path, position)
    return batch.path, position


def test_fetch_serves_without_the_crc_check_other_readers_keep_it(tmp_path) -> None:
    with pylog.Log.open(os.path.join(tmp_path, "t-0")) as log:
        for i in range(10):
            log.append([b"value-%d" % i])
        good = log.fetch(0, 1 << 20)
        path, _ = _damage_value_of(log, 5)
        served = log.fetch(0, 1 << 20)
        with open(path, "rb") as f:
            assert served == f.read()  # the bytes as they are on disk, all ten batches
        assert served != good and len(served) == len(good)
        # The receiver's check finds the damaged batch: five good ones, then corruption.
        res = scan(served, verify_crc=True)
        assert [b.base_offset for b in res.batches] == [0, 1, 2, 3, 4]
        assert res.status != pylog._native.OK
        # Every other reader still checks the CRC.
        with pytest.raises(CorruptRecordError):
            list(log.read(5))
        with pytest.raises(CorruptRecordError):
            log.read_batches(5)
        assert [b.base_offset for b in log.read_batches(0)] == [0, 1, 2, 3, 4]


def test_fetch_still_checks_the_framing(tmp_path) -> None:
    with pylog.Log.open(os.path.join(tmp_path, "t-0")) as log:
        for i in range(6):
            log.append([b"value-%d" % i])
        (batch,) = [b for b in log.read_batches(0) if b.base_offset == 3]
        _flip(batch.path, batch.info.position + 16)  # the magic byte
        with pytest.raises(CorruptRecordError):
            log.fetch(3, 1 << 20)
        assert scan(log.fetch(0, 1 << 20)).status == pylog._native.OK  # stops before the damaged batch


def test_a_consumer_raises_on_a_damaged_byte_and_returns_no_wrong_data(tmp_path) -> None:
    c = Cluster(tmp_path, brokers=1, seed=31)
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks=1)
        for i in range(10):
            p.send("t", b"value-%d" % i).result()
        _damage_value_of(c.brokers[0].rm.partitions[("t", 0)].log, 5)
        cons = c.consumer(None, fetch_max_wait_ms=50)
        cons.assign([("t", 0)])
        got: List[Tuple[int, bytes]] = []
        with pytest.raises(CorruptRecordError):
            for _ in range(50):
                got += [(r.offset, r.value) for r in cons.poll(0.2)]
        assert all(v == b"value-%d" % o for o, v in got)
        assert 5 not in {o for o, _ in got}
    finally:
        c.close()


def test_a_follower_never_appends_a_damaged_batch(tmp_path) -> None:
    c = Cluster(tmp_path, brokers=3, seed=32, replica_lag_time_max_ms=10**9)
    try:
        ctl = c.store.controller_id
        c.create_topic("t", partitions=1, replication_factor=2, min_insync_replicas=1,
                       start_index=(ctl + 1) % 3, shift=0)
        leader = c.leader_of("t")
        (follower,) = [r for r in c.store.partitions[("t", 0)].replicas if r != leader]
        assert ctl not in (leader, follower)
        p = c.producer(acks="all")
        for i in range(3):
            p.send("t", b"value-%d" % i).result()
        c.partition_network([follower], [leader])
        p1 = c.producer(acks=1)
        for i in range(3, 10):
            p1.send("t", b"value-%d" % i).result()
        lp = c.brokers[leader].rm.partitions[("t", 0)]
        fp = c.brokers[follower].rm.partitions[("t", 0)]
        assert fp.log.log_end_offset == 3
        _damage_value_of(lp.log, 5)
        c.heal_network()
        c.advance(40_000)  # > request_timeout_ms: the follower fetches the damaged bytes again; never takes them
        flog = fp.log
        assert fp.corrupt_fetches >= 1  # it did fetch the damaged batch
        assert flog.log_end_offset <= 5
        recs = [(r.offset, r.value) for r in flog.read(0, 1 << 30)]  # CRC-checked read: all intact
        assert recs == [(i, b"value-%d" % i) for i in range(flog.log_end_offset)]
        assert lp.high_watermark <= 5  # the damaged record never counted as replicated
        c._check()
    finally:
        c.close()


def test_a_follower_backs_off_after_fetching_damaged_data(tmp_path, caplog) -> None:
    """Kafka's fetcher delays a partition in error by replica.fetch.backoff.ms; without that the
    follower refetched the damaged bytes in a tight loop (a busy loop in real time)."""
    c = Cluster(tmp_path, brokers=3, seed=33, replica_lag_time_max_ms=10**9)
    try:
        ctl = c.store.controller_id
        c.create_topic("t", partitions=1, replication_factor=2, min_insync_replicas=1,
                       start_index=(ctl + 1) % 3, shift=0)
        leader = c.leader_of("t")
        (follower,) = [r for r in c.store.partitions[("t", 0)].replicas if r != leader]
        c.partition_network([follower], [leader])
        p = c.producer(acks=1)
        for i in range(6):
            p.send("t", b"value-%d" % i).result()
        lp = c.brokers[leader].rm.partitions[("t", 0)]
        fp = c.brokers[follower].rm.partitions[("t", 0)]
        _damage_value_of(lp.log, 0)
        c.heal_network()
        backoff = c.brokers[follower].rm.config.replica_fetch_backoff_ms
        with caplog.at_level("ERROR", logger="pylog.replication"):
            c.advance(40_000)  # > request_timeout_ms: the fetch the partition swallowed is sent again
        assert fp.log.log_end_offset == 0  # never took the damaged batch
        assert 1 <= fp.corrupt_fetches <= 40_000 // backoff + 2  # one try per backoff, not a tight loop
        assert any("t-0" in r.getMessage() and "offset 0" in r.getMessage() for r in caplog.records)
    finally:
        c.close()
