"""Fuzzing the batch layer: mutated and random bytes fed to scan, iter_batches and the record decoders.

Inputs are valid v2 batches (every codec, keys, null values, headers) and
legacy message sets (magic 0/1, plain and inside compressed wrappers) written
by pylog's own encoders, then mutated (bit flips, byte sets, truncation,
splices, inserts, deletes, header-field edits) and - half the time - given a
fresh CRC so the damage reaches the record decoder instead of stopping at the
checksum. Whatever the bytes, a reader returns or raises a pylog.errors
exception: never another exception, never a crash (the sanitizer pass of
``./dev test`` runs these against an ASan+UBSan build of the C core).
"""
from __future__ import annotations

from typing import List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_corpus as fc
from pylog.record import RecordBatch, iter_batches, scan

CORPUS = fc.build_log()
LEGACY = {(m, c): fc.legacy_message_set(m, c) for m in (0, 1) for c in (0, 1, 2, 3, 4)}
# A segment mixing legacy message sets with v2 batches (what an upgraded Kafka log holds).
MIXED = LEGACY[(0, 0)] + fc.legacy_message_set(1, 1, first_offset=4) + fc.v2_batch(
    [fc.make_record(i) for i in range(8, 12)], 8, "zstd")

SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]


def read_everything(data: bytes) -> List[object]:
    """Every reader of a buffer of batches; returns what they produced (or the pylog error)."""
    out: List[object] = []
    res = scan(data)
    out.append((res.status, res.valid_bytes, len(res.batches)))
    assert res.valid_bytes <= len(data)
    assert sum(b.size for b in res.batches) == res.valid_bytes
    for info in res.batches:
        assert info.position + info.size <= len(data)
        batch = RecordBatch(info, memoryview(data)[info.position : info.position + info.size], "fuzz.log")
        out.append(fc.drain(batch.records))
        out.append(fc.drain(batch.values))
        cols = fc.drain(batch.value_columns)
        if not isinstance(cols, Exception):
            for i in range(len(cols)):  # type: ignore[arg-type]
                v = cols.value(i)  # type: ignore[union-attr]
                assert v is None or len(v) >= 0
    out.append(fc.drain(lambda: [list(b.records()) for b in iter_batches(data, path="fuzz.log")]))
    out.append(fc.drain(lambda: list(iter_batches(data, verify_crc=False))))
    return out


@settings(suppress_health_check=SUPPRESS)
@given(fc.mutations(st))
@pytest.mark.timeout(300)
def test_mutated_v2_batches(mut) -> None:
    ops, do_reseal = mut
    read_everything(fc.apply(CORPUS.log, ops, CORPUS.batches, do_reseal))


@settings(suppress_health_check=SUPPRESS)
@given(st.sampled_from(sorted(LEGACY) + [("mixed", 0)]), fc.mutations(st))
@pytest.mark.timeout(300)
def test_mutated_legacy_message_sets(which, mut) -> None:
    data = MIXED if which[0] == "mixed" else LEGACY[which]
    ops, do_reseal = mut
    read_everything(fc.apply(data, ops, fc.layout(data), do_reseal))


@settings(suppress_health_check=SUPPRESS)
@given(st.binary(max_size=2000))
@pytest.mark.timeout(300)
def test_random_bytes(data: bytes) -> None:
    read_everything(data)


@settings(suppress_health_check=SUPPRESS)
@given(st.binary(min_size=0, max_size=600), st.integers(0, 2**31 - 1), st.integers(0, 7), st.booleans())
@pytest.mark.timeout(300)
def test_random_records_section_behind_a_valid_header(body: bytes, count: int, codec: int, legacy: bool) -> None:
    """A well-framed, CRC-valid batch (or legacy wrapper) around arbitrary records bytes:
    the record decoders and the decompressors see the junk directly."""
    import struct
    import zlib

    if legacy:
        magic = count % 2
        payload = struct.pack(">bb", magic, codec) + (struct.pack(">q", 0) if magic else b"")
        payload += struct.pack(">i", -1) + struct.pack(">i", len(body)) + body
        data = struct.pack(">qiI", count % 1000, len(payload) + 4, zlib.crc32(payload)) + payload
    else:
        header = bytearray(fc.v2_batch([fc.make_record(1)], 0)[:61])
        data_b = header + body
        struct.pack_into(">i", data_b, 8, len(data_b) - 12)
        struct.pack_into(">h", data_b, 21, codec)
        struct.pack_into(">i", data_b, 57, count)
        struct.pack_into(">i", data_b, 23, count % 7)
        fc.reseal(data_b)
        data = bytes(data_b)
    read_everything(data)


def test_corpus_reads_back_exactly() -> None:
    """The unmutated corpus decodes to exactly what was written (so the fuzzing starts from valid input)."""
    got = {r.offset: r for b in iter_batches(CORPUS.log) for r in b.records()}
    assert sorted(got) == sorted(CORPUS.records)
    for off, want in CORPUS.records.items():
        r = got[off]
        assert (r.value, r.key, r.timestamp) == (want.value, want.key, want.timestamp)
        assert [tuple(h) for h in r.headers] == [tuple(h) for h in want.headers]
    assert {b.compression for b in iter_batches(CORPUS.log)} == {0, 1, 2, 3, 4}
    for (magic, codec), data in LEGACY.items():
        got_legacy = [(r.offset, r.value) for b in iter_batches(data) for r in b.records()]
        assert got_legacy == [(i, b"legacy-%d" % i) for i in range(4)], (magic, codec)
    assert [r.offset for b in iter_batches(MIXED) for r in b.records()] == list(range(12))


GC_CYCLE = r"""
import gc, struct, sys
sys.path.insert(0, sys.argv[1])
import fuzz_corpus as fc
from pylog.errors import CorruptRecordError
from pylog.record import iter_batches

good = bytearray(fc.v2_batch([fc.make_record(i) for i in range(5)], 0))
good[61] ^= 0x40  # first record's length varint: malformed records, then a fresh CRC
fc.reseal(good)
kept = []
for i in range(300):
    data = bytearray(good)
    for batch in iter_batches(memoryview(data)):
        try:
            batch.value_columns()
        except CorruptRecordError as exc:
            cycle = {"exc": exc}
            cycle["self"] = cycle  # the exception (and its frames) now only die in the GC
    del data
    if i % 50 == 0:
        gc.collect()
        kept.append(i)
gc.collect()
print("ok", len(kept))
"""


def test_decode_error_in_a_reference_cycle_does_not_crash_the_gc() -> None:
    """A CorruptRecordError kept in a reference cycle: its traceback's frames once held a
    cffi export of a memoryview, and the GC clearing that memoryview first crashed CPython
    (found by test_mutated_v2_batches; fixed by releasing the export before raising)."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", GC_CYCLE, here], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ok", "6"]
