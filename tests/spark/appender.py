"""A writer process for the concurrent-read test: ``python -m tests.spark.appender DIR TOPIC SECONDS``.

Appends batches of ``helpers.record_for`` records (random sizes, some
gzip-compressed) to ``DIR/TOPIC-0`` for about SECONDS, rolling small
segments, then prints the log end offset.
"""
from __future__ import annotations

import os
import random
import sys
import time

import pylog
from tests.spark.helpers import record_for


def main() -> None:
    path, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    rnd = random.Random(7)
    lg = pylog.Log.open(os.path.join(path, f"{topic}-0"), segment_bytes=30_000, index_interval_bytes=1024)
    deadline = time.monotonic() + seconds
    print("started", flush=True)
    while time.monotonic() < deadline:
        start = lg.log_end_offset
        n = rnd.randint(1, 60)
        lg.append([record_for(topic, 0, i) for i in range(start, start + n)],
                  compression="gzip" if rnd.random() < 0.2 else None)
        time.sleep(rnd.random() * 0.01)
    end = lg.log_end_offset
    lg.close()
    print(end, flush=True)


if __name__ == "__main__":
    main()
