"""A consumer that fetches a damaged batch: the records before it, then CorruptRecordError from every
poll (naming the partition and offset) until the application seeks past it - in simulated and real time
(where the error is raised on the loop thread and must reach the thread in poll)."""
from __future__ import annotations

from typing import List, Tuple

import pytest

import pylog
from pylog.cluster import Cluster
from pylog.errors import CorruptRecordError


def _damage_value_of(log: pylog.Log, offset: int) -> None:
    """Flip the last value byte of the single-record batch holding ``offset`` (the CRC no longer matches)."""
    (batch,) = [b for b in log.read_batches(log.log_start_offset, 1 << 30) if b.base_offset == offset]
    position = batch.info.position + batch.info.size - 2  # the last byte is the header count (0)
    with open(batch.path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x01]))


def _poll_until_error(cons: pylog.Consumer, polls: int) -> Tuple[List[Tuple[int, bytes]], CorruptRecordError]:
    got: List[Tuple[int, bytes]] = []
    for _ in range(polls):
        try:
            got += [(r.offset, r.value) for r in cons.poll(0.5)]
        except CorruptRecordError as exc:
            return got, exc
    raise AssertionError(f"no CorruptRecordError after {polls} polls; got {got}")


@pytest.mark.parametrize("simulated", [True, False])
def test_records_before_the_damage_then_the_error_until_a_seek(tmp_path, simulated: bool) -> None:
    c = Cluster(tmp_path, brokers=1, seed=31) if simulated else Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks=1)
        for i in range(10):
            p.send("t", b"value-%d" % i).result(timeout=30)
        _damage_value_of(c.brokers[0].rm.partitions[("t", 0)].log, 5)
        cons = c.consumer(None, fetch_max_wait_ms=50)
        cons.assign([("t", 0)])
        got, err = _poll_until_error(cons, 40)
        assert got == [(i, b"value-%d" % i) for i in range(5)]  # everything before the damage, nothing wrong
        assert "t-0" in str(err) and "offset 5" in str(err)
        with pytest.raises(CorruptRecordError, match="offset 5"):
            cons.poll(0.2)  # raised again: the partition does not silently stall
        assert cons.position("t", 0) == 5
        cons.seek("t", 0, 6)  # skip the damaged record
        rest: List[Tuple[int, bytes]] = []
        for _ in range(40):
            rest += [(r.offset, r.value) for r in cons.poll(0.5)]
            if len(rest) >= 4:
                break
        assert rest == [(i, b"value-%d" % i) for i in range(6, 10)]
        cons.close()
    finally:
        c.close()
