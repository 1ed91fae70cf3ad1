"""Runs of plain batches decoded a run per C call (``plg_decode_fetch_run``).

A "run" is consecutive uncompressed v2 batches without headers or null
values: the C core decodes offsets and timestamps and writes a ``struct``
format that slices every value (and key) out of the buffer in one
``unpack_from``. The consumer's fetch decoder and the log's reader both
decode this way; anything else stops the run (``RUN_SLOW``) and takes the
general path (:class:`pylog.record.RecordBatch`).

Scratch arrays come from a small pool (:func:`take_scratch`/:func:`give_back`).
``make_records``/``untrack_records`` are the send-path extension's C record
builders (None without that build; see :func:`pylog.storage.reader.build_records`).

Thread-safety: a scratch belongs to one caller between take and give back;
the pool's list operations are atomic under the GIL.
"""
from __future__ import annotations

from struct import Struct
from typing import Any, List, Tuple

from pylog._native.batch import (
    MAX_RUN_RECORDS,
    MIN_RECORD,
    RUN_CORRUPT,
    RUN_END,
    RUN_SLOW,
    FetchRun,
    FetchRunScratch,
)

from pylog._native import make_records, untrack_records

_pool: List[FetchRunScratch] = []


def scratch_for(total_bytes: int) -> int:
    """How many records a run over ``total_bytes`` can hold at most (capped at one call's worth)."""
    return min(total_bytes // MIN_RECORD + 1, MAX_RUN_RECORDS)


def take_scratch(need: int) -> FetchRunScratch:
    """A scratch for ``need`` records from the pool (or a new one); hand it back with :func:`give_back`.
    Smaller ones met on the way are dropped (list.pop/append are atomic: concurrent callers each
    take their own)."""
    while _pool:
        s = _pool.pop()
        if s.cap >= need:
            return s
    return FetchRunScratch(max(1024, min(need, MAX_RUN_RECORDS)))


def give_back(scratch: FetchRunScratch) -> None:
    """Return ``scratch`` to the pool."""
    _pool.append(scratch)


def run_fields(run: FetchRun, view: Any, at: int) -> Tuple[Tuple[bytes, ...], Any]:
    """``(values, keys)`` of the run decoded at ``view[at:]``: tuples of ``bytes`` sliced by the
    run's formats (``keys`` None when every key is null). O(records)."""
    values = Struct(run.values).unpack_from(view, at)
    keys = None if run.keys is None else Struct(run.keys).unpack_from(view, at)
    return values, keys


__all__ = ["FetchRun", "FetchRunScratch", "RUN_END", "RUN_SLOW", "RUN_CORRUPT", "MAX_RUN_RECORDS", "MIN_RECORD",
           "make_records", "untrack_records", "scratch_for", "take_scratch", "give_back", "run_fields"]
