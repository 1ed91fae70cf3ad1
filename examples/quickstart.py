"""Quickstart: append to a log, read it back by offset and by time, then crash
the writer with SIGKILL mid-append and watch recovery keep every acknowledged
record.

Run: ./dev demo   (or: .venv/bin/python examples/quickstart.py)
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pylog


def main() -> None:
    root = tempfile.mkdtemp(prefix="pylog-demo-")
    path = os.path.join(root, "orders-0")  # Kafka layout: <log dir>/<topic>-<partition>

    # 1. Append and read by offset.
    with pylog.Log.open(path, segment_bytes=64 * 1024) as log:
        first = log.append([b"hello", b"world"])
        log.append([pylog.Record(value=b"paid", key=b"order-7", headers=[("source", b"web")])])
        print(f"appended offsets {first.base_offset}..{log.log_end_offset - 1}")
        for rec in log.read(0):
            print(f"  offset {rec.offset}: key={rec.key!r} value={rec.value!r} headers={list(rec.headers)}")
        for i in range(2000):
            log.append([b"x" * 100 for _ in range(10)])
        print(f"{log.log_end_offset} records in {len(log.segments)} segments; "
              f"offset 12345 holds {next(log.read(12345)).value[:10]!r}...")
        ts = next(log.read(5000)).timestamp
        print(f"first offset with timestamp >= {ts}: {log.offset_for_time(ts)}")

    # 2. A writer process appends with fsync on every append and reports each
    #    acknowledged offset; we SIGKILL it mid-run.
    writer = textwrap.dedent(
        f"""
        import pylog, sys
        log = pylog.Log.open({path!r}, flush_messages=1, segment_bytes=64 * 1024)
        i = 0
        while True:
            res = log.append([b"ack-%d" % i])
            print(res.last_offset, flush=True)
            i += 1
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    acked = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acked.append(int(line))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    print(f"writer killed with SIGKILL after {len(acked)} acknowledged appends (last offset {acked[-1]})")

    # 3. Reopen: recovery validates the tail, truncates any torn batch, keeps every ack.
    with pylog.Log.open(path, segment_bytes=64 * 1024) as log:
        r = log.recovery
        print(f"recovery: clean={r.clean_shutdown} scanned {r.segments_scanned} segment(s), "
              f"{r.bytes_scanned} bytes, truncated {r.bytes_truncated} bytes")
        missing = [o for o in acked if o >= log.log_end_offset]
        assert not missing, f"lost acknowledged offsets {missing[:5]}"
        last = next(log.read(acked[-1]))
        assert last.value == b"ack-%d" % (len(acked) - 1)
        print(f"all {len(acked)} acknowledged records are present; log end offset {log.log_end_offset}")
    print(f"log directory: {root}")


if __name__ == "__main__":
    main()
