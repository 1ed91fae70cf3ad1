"""Property tests: the consumer's run decoder (``FetchDecoder``, C ``plg_decode_fetch_run``).

* Against a pure-Python model (``py_decode_batch`` and the consumer's rules):
  for any mix of plain batches, keyed and keyless, tombstones, headers,
  compressed, control, log-append-time, leader-epoch changes, offset gaps,
  and any fetch position and high watermark, the records handed out and the
  next fetch offset are exactly the model's.
* Against the general per-batch decoder on damaged bytes (CRC resealed, so
  the damage reaches the record decoder): the same records before the damage,
  then the same CorruptRecordError - never a crash, never different data.
* A torn tail yields the records of the complete batches only.

The sanitizer pass of ``./dev test`` runs this file against the ASan+UBSan
build of the C core.
"""
from __future__ import annotations

import random
import struct
from typing import Any, List, Optional, Sequence, Tuple

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from pylog._native import ffi, lib
from pylog.client.consumer import ConsumerRecord
from pylog.client.fetch_decoder import FetchDecoder, RecordRun, batch_records
from pylog.errors import CorruptRecordError
from pylog.record import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Record,
    encode_batch,
    iter_batches,
    py_crc32c,
    py_decode_batch,
    py_record_bytes,
)

TOPIC, PART = "t", 3
ATTR_LOG_APPEND_TIME = 0x08
ATTR_CONTROL = 0x20

# ---------------------------------------------------------------------------
# building batches (with offset gaps, as the log cleaner leaves them)
# ---------------------------------------------------------------------------


def build_batch(records: Sequence[Record], deltas: Sequence[int], *, base_offset: int, epoch: int,
                attributes: int = 0, max_ts: Optional[int] = None) -> bytes:
    """An uncompressed v2 batch whose i-th record has offset delta ``deltas[i]``."""
    base_ts = records[0].timestamp
    body = b"".join(py_record_bytes(r, r.timestamp - base_ts, d) for r, d in zip(records, deltas))
    if max_ts is None:
        max_ts = max(r.timestamp for r in records)
    tail = struct.pack(">hiqqqhii", attributes, deltas[-1], base_ts, max_ts, -1, -1, -1, len(records)) + body
    return struct.pack(">qiibI", base_offset, len(tail) + 9, epoch, 2, py_crc32c(tail)) + tail


KINDS = ["plain_keyless", "plain_keyed", "mixed_keys", "tombstone", "headers", "gzip", "control", "log_append_time"]


@st.composite
def fetch_payloads(draw: Any) -> Tuple[bytes, int, int]:
    """(bytes of consecutive batches, fetch position, high watermark)."""
    out = bytearray()
    offset = draw(st.integers(0, 50))
    first = offset
    ts = 1_700_000_000_000
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(KINDS))
        epoch = draw(st.sampled_from([0, 0, 0, 1, 2]))
        n = draw(st.integers(1, 12))
        gaps = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)) if draw(st.booleans()) else [0] * n
        deltas, d = [], 0
        for g in gaps:
            deltas.append(d)
            d += 1 + g
        recs = []
        for i in range(n):
            value: Optional[bytes] = draw(st.binary(max_size=30))
            key: Optional[bytes] = None
            heads: tuple = ()
            if kind == "plain_keyed":
                key = draw(st.binary(max_size=8))
            elif kind == "mixed_keys":
                key = draw(st.none() | st.binary(max_size=8))
            elif kind == "tombstone" and i % 2 == 0:
                value = None
            elif kind == "headers":
                heads = (("h", draw(st.none() | st.binary(max_size=5))),)
            ts += draw(st.integers(-5, 5))
            recs.append(Record(value=value, key=key, headers=heads, timestamp=ts))
        if kind == "gzip":
            data = bytes(encode_batch(recs, now_ms=ts, base_offset=offset, partition_leader_epoch=epoch,
                                      compression="gzip"))
            last = offset + n - 1
        else:
            attrs = {"control": ATTR_CONTROL, "log_append_time": ATTR_LOG_APPEND_TIME}.get(kind, 0)
            data = build_batch(recs, deltas, base_offset=offset, epoch=epoch, attributes=attrs,
                               max_ts=ts + 1000 if kind == "log_append_time" else None)
            last = offset + deltas[-1]
        out += data
        offset = last + 1 + draw(st.integers(0, 3))
    pos = draw(st.integers(first, offset + 1))
    hw = draw(st.integers(pos, offset + 2))
    return bytes(out), pos, hw


# ---------------------------------------------------------------------------
# the model, and the consumer's way of running the decoder
# ---------------------------------------------------------------------------


