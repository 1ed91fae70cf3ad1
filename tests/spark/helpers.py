"""Builders of log directories for the Spark source tests (no Spark needed here)."""
from __future__ import annotations

import os
import time
from typing import Dict, List, Optional, Tuple

import pylog
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO
from pylog.record import Record


# Recent timestamps: the logs' default 7-day retention would delete older segments.
BASE_TS = (int(time.time() * 1000) // 1000) * 1000 - 3_600_000


def record_for(topic: str, partition: int, i: int) -> Record:
    """A deterministic record with a mix of null/non-null keys and values, headers, timestamps."""
    key = None if i % 3 == 0 else b"k%d" % i
    value = None if i % 11 == 5 else b"%s-%d-%d:" % (topic.encode(), partition, i) + b"x" * (i % 17)
    headers: Tuple[Tuple[str, Optional[bytes]], ...] = ()
    if i % 4 == 0:
        headers = (("h", b"%d" % i), ("n", None)) if i % 8 == 0 else (("h", b"%d" % i),)
    return Record(value=value, key=key, headers=headers, timestamp=BASE_TS + i * 7 + (i % 5))


def write_partition(
    log_dir: str,
    topic: str,
    partition: int,
    n: int,
    *,
    batch: int = 50,
    segment_bytes: int = 16_384,
    index_interval_bytes: int = 512,
    compress_every: int = 4,
) -> None:
    """Append ``n`` records in batches; every ``compress_every``-th batch is gzip-compressed."""
    lg = pylog.Log.open(
        os.path.join(log_dir, f"{topic}-{partition}"),
        segment_bytes=segment_bytes,
        index_interval_bytes=index_interval_bytes,
    )
    try:
        for b, start in enumerate(range(0, n, batch)):
            recs = [record_for(topic, partition, i) for i in range(start, min(n, start + batch))]
            lg.append(recs, compression="gzip" if compress_every and b % compress_every == 1 else None)
    finally:
        lg.close()


def pylog_rows(part_dir: str, start: int = 0, end: Optional[int] = None) -> List[tuple]:
    """Rows (key, value, offset, timestamp ms, headers) from pylog's own reader."""
    lg = pylog.Log.open(part_dir, read_only=True)
    try:
        end = lg.log_end_offset if end is None else end
        out = []
        off = max(start, lg.log_start_offset)
        while off < end:
            recs = list(lg.read(off, 1 << 20, max_offset=end))
            if not recs:
                break
            for r in recs:
                out.append((r.key, r.value, r.offset, r.timestamp, tuple(r.headers) or None))
            off = recs[-1].offset + 1
        return out
    finally:
        lg.close()


def write_hw(log_dir: str, hws: Dict[Tuple[str, int], int]) -> None:
    """Write a ``replication-offset-checkpoint`` (Kafka's text format) into ``log_dir``."""
    checkpoint.write_offsets(FileIO(), os.path.join(log_dir, "replication-offset-checkpoint"), hws)


def segment_files(part_dir: str) -> List[str]:
    return sorted(os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(".log"))


def corrupt_batch(path: str, batch_index: int) -> Tuple[int, int, int]:
    """Flip a CRC-covered byte of the ``batch_index``-th batch; returns (position, base, last offset)."""
    from pylog.record import scan

    data = bytearray(open(path, "rb").read())
    info = scan(bytes(data)).batches[batch_index]
    data[info.position + 70] ^= 0xFF
    with open(path, "r+b") as f:
        f.write(bytes(data))
    return info.position, info.base_offset, info.last_offset
