"""``encode_values_batch`` (the producer's per-batch encoder for plain values) against the
pure-Python oracle ``py_encode_batch`` and the general ``encode_batch``: byte for byte."""
from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from pylog.errors import InvalidRecordError
from pylog.storage.record import Record, encode_batch, encode_values_batch, py_encode_batch

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
