#!/usr/bin/env python3
"""Open file descriptors of a 10,000-segment log (issue 18, item 5), and what the bound costs reads.

Builds a cleanly shut down log of ``--segments`` segments, ``--records`` records
of ``--value-size`` bytes each (written directly as segment files: 10,000 rolls
through ``Log.append`` would measure fsyncs), then, for each
``max_open_segments`` asked for (default: pylog's default, and "all" = one more
than the segments, i.e. every segment open as before the bound):

* descriptors this process holds for the log (``/proc/self/fd``) after
  ``Log.open``, and the most seen during the reads below (goal: <= 300 at the
  default);
* ``Log.open`` wall time;
* a sequential ``Log.read`` of the whole log (records/s): every segment is
  opened again once;
* random ``Log.get`` over the whole log (mostly released segments: each costs
  an open, fstat, mmap and a CRC check of the batch) and over the newest
  segments (all open: the cache's hit path), in microseconds per read.

Each figure is the best of ``--repeat`` runs. Prints a Markdown table and the
machine's load (``uptime``): this machine is shared.

Run: .venv/bin/python benchmarks/bench_open_files.py [--segments 10000] [--records 10]
     [--value-size 100] [--max-open default,all] [--gets 20000] [--repeat 3]
The "before" figures: the same script under a pylog without the bound, e.g.
     <main checkout>/.venv/bin/python benchmarks/bench_open_files.py --max-open none
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import pylog
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO
from pylog.storage.logdir import CLEAN_SHUTDOWN_FILE, LOG_START_FILE, RECOVERY_POINT_FILE
from pylog.record import encode_batch
try:
    from pylog.storage.segment_cache import DEFAULT_MAX_OPEN_SEGMENTS
except ImportError:  # a pylog from before the bound (run with --max-open none for the "before" figures)
    DEFAULT_MAX_OPEN_SEGMENTS = 0


def value(offset: int, size: int) -> bytes:
    head = b"%d:" % offset
    return head + bytes([offset % 251]) * max(0, size - len(head))


def build(root: str, segments: int, records: int, size: int) -> str:
    """A cleanly shut down log ``bench-0`` of ``segments`` segments of ``records`` records each."""
    part = os.path.join(root, "bench-0")
    os.makedirs(part)
    for s in range(segments):
        base = s * records
        prefix = os.path.join(part, f"{base:020d}")
        with open(prefix + ".log", "wb") as f:
            f.write(encode_batch([value(base + i, size) for i in range(records)], now_ms=1_000_000 + s,
                                 base_offset=base))
        open(prefix + ".index", "wb").close()
        open(prefix + ".timeindex", "wb").close()
    io = FileIO()
    checkpoint.write_offsets(io, os.path.join(root, RECOVERY_POINT_FILE), {("bench", 0): segments * records})
    checkpoint.write_offsets(io, os.path.join(root, LOG_START_FILE), {("bench", 0): 0})
    with open(os.path.join(root, CLEAN_SHUTDOWN_FILE), "wb") as f:
        f.write(b'{"version":0,"brokerEpoch":-1}')
    return part


def log_fds(part: str) -> int:
    """Descriptors of this process open on files of the partition directory."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(part + os.sep):
                n += 1
        except OSError:
            pass
    return n


def measure(part: str, max_open: Optional[int], n: int, size: int, gets: int, repeat: int, seed: int,
            records: int) -> Dict[str, float]:
    out: Dict[str, float] = {}
    rnd = random.Random(seed)
    everywhere = [rnd.randrange(n) for _ in range(gets)]
    hot_segments = max(1, min((max_open or n) - 1, n // records) - 1)
    newest = [n - 1 - rnd.randrange(hot_segments * records) for _ in range(gets)]
    for _ in range(repeat):
        t0 = time.perf_counter()
        cfg = {} if max_open is None else {"max_open_segments": max_open}
        log = pylog.Log.open(part, retention_ms=-1, **cfg)
        t_open = time.perf_counter() - t0
        try:
            after_open = log_fds(part)
            t0 = time.perf_counter()
            count = 0
            last = None
            offset = 0
            while offset < n:
                for r in log.read(offset, 1 << 20):
                    count += 1
                    last = r
                offset = last.offset + 1 if last is not None else n
            t_read = time.perf_counter() - t0
            assert count == n and last is not None and last.value == value(n - 1, size), count
            peak = log_fds(part)
            t0 = time.perf_counter()
            for o in everywhere:
                log.get(o)
            t_all = time.perf_counter() - t0
            peak = max(peak, log_fds(part))
            for o in newest:  # warm the newest segments, then time them
                log.get(o)
            t0 = time.perf_counter()
            for o in newest:
                log.get(o)
            t_new = time.perf_counter() - t0
            peak = max(peak, log_fds(part))
            assert log.get(everywhere[0]).value == value(everywhere[0], size)
        finally:
            log.close()
        best = {"open_fds": after_open, "peak_fds": peak, "open_ms": t_open * 1e3, "read_rps": n / t_read,
                "get_all_us": t_all / gets * 1e6, "get_newest_us": t_new / gets * 1e6}
        for k, v in best.items():
            if k in ("read_rps",):
                out[k] = max(out.get(k, 0.0), v)
            elif k in ("open_fds", "peak_fds"):
                out[k] = max(out.get(k, 0.0), v)
            else:
                out[k] = min(out.get(k, float("inf")), v)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--segments", type=int, default=10_000)
    p.add_argument("--records", type=int, default=10, help="records per segment (default 10)")
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--max-open", default="default,all",
                   help="comma-separated max_open_segments values; 'default', 'all' (one more than the "
                        "segments) and 'none' (not passed: for a pylog from before the bound) allowed")
    p.add_argument("--gets", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.segments + 1000
    if soft < want and hard >= want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # so that "all" can run at all
    root = tempfile.mkdtemp(prefix="pylog-openfiles-")
    try:
        print(f"building {args.segments:,} segments of {args.records} x {args.value_size} B ...", file=sys.stderr)
        part = build(root, args.segments, args.records, args.value_size)
        n = args.segments * args.records
        rows: List[str] = []
        for spec in args.max_open.split(","):
            mo: Optional[int] = (DEFAULT_MAX_OPEN_SEGMENTS if spec == "default" else args.segments + 1 if spec == "all"
                                 else None if spec == "none" else int(spec))
            print(f"max_open_segments={mo} ...", file=sys.stderr)
            r = measure(part, mo, n, args.value_size, args.gets, args.repeat, args.seed, args.records)
            label = ("not set (pylog before the bound)" if mo is None else f"{mo}" +
                     (" (default)" if spec == "default" else " (all open)" if spec == "all" else ""))
            rows.append(f"| {label} | {r['open_fds']:.0f} | {r['peak_fds']:.0f} | {r['open_ms']:.0f} | "
                        f"{r['read_rps']:,.0f} | {r['get_all_us']:.1f} | {r['get_newest_us']:.1f} |")
        print(f"\n{args.segments:,} segments x {args.records} records of {args.value_size} B; best of {args.repeat}\n")
        print("| max_open_segments | fds after open | peak fds | Log.open ms | Log.read records/s "
              "| Log.get whole log us | Log.get newest segments us |")
        print("|---|---|---|---|---|---|---|")
        for line in rows:
            print(line)
        print("\nuptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
