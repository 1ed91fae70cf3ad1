"""Data and log builders shared by the pytest benchmarks (imported by conftest.py and bench_*.py)."""
from __future__ import annotations

import random
from typing import Any, List

from pylog.storage.log import Log

MiB = 1 << 20


def make_values(n: int, size: int, seed: int = 2026) -> List[bytes]:
    """``n`` random values of ``size`` bytes (seeded: every run sees the same data)."""
    blob = random.Random(seed * 7919 + size).randbytes(n * size)
    return [blob[i * size : (i + 1) * size] for i in range(n)]


def batched(values: List[bytes], batch: int) -> List[List[bytes]]:
    return [values[i : i + batch] for i in range(0, len(values), batch)]


def build_log(path: str, n: int, size: int, batch: int, **cfg: Any) -> None:
    """Write ``n`` records of ``size`` bytes in batches of ``batch`` and close the log cleanly."""
    log = Log.open(path, **cfg)
    try:
        for b in batched(make_values(n, size), batch):
            log.append(b)
    finally:
        log.close()
