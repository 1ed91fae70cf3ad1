"""Follower fetch rounds per produced batch at RF 3, ``acks=all``, one partition (issue 18).

The timed part of ``bench_replication.py``'s ``throughput(3, "all", N)`` - the same cluster,
producer, 500-record warm-up and loop - with two counters over the timed records only: the
``ReplicaFetchResponse`` messages with partitions that reach a follower (and how many of them carry
no records: a HW alone) and the batches the leader appends. Counted by wrapping
``ReplicaManager._on_replica_fetch_response`` and ``Partition.append_as_leader`` in this process.
Prints each run and the best CPU per record of ``--runs`` (all threads of the process).

Run: .venv/bin/python benchmarks/bench_fetch_rounds.py [--records 60000] [--runs 3]
     (PYTHONPATH=<another checkout> to measure that one with this script)
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any, Dict

import pylog
from pylog.cluster import Cluster
from pylog.replication import partition as partition_mod
from pylog.replication import replica_manager as rm_mod

counts: Dict[str, int] = {"answers": 0, "hw_only": 0, "batches": 0}


def _install() -> None:
    real_response = rm_mod.ReplicaManager._on_replica_fetch_response
    real_append = partition_mod.Partition.append_as_leader

    def on_response(self: Any, resp: Any, now_ms: int, out: Any) -> None:
        if resp.partitions:
            counts["answers"] += 1
            if not any(r.records for _, r in resp.partitions):
                counts["hw_only"] += 1
        real_response(self, resp, now_ms, out)

    def append(self: Any, *a: Any, **k: Any) -> Any:
        counts["batches"] += 1
        return real_append(self, *a, **k)

    rm_mod.ReplicaManager._on_replica_fetch_response = on_response  # type: ignore[method-assign]
    partition_mod.Partition.append_as_leader = append  # type: ignore[method-assign]


def run(n: int) -> Dict[str, float]:
    c = Cluster(tempfile.mkdtemp(prefix="pylog-bench-"), brokers=3)
    try:
        c.create_topic("b", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        v = b"x" * 100
        for f in [p.send("b", v, partition=0) for _ in range(500)]:  # warm up
            f.result(timeout=60)
        counts.update(answers=0, hw_only=0, batches=0)
        c0, t0 = time.process_time(), time.perf_counter()
        futs = [p.send("b", v, partition=0) for _ in range(n)]
        for f in futs:
            f.result(timeout=120)
        rate = n / (time.perf_counter() - t0)
        cpu_us = (time.process_time() - c0) / n * 1e6
        return {"rate": rate, "cpu_us": cpu_us, **{k: float(x) for k, x in counts.items()}}
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    _install()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{pylog.__file__}: RF 3 acks=all, one partition, {a.records} x 100 bytes; load average {load:.2f}")
    best = None
    for i in range(a.runs):
        r = run(a.records)
        print(f"  run {i + 1}: {r['rate']:,.0f} records/s, CPU {r['cpu_us']:.2f} us/record; follower answers "
              f"{r['answers']:.0f} ({r['hw_only']:.0f} without records) for {r['batches']:.0f} batches = "
              f"{r['answers'] / max(1.0, r['batches']):.2f} per batch")
        if best is None or r["cpu_us"] < best["cpu_us"]:
            best = r
    assert best is not None
    print(f"best CPU {best['cpu_us']:.2f} us/record ({best['rate']:,.0f} records/s), "
          f"{best['answers'] / max(1.0, best['batches']):.2f} follower answers per batch")


if __name__ == "__main__":
    main()
