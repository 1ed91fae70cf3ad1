"""Wire-protocol benchmark (issue 16, "Speed"): real Kafka clients against a pylog cluster over loopback.

* confluent-kafka producer -> pylog, 100-byte records, acks=1, one partition, RF=1:
  records/s from the first ``produce`` until ``flush()`` returns (every
  delivery report in), against pylog's in-process ``send`` measured in the same
  run (same cluster shape, acks=1, end to end to ``flush``). Targets: >= 821,557
  records/s (Kafka 2014, one producer) and >= 0.5x the in-process figure.
* confluent-kafka consumer (assign, from offset 0, ``consume`` in batches):
  records/s until every record was read. Target >= 940,521 records/s.
  The clients run in a second process (as a real client does), so they do not
  share the broker's interpreter lock; the in-process ``send`` runs in this one.
* Start-up: from ``Cluster(path, brokers=1, listen=...)`` to the first
  acknowledged produce of a fresh confluent-kafka producer (auto-created topic).
  Target: p50 <= 100 ms.

The records read back are counted and the last offset checked, so a fast wrong
answer fails. Script::

    nice .venv/bin/python benchmarks/bench_protocol.py                 # 1,000,000 records, 15 start-ups
    nice .venv/bin/python benchmarks/bench_protocol.py --records 200000 --startups 5
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from typing import Dict, List

from pylog.cluster import Cluster

KAFKA_2014_ONE_PRODUCER = 821_557
KAFKA_2014_ONE_CONSUMER = 940_521
VALUE = b"v" * 100


def inprocess_send(n: int, root: str) -> float:
    """pylog's own producer (acks=1) on a 1-broker cluster: records/s to flush()."""
    c = Cluster(root, brokers=1)
    try:
        c.create_topic("b", partitions=1, replication_factor=1)
        p = c.producer(acks=1, linger_ms=5)
        for _ in range(2000):
            p.send("b", VALUE)
        p.flush()
        send = p.send
        t0 = time.perf_counter()
        for _ in range(n):
            send("b", VALUE)
        p.flush()
        dt = time.perf_counter() - t0
        assert c.describe("b")[0].high_watermark == n + 2000
        return n / dt
    finally:
        c.close()


def _client_produce(bootstrap: str, n: int, q: "multiprocessing.Queue[object]") -> None:
    """In a separate process (as a real client is): produce ``n`` records, report records/s."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                  "queue.buffering.max.messages": 2_000_000, "batch.num.messages": 10_000})
    for _ in range(2000):
        p.produce("b", VALUE, partition=0)
    p.flush(30)
    produce, poll = p.produce, p.poll
    t0 = time.perf_counter()
    left_to_send = n
    while left_to_send:  # chunks of 10,000 sends, serving delivery reports in between (poll)
        chunk = min(10_000, left_to_send)
        left_to_send -= chunk
        for _ in range(chunk):
            try:
                produce("b", VALUE, partition=0)
            except BufferError:  # librdkafka's queue is full: let it drain
                poll(0.001)
                produce("b", VALUE, partition=0)
        poll(0)
    left = p.flush(120)
    # no per-record delivery callback (its Python call would be measured, not the broker); the
    # caller checks the partition's high watermark instead: every record acknowledged, none lost
    q.put((n / (time.perf_counter() - t0), 0, left))


def _client_consume(bootstrap: str, total: int, q: "multiprocessing.Queue[object]") -> None:
    from confluent_kafka import Consumer, TopicPartition

    co = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                   "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                   # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once 100,000 records
                   # wait in its queue; a throughput run keeps fetching
                   "queued.min.messages": 2_000_000, "fetch.queue.backoff.ms": 0})
    co.assign([TopicPartition("b", 0, 0)])
    got = 0
    last = -1
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < total and time.perf_counter() < deadline:
        # ask for at most what is left: consume(n, timeout) returns early only once it has n records,
        # so a fixed 10,000 would add a whole timeout to the last, shorter batch (as kafka-consumer-perf-test
        # stops at its --messages count)
        for m in co.consume(min(10_000, total - got), 1.0):
            if m.error() is None:
                got += 1
                last = m.offset()
    rate = total / (time.perf_counter() - t0)
    co.close()
    q.put((rate, got, last))


def _in_process(fn, *args):  # noqa: ANN001
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=fn, args=args + (q,))
    proc.start()
    out = q.get(timeout=600)
    proc.join(60)
    return out


def confluent_produce_consume(n: int, root: str) -> Dict[str, float]:
    """The broker in this process, the confluent-kafka client in another (one core each)."""
    c = Cluster(root, brokers=1, listen="127.0.0.1:0")
    try:
        c.create_topic("b", partitions=1, replication_factor=1)
        prod, failed, left = _in_process(_client_produce, c.bootstrap_servers, n)
        assert failed == 0 and left == 0, (failed, left)
        total = n + 2000
        assert c.describe("b")[0].high_watermark == total
        cons, got, last = _in_process(_client_consume, c.bootstrap_servers, total)
        assert got == total and last == total - 1, (got, last)
        return {"produce": prod, "consume": cons}
    finally:
        c.close()


def startup_ms(root: str) -> float:
    from confluent_kafka import Producer

    t0 = time.perf_counter()
    c = Cluster(root, brokers=1, listen="127.0.0.1:0")
    try:
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 0})
        out: List[object] = []
        p.produce("first", b"x", on_delivery=lambda e, m: out.append(e))
        p.flush(30)
        dt = (time.perf_counter() - t0) * 1000
        assert out == [None]
        return dt
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--startups", type=int, default=15)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="pylog-bench-protocol-")
    try:
        inproc = inprocess_send(args.records, os.path.join(base, "inproc"))
        r = confluent_produce_consume(args.records, os.path.join(base, "wire"))
        starts = sorted(startup_ms(os.path.join(base, f"start-{i}")) for i in range(args.startups))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    p50 = statistics.median(starts)
    print(f"records: {args.records:,} x 100 B, acks=1, 1 broker, 1 partition; cpus: {os.cpu_count()}")
    print(f"pylog in-process send      {inproc:12,.0f} records/s")
    print(f"confluent-kafka produce    {r['produce']:12,.0f} records/s  "
          f"({r['produce'] / KAFKA_2014_ONE_PRODUCER:.2f}x Kafka 2014, {r['produce'] / inproc:.2f}x in-process)")
    print(f"confluent-kafka consume    {r['consume']:12,.0f} records/s  "
          f"({r['consume'] / KAFKA_2014_ONE_CONSUMER:.2f}x Kafka 2014)")
    print(f"start to first ack (ms)    p50 {p50:.1f}  min {starts[0]:.1f}  max {starts[-1]:.1f}  (n={len(starts)})")


if __name__ == "__main__":
    main()
