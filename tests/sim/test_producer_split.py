"""Issue 14 item 8: a batch over the topic's ``max_message_bytes`` is split and its halves resent
(Kafka's MESSAGE_TOO_LARGE handling, ``RecordAccumulator.splitAndReenqueue``), instead of failing every
record of the batch with ``RecordTooLargeError``."""
from __future__ import annotations

import pytest

from pylog import errors
from pylog.cluster import Cluster


@pytest.mark.parametrize("idempotent", [True, False])
def test_batch_over_max_message_bytes_is_split_and_every_record_written_once_in_order(tmp_path, idempotent):
    c = Cluster(tmp_path, brokers=3, seed=2)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2,
                       config={"max_message_bytes": 1_000})
        p = c.producer(acks="all", linger_ms=50, enable_idempotence=idempotent)
        values = [b"%03d" % i + b"x" * 197 for i in range(21)]  # ~4.3 KB in one batch: split three times
        futs = [p.send("t", v, partition=0) for v in values]
        metas = [f.result() for f in futs]
        assert [m.offset for m in metas] == list(range(21))
        log = c.brokers[c.leader_of("t")].rm.partitions[("t", 0)].log
        assert [r.value for r in log.read(0, 1 << 30)] == values
        assert all(len(bt.buffer) <= 1_000 for bt in log.read_batches(0, 1 << 30))
        assert p.retries >= 3  # the splits
        if idempotent:
            assert p.epoch_bumps == 0  # the halves took the refused batch's sequences: no gap
            assert p.send("t", b"after", partition=0).result().offset == 21
        c._check()
    finally:
        c.close()


def test_a_single_record_over_max_message_bytes_still_fails(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=2)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2,
                       config={"max_message_bytes": 1_000})
        p = c.producer(acks="all")
        with pytest.raises(errors.RecordTooLargeError):
            p.send("t", b"x" * 2_000, partition=0).result()
        assert p.send("t", b"small", partition=0).result().offset == 0
    finally:
        c.close()
