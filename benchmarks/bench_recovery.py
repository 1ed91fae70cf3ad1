"""Crash recovery with a fixed unflushed tail, against the size of the segment holding the recovery point.

Issue 18's metric: "kill -9 recovery, 10 MB unflushed tail: within 2x between 100 MB and 1 GB segments".
For each size a log is filled to that many bytes in one segment (``segment_bytes`` 1 GiB), flushed (the
recovery point is then the log end, checkpointed), given ``--tail-mb`` of unflushed appends and
abandoned (what a killed process leaves); the reopen - recovery included - is timed, best of
``--repeat``. Uses :func:`compare.crash_with_tail`, the same procedure as ``benchmarks/compare.py``.

Run: ``.venv/bin/python benchmarks/bench_recovery.py [--sizes-mb 100 1000] [--tail-mb 10] [--repeat 3]``
(about 1.2 GB of disk in a temporary directory, removed afterwards). Any pylog on ``sys.path`` can be
measured this way (e.g. another worktree's ``.venv/bin/python`` runs this file against its own code).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import crash_with_tail, fill_log, make_values  # noqa: E402

GiB = 1 << 30


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mb", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--tail-mb", type=float, default=10.0)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", help="work directory (default: a fresh temporary one, removed afterwards)")
    args = p.parse_args(argv)
    root = args.dir or tempfile.mkdtemp(prefix="pylog-recovery-")
    values = make_values(100_000, args.value_size, 7)
    batches = [values[i:i + args.batch] for i in range(0, len(values), args.batch)]
    tail_n = int(args.tail_mb * 1e6) // args.value_size
    tail_values = make_values(tail_n, args.value_size, 11)
    tail: List[List[bytes]] = [tail_values[i:i + args.batch] for i in range(0, tail_n, args.batch)]
    import pylog

    print(f"pylog from {os.path.dirname(pylog.__file__)}; tail {args.tail_mb} MB; best of {args.repeat}")
    results = {}
    try:
        for mb in args.sizes_mb:
            path = os.path.join(root, f"r{mb}-0")
            fill_log(path, mb * 1_000_000, batches, segment_bytes=GiB)
            r = crash_with_tail(path, tail, args.repeat, segment_bytes=GiB)
            results[mb] = r
            print(f"segment {r['log_bytes'] / 1e6:8,.0f} MB + {r['tail_bytes'] / 1e6:.1f} MB tail: "
                  f"{r['seconds'] * 1e3:8.1f} ms, scanned {r['bytes_scanned'] / 1e6:8,.1f} MB")
            shutil.rmtree(path, ignore_errors=True)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if len(results) >= 2:
        lo, hi = results[min(results)], results[max(results)]
        print(f"ratio {max(results)} MB / {min(results)} MB segment: {hi['seconds'] / lo['seconds']:.2f}x (goal <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