def model(data: bytes, pos: int, hw: int, above: Optional[List[int]] = None) -> Tuple[List[ConsumerRecord], int]:
    """What the consumer must hand out, from the pure-Python decoder and Kafka's rules (and, in
    ``above``, the offsets at or above the HW it must report instead)."""
    out: List[ConsumerRecord] = []
    nxt = pos
    at = 0
    while at + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, at + 8)[0]
        raw = data[at:at + size]
        at += size
        attrs = struct.unpack_from(">h", raw, 21)[0]
        base, epoch = struct.unpack_from(">qi", raw, 0)[0], struct.unpack_from(">i", raw, 12)[0]
        last = base + struct.unpack_from(">i", raw, 23)[0]
        if last < pos:
            continue
        if attrs & ATTR_CONTROL:
            nxt = max(nxt, last + 1)
            continue
        if attrs & 0x07:
            recs = [r for r in next(iter_batches(raw)).records()]
            header = {"max_timestamp": struct.unpack_from(">q", raw, 35)[0]}
        else:
            header, recs = py_decode_batch(raw)
        tst = LOG_APPEND_TIME if attrs & ATTR_LOG_APPEND_TIME else CREATE_TIME
        taken = [ConsumerRecord(TOPIC, PART, r.offset, r.key, r.value,
                                header["max_timestamp"] if tst == LOG_APPEND_TIME else r.timestamp,
                                tuple(r.headers), tst, epoch)
                 for r in recs if pos <= r.offset < hw]
        if above is not None:
            above.extend(r.offset for r in recs if r.offset >= hw)
        out.extend(taken)
        if taken:
            nxt = max(nxt, taken[-1].offset + 1)
        if last < hw:
            nxt = max(nxt, last + 1)
    return out, nxt


def consume(decoder: FetchDecoder, data: bytes, pos: int, hw: int,
            seen: Optional[List[ConsumerRecord]] = None) -> Tuple[List[ConsumerRecord], int]:
    """Run the decoder as Consumer._on_fetch does; the records in order, and the next fetch offset."""
    out: List[ConsumerRecord] = [] if seen is None else seen
    nxt = decoder.decode(data, pos, hw, TOPIC, PART, out.extend)
    return out, nxt


def general(data: bytes, pos: int, hw: int, seen: List[ConsumerRecord]) -> None:
    """The per-batch decoder alone (what the consumer did before the run decoder)."""
    for batch in iter_batches(data):
        last = batch.last_offset
        if last < pos or batch.is_control:
            continue
        seen.extend(r for r in batch_records(batch, TOPIC, PART, ConsumerRecord) if pos <= r.offset < hw)


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------


@given(fetch_payloads())
def test_run_decoder_hands_out_exactly_the_models_records(payload: Tuple[bytes, int, int]) -> None:
    data, pos, hw = payload
    got: List[ConsumerRecord] = []
    reported: List[int] = []
    nxt = FetchDecoder(ConsumerRecord).decode(data, pos, hw, TOPIC, PART, got.extend, reported.append)
    above: List[int] = []
    want, want_nxt = model(data, pos, hw, above)
    assert got == want
    assert reported == above  # records at or above the HW are reported, never handed out
    assert [type(r) for r in got] == [ConsumerRecord] * len(got)
    assert nxt == want_nxt


def test_plain_batches_take_the_fast_path_in_one_run() -> None:
    """Keyless plain batches of one epoch come back from one C call, not batch by batch."""
    data = b"".join(bytes(encode_batch([b"v%d" % i for i in range(10)], now_ms=5, base_offset=b * 10,
                                       partition_leader_epoch=4)) for b in range(20))
    chunks: List[Any] = []
    nxt = FetchDecoder(ConsumerRecord).decode(data, 0, 10**9, TOPIC, PART, chunks.append)
    assert len(chunks) == 1 and isinstance(chunks[0], RecordRun) and len(chunks[0]) == 200  # no general path
    assert list(chunks[0])[57] == ConsumerRecord(TOPIC, PART, 57, None, b"v7", 5, (), CREATE_TIME, 4)
    assert chunks[0].take(55, 58) == list(chunks[0])[55:58]
    assert chunks[0].offset_at(199) == 199
    assert nxt == 200


def test_a_run_longer_than_the_scratch_continues() -> None:
    """More records than one C call's scratch: the run is split, nothing lost or repeated."""
    data = b"".join(bytes(encode_batch([b"x"] * 1000, now_ms=1, base_offset=b * 1000)) for b in range(40))
    got, nxt = consume(FetchDecoder(ConsumerRecord), data, 0, 10**9)
    assert [r.offset for r in got] == list(range(40_000))
    assert nxt == 40_000


@settings(max_examples=300)
@given(fetch_payloads(), st.integers(0, 2**32 - 1))
def test_damaged_bytes_give_the_general_decoders_records_then_its_error(payload: Tuple[bytes, int, int],
                                                                       seed: int) -> None:
    data, pos, hw = payload
    rng = random.Random(seed)
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(damaged))
        damaged[i] = rng.choice([0, 0xFF, 0x80, 0x7F, rng.randrange(256)])
    reseal(damaged)
    damaged_bytes = bytes(damaged)
    want: List[ConsumerRecord] = []
    want_error: Optional[str] = None
    try:
        general(damaged_bytes, pos, hw, want)
    except CorruptRecordError as exc:
        want_error = type(exc).__name__
    got: List[ConsumerRecord] = []
    got_error: Optional[str] = None
    try:
        consume(FetchDecoder(ConsumerRecord), damaged_bytes, pos, hw, got)
    except CorruptRecordError as exc:
        got_error = type(exc).__name__
    assert got_error == want_error
    assert got == want


