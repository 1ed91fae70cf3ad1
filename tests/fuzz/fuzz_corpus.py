"""Valid files built by pylog's own writer, and the mutations the fuzz tests apply to them.

Shared by tests/fuzz/ and the atheris harness (fuzz/). Everything here is
deterministic: a corpus is a function of its arguments.
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zlib
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import pylog
from pylog import errors
from pylog._native import ffi, lib
from pylog.record import encode_batch, py_encode_legacy, scan

SEG = "00000000000000000000.log"
CLOCK = 5_000_000
#: Readers may raise these and only these (plus, for bad arguments, ValueError subclasses of them).
ALLOWED = (errors.PylogError,)


def make_record(n: int) -> pylog.Record:
    """The record written at offset ``n``: keys, null values and headers vary with n."""
    return pylog.Record(
        value=None if n % 11 == 10 else b"v%04d-" % n + bytes([n % 251]) * (n % 13),
        key=b"k%d" % n if n % 2 else None,
        headers=[("h%d" % (n % 3), b"%d" % n), ("n", None)] if n % 4 == 0 else [],
        timestamp=CLOCK - 1_000 + n,
    )


class Corpus(NamedTuple):
    """One valid partition: its .log bytes, batch layout and the records by offset."""

    log: bytes
    index: bytes
    timeindex: bytes
    batches: List[Tuple[int, int, int, int]]  # (position, size, base_offset, last_offset)
    records: Dict[int, pylog.Record]


def build_log(codecs: Sequence[Optional[str]] = (None, "gzip", None, "snappy", "lz4", None, "zstd", None),
              per_batch: int = 3) -> Corpus:
    """A one-segment partition written by ``Log.append``: one batch per codec in ``codecs``."""
    d = tempfile.mkdtemp(prefix="pylog-fuzz-corpus-")
    try:
        path = os.path.join(d, "fz-0")
        records: Dict[int, pylog.Record] = {}
        with pylog.Log.open(path, index_interval_bytes=64, clock_ms=lambda: CLOCK, retention_ms=-1) as log:
            for codec in codecs:
                start = log.log_end_offset
                recs = [make_record(start + i) for i in range(per_batch)]
                log.append(recs, compression=codec)
                for i, r in enumerate(recs):
                    records[start + i] = r
        read = lambda name: open(os.path.join(path, name), "rb").read()  # noqa: E731
        data = read(SEG)
        return Corpus(data, read(SEG[:-4] + ".index"), read(SEG[:-4] + ".timeindex"), layout(data), records)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def layout(data: bytes) -> List[Tuple[int, int, int, int]]:
    res = scan(data)
    return [(b.position, b.size, b.base_offset, b.last_offset) for b in res.batches]


def legacy_message_set(magic: int, codec: int = 0, count: int = 4, first_offset: int = 0) -> bytes:
    """``count`` legacy messages (magic 0 or 1); with ``codec`` they sit inside one compressed wrapper."""
    from pylog.record import compression

    inner = b"".join(
        py_encode_legacy(i if codec else first_offset + i, b"legacy-%d" % i, b"k%d" % i if i % 2 else None,
                         magic=magic, timestamp=1_000 + i)
        for i in range(count)
    )
    if not codec:
        return inner
    wrapped = compression.compress(codec, inner)
    return py_encode_legacy(first_offset + count - 1, wrapped, None, magic=magic, timestamp=2_000, attributes=codec)


def v2_batch(records: Sequence[pylog.Record], base_offset: int, compression: Optional[str] = None) -> bytes:
    return bytes(encode_batch(list(records), now_ms=CLOCK, base_offset=base_offset, compression=compression))


def reseal(data: bytearray) -> None:
    """Recompute the CRC of every v2 batch whose header still frames it, so
    mutations reach the record decoder instead of stopping at the CRC check."""
    pos = 0
    while pos + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        size = 12 + length
        if length < 49 or pos + size > len(data):
            return
        if data[pos + 16] == 2:
            buf = ffi.from_buffer(data)
            lib.plg_batch_seal(buf + pos, size)
        elif data[pos + 16] in (0, 1):
            body = bytes(data[pos + 16 : pos + size])
            struct.pack_into(">I", data, pos + 12, zlib.crc32(body))
        else:
            return
        pos += size


# ------------------------------------------------------------------ mutations

INTERESTING32 = [0, 1, -1, 7, 48, 49, 61, 127, 128, 255, 256, 4096, 65535, 2**31 - 1, -(2**31), 2**30]


def mutations(st: "object") -> "object":
    """A hypothesis strategy of mutation lists (applied by :func:`apply`)."""
    from hypothesis import strategies as s

    pos = s.integers(0, 1 << 20)
    op = s.one_of(
        s.tuples(s.just("flip"), pos, s.integers(1, 255)),
        s.tuples(s.just("set"), pos, s.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0x0F])),
        s.tuples(s.just("truncate"), pos),
        s.tuples(s.just("splice"), pos, pos, s.integers(1, 400)),
        s.tuples(s.just("insert"), pos, s.binary(min_size=1, max_size=64)),
        s.tuples(s.just("delete"), pos, s.integers(1, 64)),
        # a header field of batch i (taken modulo the batch count): offset in the header, width, value
        s.tuples(s.just("field"), s.integers(0, 63),
                 s.sampled_from([(0, 8), (8, 4), (12, 4), (16, 1), (21, 2), (23, 4), (27, 8), (35, 8), (57, 4)]),
                 s.one_of(s.sampled_from(INTERESTING32), s.integers(-(2**63), 2**63 - 1))),
    )
    return s.tuples(s.lists(op, min_size=1, max_size=4), s.booleans())


def apply(data: bytes, ops: Sequence[tuple], batches: Sequence[Tuple[int, int, int, int]],
          do_reseal: bool) -> bytes:
    """Apply ``ops`` to ``data`` (positions taken modulo the current length)."""
    out = bytearray(data)
    for o in ops:
        n = len(out)
        kind = o[0]
        if kind == "field":
            if not batches:
                continue
            bpos = batches[o[1] % len(batches)][0]
            at, width = o[2]
            value = o[3]
            if bpos + at + width > n:
                continue
            mask = (1 << (8 * width)) - 1
            out[bpos + at : bpos + at + width] = (value & mask).to_bytes(width, "big")
        elif n == 0:
            if kind == "insert":
                out += o[2]
        elif kind == "flip":
            out[o[1] % n] ^= o[2]
        elif kind == "set":
            out[o[1] % n] = o[2]
        elif kind == "truncate":
            del out[o[1] % n :]
        elif kind == "splice":
            src, dst, ln = o[1] % n, o[2] % n, o[3]
            out[dst : dst + ln] = out[src : src + ln]
        elif kind == "insert":
            p = o[1] % (n + 1)
            out[p:p] = o[2]
        elif kind == "delete":
            p = o[1] % n
            del out[p : p + o[2]]
    if do_reseal:
        reseal(out)
    return bytes(out)


def first_difference(a: bytes, b: bytes) -> int:
    """The first byte position where ``a`` and ``b`` differ (len of the shorter when one is a prefix)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n if len(a) != len(b) else len(a)


def drain(call: Callable[[], object]) -> object:
    """Run ``call``; a pylog error is an allowed outcome (returned), anything else propagates."""
    try:
        out = call()
        if isinstance(out, Iterator):
            out = list(out)
        return out
    except ALLOWED as exc:
        return exc


def scratch_dir() -> str:
    """A scratch directory, on tmpfs when there is one (hundreds of opens per test)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix="pylog-fuzz-", dir=base)
