"""``encode_values_batch`` (the producer's per-batch encoder for plain values) against the
pure-Python oracle ``py_encode_batch`` and the general ``encode_batch``: byte for byte."""
from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from pylog.errors import InvalidRecordError
from pylog.record import Record, encode_batch, encode_values_batch, py_encode_batch

values = st.lists(st.binary(max_size=300), min_size=1, max_size=60)
ids = st.integers(min_value=-1, max_value=2**63 - 1)
epochs = st.integers(min_value=-1, max_value=2**15 - 1)
seqs = st.integers(min_value=-1, max_value=2**31 - 1)
times = st.integers(min_value=0, max_value=2**62)


@given(values, times, ids, epochs, seqs)
def test_same_bytes_as_the_oracle_and_encode_batch(vals, now, pid, epoch, seq) -> None:
    got = encode_values_batch(vals, now, pid, epoch, seq)
    assert isinstance(got, bytearray)
    oracle = py_encode_batch([Record(value=v, timestamp=now) for v in vals], producer_id=pid,
                             producer_epoch=epoch, base_sequence=seq)
    assert bytes(got) == oracle
    assert got == encode_batch(vals, now_ms=now, producer_id=pid, producer_epoch=epoch, base_sequence=seq, plain=True)


@given(st.integers(min_value=1, max_value=40))
def test_record_counts_reuse_the_length_packer(n: int) -> None:
    # the packer cache is keyed by the count: batches of different sizes must not share one
    a = encode_values_batch([b"x"] * n, 5)
    b = encode_values_batch([b"yy"] * (n + 1), 5)
    assert bytes(a) == py_encode_batch([Record(value=b"x", timestamp=5)] * n)
    assert bytes(b) == py_encode_batch([Record(value=b"yy", timestamp=5)] * (n + 1))


def test_empty_batch_is_refused() -> None:
    with pytest.raises(InvalidRecordError):
        encode_values_batch([], 0)


@given(vals=values, now=times, pid=ids, epoch=epochs, seq=seqs, attrs=st.sampled_from([0, 0x10]),
       slack=st.integers(min_value=-40, max_value=40))
def test_c_entry_point_equals_the_general_encoder(vals, now, pid, epoch, seq, attrs, slack) -> None:
    # plg_batch_encode_values against plg_batch_encode with the same columns: same return code
    # for every output capacity around the exact size (EOVERFLOW below it), same bytes when OK
    from pylog._native import ffi, lib

    n = len(vals)
    joined = b"".join(vals)
    lens = ffi.new("int32_t[]", [len(v) for v in vals])
    size = ffi.new("uint64_t *")
    cols = ffi.new("plg_record_columns_t *", {"count": n, "timestamps": ffi.NULL, "keys": ffi.from_buffer(joined),
                                              "key_lens": ffi.NULL, "values": ffi.from_buffer(joined),
                                              "value_lens": lens, "header_counts": ffi.NULL,
                                              "header_keys": ffi.from_buffer(joined), "header_key_lens": ffi.NULL,
                                              "header_values": ffi.from_buffer(joined),
                                              "header_value_lens": ffi.NULL})
    assert lib.plg_batch_size(cols, now, size) == lib.PLG_OK
    cap = max(0, size[0] + slack)
    hdr = ffi.new("plg_batch_header_t *", {"base_offset": 0, "partition_leader_epoch": -1, "attributes": attrs,
                                            "base_timestamp": now, "max_timestamp": now, "producer_id": pid,
                                            "producer_epoch": epoch, "base_sequence": seq})
    out_a, out_b = bytearray(cap + 1), bytearray(cap + 1)
    used_a, used_b = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    rc_a = lib.plg_batch_encode(hdr, cols, ffi.from_buffer(out_a), cap, used_a)
    rc_b = lib.plg_batch_encode_values(joined, lens, n, now, pid, epoch, seq, attrs, ffi.from_buffer(out_b), cap, used_b)
    assert rc_b == rc_a
    assert rc_a == (lib.PLG_OK if cap >= size[0] else lib.PLG_EOVERFLOW)
    if rc_a == lib.PLG_OK:
        assert used_a[0] == used_b[0] == size[0]
        assert out_a[: used_a[0]] == out_b[: used_b[0]]
    assert out_b[cap] == 0  # nothing written past the capacity


# ---- encode_values_at: Log.append's plain batch, straight from the list's items (sendpath.c)
offsets = st.integers(min_value=0, max_value=2**63 - 1)
leader_epochs = st.integers(min_value=-1, max_value=2**31 - 1)


@given(values, times, offsets, leader_epochs)
def test_encode_values_at_same_bytes_as_the_oracle(vals, now, base, epoch) -> None:
    from pylog.record.codec import encode_values_at

    got = encode_values_at(vals, now, base, epoch)
    assert isinstance(got, bytearray)
    assert bytes(got) == py_encode_batch([Record(value=v, timestamp=now) for v in vals], base_offset=base,
                                         partition_leader_epoch=epoch)
    assert got == encode_batch(vals, now_ms=now, base_offset=base, partition_leader_epoch=epoch)


@given(values, st.integers(min_value=0, max_value=59), st.sampled_from(
    [bytearray(b"x"), memoryview(b"y"), None, "s", 7, Record(value=b"r")]))
def test_encode_values_at_declines_anything_but_a_list_of_bytes(vals, at, odd) -> None:
    # None (nothing encoded) so the general encoder handles or refuses it precisely
    from pylog.record.codec import encode_values_at

    mixed = list(vals)
    mixed.insert(min(at, len(mixed)), odd)
    assert encode_values_at(mixed, 1, 0, -1) is None
    assert encode_values_at(tuple(vals), 1, 0, -1) is None
    assert encode_values_at([], 1, 0, -1) is None


@given(values)
def test_encode_values_at_declines_fields_out_of_range(vals) -> None:
    from pylog.record.codec import encode_values_at

    assert encode_values_at(vals, 1, 0, 2**31) is None  # leader epoch over int32
    assert encode_values_at(vals, 1, -1, -1) is None  # negative base offset
    assert encode_values_at(vals, 2**63, 0, -1) is None  # timestamp over int64


def test_encode_values_at_without_the_extension_gives_the_same_bytes(monkeypatch) -> None:
    # the fallback (no sendpath build): _encode_values + a re-stamp of offset and epoch
    from pylog._native import batch as _c
    from pylog.record.codec import encode_values_at

    vals = [bytes([i % 256]) * (i * 7 % 200) for i in range(300)]
    with_ext = encode_values_at(vals, 99, 12345, 4)
    monkeypatch.setattr(_c, "_encode_value_list", None)
    assert encode_values_at(vals, 99, 12345, 4) == with_ext == encode_batch(vals, now_ms=99, base_offset=12345,
                                                                          partition_leader_epoch=4)
    assert encode_values_at(vals + [bytearray()], 99, 0, -1) is None
    assert encode_values_at(vals, 99, 0, 2**31) is None