@pytest.mark.parametrize("keep_record_bytes", [False, True])
def test_an_empty_batch_between_plain_ones_is_skipped_like_the_general_decoder(keep_record_bytes: bool) -> None:
    """A batch whose record count is 0 (the cleaner keeps such batches for producer state) holds
    nothing; what follows its header is never read (Kafka's record iterator reads ``count``
    records). The run decoder used to call the record bytes left behind a zeroed count corrupt,
    where the general decoder skipped the batch: found by the damaged-bytes property above."""
    first = bytes(encode_batch([b"a", b"b"], now_ms=5, base_offset=0))
    middle = bytearray(encode_batch([b"c", b"d", b"e"], now_ms=5, base_offset=2))
    struct.pack_into(">i", middle, 57, 0)  # recordsCount = 0, lastOffsetDelta still 2
    if not keep_record_bytes:
        del middle[61:]
        struct.pack_into(">i", middle, 8, len(middle) - 12)
    reseal(middle)
    last = bytes(encode_batch([b"f"], now_ms=5, base_offset=5))
    data = first + bytes(middle) + last
    got, nxt = consume(FetchDecoder(ConsumerRecord), data, 0, 100)
    want: List[ConsumerRecord] = []
    general(data, 0, 100, want)
    assert got == want
    assert [(r.offset, r.value) for r in got] == [(0, b"a"), (1, b"b"), (5, b"f")]
    assert nxt == 6


def test_records_past_a_batchs_last_offset_never_reach_the_application() -> None:
    """A CRC-valid batch that says its last offset is 12 but whose records carry offsets up to 20:
    with the HW at 13 the consumer hands out offset 12 only and reports the rest as at or above
    the HW. The run decoder checked the HW against the batch's last offset alone and handed out
    13-20 (found by the damaged-bytes property above), and so did the general path."""
    data = bytearray(encode_batch([b"v%d" % i for i in range(9)], now_ms=5, base_offset=12))
    struct.pack_into(">i", data, 23, 0)  # lastOffsetDelta = 0: "offsets 12..12"
    reseal(data)
    for decoder_input in (bytes(data), bytes(encode_batch([b"w"], now_ms=5, base_offset=11)) + bytes(data)):
        got: List[ConsumerRecord] = []
        above: List[int] = []
        nxt = FetchDecoder(ConsumerRecord).decode(decoder_input, 12, 13, TOPIC, PART, got.extend, above.append)
        assert [r.offset for r in got] == [12]
        assert above == list(range(13, 21))
        assert nxt == 13


@given(fetch_payloads(), st.integers(1, 200))
def test_a_torn_tail_yields_the_complete_batches_only(payload: Tuple[bytes, int, int], cut: int) -> None:
    data, pos, hw = payload
    torn = data[:max(0, len(data) - cut)]
    got, _ = consume(FetchDecoder(ConsumerRecord), torn, pos, hw)
    want: List[ConsumerRecord] = []
    general(torn, pos, hw, want)
    assert got == want


def test_corrupt_crc_raises_with_the_position_in_the_response() -> None:
    first = bytes(encode_batch([b"a", b"b"], now_ms=1, base_offset=0))
    second = bytearray(encode_batch([b"c"], now_ms=1, base_offset=2))
    second[-1] ^= 0x01  # a value byte: the CRC no longer matches
    chunks: List[Any] = []
    decoder = FetchDecoder(ConsumerRecord)
    with pytest.raises(CorruptRecordError) as info:
        decoder.decode(first + bytes(second), 0, 100, TOPIC, PART, chunks.append)
    assert len(chunks) == 1 and isinstance(chunks[0], RecordRun)  # the fast path, up to the damage
    assert [r.value for r in chunks[0]] == [b"a", b"b"]  # what came before the damage was handed out
    assert info.value.position == len(first)
    assert decoder.next_offset == 2  # where the consumer stops (and names in its error)


def reseal(data: bytearray) -> None:
    """Recompute the CRC of every v2 batch whose framing still holds, so damage reaches the record decoder."""
    pos = 0
    while pos + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        size = 12 + length
        if length < 49 or pos + size > len(data) or data[pos + 16] != 2:
            return
        buf = ffi.from_buffer(data)
        lib.plg_batch_seal(buf + pos, size)
        ffi.release(buf)
        pos += size


@given(fetch_payloads(), st.data())
def test_a_runs_slices_are_the_slices_of_its_records(payload: Tuple[bytes, int, int], data: Any) -> None:
    """What poll() takes from a run (any i..j) is exactly that slice of the run's records."""
    raw, pos, hw = payload
    chunks: List[Any] = []
    FetchDecoder(ConsumerRecord).decode(raw, pos, hw, TOPIC, PART, chunks.append)
    for run in [c for c in chunks if isinstance(c, RecordRun)]:
        whole = list(run)
        assert len(whole) == len(run)
        i = data.draw(st.integers(0, len(run)))
        j = data.draw(st.integers(i, len(run)))
        assert run.take(i, j) == whole[i:j]
        if j > i:
            assert run.offset_at(j - 1) == whole[j - 1].offset
