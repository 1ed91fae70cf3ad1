"""Many-partitions benchmark (issue 18, item 4): a 3-broker in-process cluster, real time.

Prints, in one run: ``create_topic`` wall time for N partitions at RF 3, the CPU the whole
process burns over an idle window afterwards (process_time / wall, as a fraction of one core),
``close()`` wall time, and optionally produce throughput spread over the N partitions against
one partition. Goals (issue 18): 1,000 partitions <= 1 s, 10,000 <= 10 s; idle <= 1% of a core;
produce spread over 1,000 partitions RF 3 >= 0.8x the one-partition rate (``--produce N``).
``create_topic``'s CPU time (the whole process) is printed beside its wall time: on a shared host
the wall time is mostly waiting for the disk (file creation) and for the CPU.

Run: .venv/bin/python benchmarks/bench_partitions.py [--partitions 1000] [--idle 10] [--produce N] [--repeat R]
     [--profile PREFIX]   (cProfile of the loop thread, its CPU time: PREFIX.open/.create/.idle/.close,
                          .warmupN/.produceN around each timed produce phase N)
"""
from __future__ import annotations

import argparse
import cProfile
import shutil
import tempfile
import time

from pylog.cluster import Cluster
from pylog.errors import LeaderNotAvailableError


class _LoopProfile:
    """cProfile of the scheduler's loop thread (where every broker runs), one file per phase."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.prof: "cProfile.Profile | None" = None

    def install(self) -> None:
        from pylog.runtime import scheduler

        orig = scheduler.RealScheduler._loop
        me = self

        def loop(sched: object) -> None:
            me.prof = cProfile.Profile(time.thread_time)
            me.prof.enable()
            orig(sched)  # type: ignore[arg-type]
            me.prof.disable()

        scheduler.RealScheduler._loop = loop  # type: ignore[method-assign]

    def phase(self, c: Cluster, name: str) -> None:
        def swap() -> None:
            assert self.prof is not None
            self.prof.disable()
            self.prof.dump_stats(f"{self.prefix}.{name}")
            self.prof = cProfile.Profile(time.thread_time)
            self.prof.enable()
        c.scheduler.run_sync(swap)


def run(partitions: int, idle_s: float, produce: int, prof: "_LoopProfile | None", repeat: int = 1,
        linger_ms: int = 5) -> None:
    d = tempfile.mkdtemp(prefix="pylog-bench-parts-")
    try:
        t0 = time.perf_counter()
        c = Cluster(d, brokers=3)
        t_open = time.perf_counter() - t0
        if prof:
            prof.phase(c, "open")
        t0, cpu0 = time.perf_counter(), time.process_time()
        note = ""
        try:
            c.create_topic("t", partitions=partitions, replication_factor=3, min_insync_replicas=2)
        except LeaderNotAvailableError:  # create_topic waits 30 s for serving leaders; keep waiting
            note = " (past create_topic's 30 s wait)"
            c._wait(lambda: c._serving([("t", p) for p in range(partitions)]), 1_200_000, "no leaders")
        t_create = time.perf_counter() - t0
        cpu_create = time.process_time() - cpu0
        if prof:
            prof.phase(c, "create")
        c0, w0 = time.process_time(), time.perf_counter()
        time.sleep(idle_s)
        idle = (time.process_time() - c0) / (time.perf_counter() - w0)
        if prof:
            prof.phase(c, "idle")
        rates = {}
        shapes = {}  # label -> (batches, produce requests, CPU us per record)
        if produce:
            p = c.producer(acks="all", linger_ms=linger_ms)
            v = b"x" * 100
            phases = [("one partition", [0]), (f"{partitions} partitions", list(range(partitions)))] * repeat
            for n, (label, parts) in enumerate(phases):
                label = label if n < 2 else f"{label} (#{n // 2 + 1})"
                for f in [p.send("t", v, partition=parts[i % len(parts)]) for i in range(min(produce, 2000))]:
                    f.result(timeout=120)
                if prof:
                    prof.phase(c, f"warmup{n}")
                t0, cpu0 = time.perf_counter(), time.process_time()
                b0, r0 = p.batches_sent, getattr(p, "produce_requests", 0)
                futs = [p.send("t", v, partition=parts[i % len(parts)]) for i in range(produce)]
                for f in futs:
                    f.result(timeout=300)
                rates[label] = produce / (time.perf_counter() - t0)
                shapes[label] = (p.batches_sent - b0, getattr(p, "produce_requests", 0) - r0,
                                 (time.process_time() - cpu0) / produce * 1e6)
                if prof:
                    prof.phase(c, f"produce{n}")  # the timed phase alone (0: one partition, 1: spread, ...)
            p.close()
        t0 = time.perf_counter()
        c.close()
        t_close = time.perf_counter() - t0
        if prof:
            assert prof.prof is not None  # the loop thread has stopped it (joined by close)
            prof.prof.dump_stats(f"{prof.prefix}.close")
        print(f"partitions={partitions} RF=3: open {t_open:.2f} s, create_topic {t_create:.2f} s{note} "
              f"(CPU {cpu_create:.2f} s), "
              f"idle CPU {idle * 100:.2f}% of a core over {idle_s:g} s, close {t_close:.2f} s")
        for label, r in rates.items():
            print(f"  produce acks=all spread over {label}: {r:,.0f} records/s, "
                  f"CPU (all threads) {shapes[label][2]:.2f} us/record "
                  f"({shapes[label][0]} batches in {shapes[label][1]} produce requests)")
        if len(rates) >= 2:
            one, spread = list(rates.values())[0::2], list(rates.values())[1::2]
            cpu_one = [x[2] for x in list(shapes.values())[0::2]]
            cpu_spread = [x[2] for x in list(shapes.values())[1::2]]
            print(f"  ratio spread/one: {max(spread) / max(one):.2f}x (best rates; by the least CPU per record, "
                  f"load-independent: {min(cpu_one) / min(cpu_spread):.2f}x)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def file_floor(partitions: int) -> None:
    """The file-system floor of creating ``partitions`` x 3 replicas with plain ``os`` calls, no
    fsync: one directory and four files each (a segment, its two indexes, a leader-epoch
    checkpoint: what a replica created before issue 18's lazy index files), and what it creates
    since (a directory and its ``.log``, plus a leader-epoch checkpoint for the third that lead)."""
    import os

    for label, names in (("4 new files", ("0.log", "0.index", "0.timeindex", "leader-epoch-checkpoint")),
                         ("1 new file (+1 per leader)", ("0.log",))):
        d = tempfile.mkdtemp(prefix="pylog-bench-floor-")
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(partitions * 3):
                sub = os.path.join(d, f"t-{i}")
                os.mkdir(sub)
                for n in names + (("leader-epoch-checkpoint",) if len(names) == 1 and i % 3 == 0 else ()):
                    os.close(os.open(os.path.join(sub, n), os.O_RDWR | os.O_CREAT, 0o644))
            print(f"  file-system floor: {partitions * 3} directories x {label}: {time.perf_counter() - t0:.2f} s "
                  f"(CPU {time.process_time() - c0:.2f} s)")
        finally:
            shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--produce", type=int, default=0)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--linger-ms", type=int, default=5, help="the producer's linger_ms (its default is 0)")
    ap.add_argument("--repeat", type=int, default=1, help="produce phases (one partition, spread) N times each")
    a = ap.parse_args()
    prof = _LoopProfile(a.profile) if a.profile else None
    if prof:
        prof.install()
    run(a.partitions, a.idle, a.produce, prof, a.repeat, a.linger_ms)
    file_floor(a.partitions)


if __name__ == "__main__":
    main()
