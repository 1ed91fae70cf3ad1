"""Replication benchmark (issue 3): one producer, 100-byte records, in process, real time.

Prints, in one run: RF=1 and RF=3 ``acks=all`` throughput and their ratio
(target >= 0.5x, Kafka 2014: 0.51x across machines), RF=3 ``acks=all``
throughput against Kafka 2014's 421,823 records/s, ``acks=all`` latency
p50/p99 (one record in flight), and the time to elect a new leader after a
hard stop of the leader (real time).

Run: .venv/bin/python benchmarks/bench_replication.py [--records N]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any, Dict, List

from pylog.cluster import Cluster

KAFKA_2014_RF3_SYNC = 421_823


def throughput(rf: int, acks: Any, n: int) -> Dict[str, float]:
    c = Cluster(tempfile.mkdtemp(prefix="pylog-bench-"), brokers=3)
    try:
        c.create_topic("b", partitions=1, replication_factor=rf, min_insync_replicas=min(2, rf))
        p = c.producer(acks=acks)
        v = b"x" * 100
        for f in [p.send("b", v, partition=0) for _ in range(500)]:  # warm up
            f.result(timeout=60)
        c0 = time.process_time()
        t0 = time.perf_counter()
        futs = [p.send("b", v, partition=0) for _ in range(n)]
        for f in futs:
            f.result(timeout=120)
        rate = n / (time.perf_counter() - t0)
        cpu_us = (time.process_time() - c0) / n * 1e6
        lat: List[float] = []
        for _ in range(500):
            t = time.perf_counter()
            p.send("b", v, partition=0).result(timeout=60)
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        return {"records_per_s": rate, "p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99) - 1],
                "cpu_us": cpu_us}
    finally:
        c.close()


def election_seconds(session_timeout_ms: int) -> float:
    c = Cluster(tempfile.mkdtemp(prefix="pylog-bench-"), brokers=3, session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=max(50, session_timeout_ms // 12))
    try:
        c.create_topic("e", 1, 3, 2)
        c.producer().send("e", b"x").result(timeout=60)
        t = time.perf_counter()
        c.stop_broker(c.leader_of("e"), clean=False)
        while c.describe("e")[0].leader_epoch == 0:
            time.sleep(0.005)
        return time.perf_counter() - t
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    args = ap.parse_args()
    rf1 = throughput(1, "all", args.records)
    rf3 = throughput(3, "all", args.records)
    el = election_seconds(args.session_timeout_ms)
    ratio = rf3["records_per_s"] / rf1["records_per_s"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"records: {args.records} x 100 bytes, one producer, partition 0, in process (real time); "
          f"{os.cpu_count()} CPUs, load average {load:.1f}")
    for name, r in (("RF=1", rf1), ("RF=3", rf3)):
        print(f"{name} acks=all: {r['records_per_s']:,.0f} records/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
              f"CPU {r['cpu_us']:.2f} us/record (all threads; 1e6 / this ~ the rate on one free core)")
    print(f"RF=3 / RF=1: {ratio:.2f}x  (target >= 0.5x: {'MET' if ratio >= 0.5 else 'NOT MET'})")
    ok = rf3["records_per_s"] >= KAFKA_2014_RF3_SYNC
    print(f"RF=3 acks=all vs {KAFKA_2014_RF3_SYNC:,} records/s: {rf3['records_per_s'] / KAFKA_2014_RF3_SYNC:.3f}x "
          f"({'MET' if ok else 'NOT MET'})")
    print(f"new leader after a hard stop (session_timeout_ms={args.session_timeout_ms}): {el:.2f} s")


if __name__ == "__main__":
    main()
