"""Consumer benchmark (issue 4): ``poll`` delivery rate and produce->consume latency, real time, in process.

* delivery: one partition, RF=1, 100-byte values written first; one consumer
  (``assign``, no group) polls them all; records/s against Kafka 2014's
  940,521 records/s (one consumer). Reported for ``max_poll_records`` 500
  (Kafka's default) and 10,000.
* latency: one record at a time, ``acks=1``; the clock starts before ``send``
  and stops when ``poll`` returns the record (the consumer's fetch is parked
  in the broker's purgatory and woken by the append). p50/p99 against the
  target p99 <= 1 ms (Kafka 2014: 2 ms p50, 3 ms p99).

The delivery rate is also given per CPU-second of the process (the loop
thread does the fetching and decoding, the caller only waits): on a shared,
loaded machine wall-clock rates mostly measure the other processes.

Run: nice .venv/bin/python benchmarks/bench_consumer.py [--records N] [--latency-samples N]
(also collected by ``pytest benchmarks --benchmark-only``).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, List

from pylog.cluster import Cluster

KAFKA_2014_CONSUMER = 940_521
VALUE = b"x" * 100


def fill(c: Cluster, n: int) -> None:
    p = c.producer(acks=1)
    futs = [p.send("b", VALUE, partition=0) for _ in range(n)]
    for f in futs[-1:]:
        f.result(timeout=600)
    p.flush() if hasattr(p, "flush") else None


def delivery_rate(n: int, max_poll_records: int) -> Dict[str, float]:
    c = Cluster(tempfile.mkdtemp(prefix="pylog-bench-"), brokers=1)
    try:
        c.create_topic("b", partitions=1, replication_factor=1)
        fill(c, n)
        cons = c.consumer(None, max_poll_records=max_poll_records, enable_auto_commit=False)
        cons.assign([("b", 0)])
        cons.position("b", 0)
        got = 0
        nbytes = 0
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        while got < n:
            recs = cons.poll(5.0)
            got += len(recs)
            if recs:
                nbytes += len(recs[-1].value) * len(recs)
        dt = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        cons.close()
        return {"records": got, "records_per_s": got / dt, "mb_per_s": nbytes / dt / 1e6,
                "records_per_cpu_s": got / cpu if cpu > 0 else float("nan")}
    finally:
        c.close()


def latency(samples: int) -> Dict[str, float]:
    c = Cluster(tempfile.mkdtemp(prefix="pylog-bench-"), brokers=1)
    try:
        c.create_topic("l", partitions=1, replication_factor=1)
        p = c.producer(acks=1)
        cons = c.consumer(None, fetch_max_wait_ms=500, enable_auto_commit=False)
        cons.assign([("l", 0)])
        cons.position("l", 0)
        lat: List[float] = []
        for i in range(samples + 50):
            t = time.perf_counter()
            p.send("l", VALUE, partition=0)
            recs: list = []
            while not recs:
                recs = cons.poll(5.0)
            if i >= 50:  # warm-up
                lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        cons.close()
        return {"p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99) - 1], "max_ms": lat[-1]}
    finally:
        c.close()


def test_bench_poll_delivery(benchmark):  # pragma: no cover - pytest-benchmark entry
    res = benchmark.pedantic(delivery_rate, args=(200_000, 10_000), rounds=1, iterations=1)
    benchmark.extra_info.update(res)
    benchmark.extra_info["bytes"] = 200_000 * 100


def test_bench_produce_consume_latency(benchmark):  # pragma: no cover - pytest-benchmark entry
    res = benchmark.pedantic(latency, args=(1000,), rounds=1, iterations=1)
    benchmark.extra_info.update(res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--latency-samples", type=int, default=2_000)
    args = ap.parse_args()
    print(f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for mpr in (500, 10_000):
        r = delivery_rate(args.records, mpr)
        print(f"poll delivery, max_poll_records={mpr:>6}: {r['records_per_s']:>12,.0f} records/s "
              f"({r['mb_per_s']:.1f} MB/s of values)  = {r['records_per_s'] / KAFKA_2014_CONSUMER:.2f}x Kafka 2014 "
              f"({KAFKA_2014_CONSUMER:,}/s); {r['records_per_cpu_s']:,.0f} records per CPU-second of this process")
    lat = latency(args.latency_samples)
    print(f"produce->consume latency (acks=1, real time): p50 {lat['p50_ms']:.3f} ms  p99 {lat['p99_ms']:.3f} ms  "
          f"max {lat['max_ms']:.3f} ms  (target p99 <= 1 ms)")


if __name__ == "__main__":
    main()
