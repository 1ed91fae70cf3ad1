"""A writer process for the concurrent-read test: ``python -m tests.spark.appender DIR TOPIC MAX_SECONDS``.

Appends batches of ``helpers.record_for`` records (random sizes, some
gzip-compressed; about 1,000 a second, at most 20,000) to ``DIR/TOPIC-0``,
rolling small segments, until a line arrives on stdin (or MAX_SECONDS
pass), then prints the log end offset.
"""
from __future__ import annotations

import os
import random
import sys
import threading
import time

import pylog
from tests.spark.helpers import record_for


def main() -> None:
    path, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    rnd = random.Random(7)
    lg = pylog.Log.open(os.path.join(path, f"{topic}-0"), segment_bytes=30_000, index_interval_bytes=1024)
    deadline = time.monotonic() + seconds
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    print("started", flush=True)
    while time.monotonic() < deadline and not stop.is_set():
        start = lg.log_end_offset
        if start >= 20_000:  # enough: keep the reads small, wait to be told to stop
            time.sleep(0.05)
            continue
        n = rnd.randint(1, 60)
        lg.append([record_for(topic, 0, i) for i in range(start, start + n)],
                  compression="gzip" if rnd.random() < 0.2 else None)
        time.sleep(0.01 + rnd.random() * 0.04)
    end = lg.log_end_offset
    lg.close()
    print(end, flush=True)


if __name__ == "__main__":
    main()
