"""The ``__transaction_state`` record codec (pylog.replication.txn_log) against Kafka's schemas.

The golden bytes below are written field by field from Kafka's
``TransactionLogKey.json`` (v0) and ``TransactionLogValue.json`` (v0, and v1:
flexible, compact arrays and strings, tagged fields 0/1/2), not produced by our
encoder; the partition choice is ``Utils.abs(String.hashCode) % n``.
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.errors import CorruptRecordError, InvalidRequestError
from pylog.replication.txn_log import (
    TransactionState,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_transactional_id,
)

H = bytes.fromhex

KEY = H("0000" "0008" + "copier-1".encode().hex())
VALUE = TxnLogValue(1000, 2, 60000, TransactionState.ONGOING, frozenset({("a", 0), ("a", 2), ("b", 1)}), 5, 4,
                    previous_producer_id=1000, client_transaction_version=2)
VALUE_V0 = H(
    "0000"                      # version 0
    "00000000000003e8"          # producer id 1000
    "0002"                      # producer epoch 2
    "0000ea60"                  # timeout 60000
    "01"                        # state Ongoing
    "00000002"                  # 2 topics
    "0001" "61" "00000002" "00000000" "00000002"  # "a": [0, 2]
    "0001" "62" "00000001" "00000001"             # "b": [1]
    "0000000000000005"          # last update
    "0000000000000004"          # start
)
VALUE_V1 = H(
    "0001" "00000000000003e8" "0002" "0000ea60" "01"
    "03"                                  # compact array: 2 topics + 1
    "02" "61" "03" "00000000" "00000002" "00"  # compact string "a", compact array [0, 2], no tags
    "02" "62" "02" "00000001" "00"
    "0000000000000005" "0000000000000004"
    "02"                                  # 2 tagged fields
    "00" "08" "00000000000003e8"          # tag 0 PreviousProducerId = 1000
    "02" "02" "0002"                      # tag 2 ClientTransactionVersion = 2
)
EMPTY_V1 = H("0001" "0000000000000007" "0000" "00000064" "00" "00" "0000000000000009" "ffffffffffffffff" "00")


def test_key_golden() -> None:
    assert encode_key("copier-1") == KEY
    assert decode_key(KEY) == "copier-1"


def test_value_v0_golden() -> None:
    assert encode_value(VALUE, 0) == VALUE_V0
    assert decode_value(VALUE_V0) == TxnLogValue(1000, 2, 60000, TransactionState.ONGOING, VALUE.partitions, 5, 4)


def test_value_v1_golden() -> None:
    assert encode_value(VALUE, 1) == VALUE_V1
    assert decode_value(VALUE_V1) == VALUE


def test_empty_state_writes_a_null_partition_list() -> None:
    v = TxnLogValue(7, 0, 100, TransactionState.EMPTY, frozenset(), 9, -1)
    assert encode_value(v, 1) == EMPTY_V1
    assert encode_value(v, 0)[17:21] == H("ffffffff")
    with pytest.raises(InvalidRequestError, match="Empty"):
        encode_value(TxnLogValue(7, 0, 100, TransactionState.EMPTY, frozenset({("a", 1)})))


def test_next_producer_id_tag_and_unknown_tags() -> None:
    v = TxnLogValue(1, 3, 10, TransactionState.PREPARE_COMMIT, frozenset({("t", 0)}), 1, 1, next_producer_id=99)
    enc = encode_value(v, 1)
    assert enc.endswith(H("01" "01" "08" "0000000000000063"))
    assert decode_value(enc) == v
    unknown = enc[:-11] + H("02" "01" "08" "0000000000000063" "05" "01" "ff")  # + tag 5, skipped
    assert decode_value(unknown) == v


def test_tombstone_and_unknown_key_version() -> None:
    assert decode_value(None) is None
    assert decode_key(H("0001" "0001" "61")) is None


@pytest.mark.parametrize("tid,n,expect", [
    ("polygenelubricants", 50, 0),  # hashCode == Integer.MIN_VALUE: Utils.abs gives 0
    ("hello", 50, 99162322 % 50),   # "hello".hashCode() == 99162322
    ("Aa", 7, 2112 % 7), ("BB", 7, 2112 % 7),
    ("\U0001f600", 50, abs((31 * 0xD83D + 0xDE00)) % 50),  # UTF-16 surrogate pair, as Java hashes it
])
def test_partition_for_matches_java(tid: str, n: int, expect: int) -> None:
    assert partition_for_transactional_id(tid, n) == expect


@pytest.mark.parametrize("data,what", [
    (b"", "version"),
    (H("0000") + H("00000000000003e8"), "producer_epoch"),
    (VALUE_V0[:-1], "transaction_start_timestamp_ms"),
    (VALUE_V0 + b"\x00", "trailing"),
    (H("0005") + VALUE_V0[2:], "unknown value version 5"),
    (VALUE_V0[:16] + H("09") + VALUE_V0[17:], "unknown transaction state id 9"),
    (VALUE_V0[:17] + H("fffffff0") + VALUE_V0[21:], "count"),
    (VALUE_V0[:21] + H("ffff") + VALUE_V0[23:], "topic is null"),
    (VALUE_V0[:21] + H("0001ff") + VALUE_V0[24:], "not UTF-8"),
    (VALUE_V0[:24] + H("7fffffff") + VALUE_V0[28:], "do not fit"),
    (VALUE_V1[:-15] + H("02" "02" "02" "0002" "02" "02" "0002"), "tagged field 2 after 2"),
    (VALUE_V1[:-15] + H("02" "02" "02" "0002" "00" "08" "0000000000000001"), "tagged field 0 after 2"),
    (VALUE_V1[:-15] + H("01" "02" "03" "000002"), "client_transaction_version has 3 bytes"),
    (VALUE_V1[:-15] + H("01" "00" "09" "00"), "tagged field 0 needs 9 bytes"),
    (VALUE_V1[:17] + H("ffffffffff"), "longer than 5 bytes"),
])
def test_damaged_values_raise_corrupt_record_naming_the_field(data: bytes, what: str) -> None:
    with pytest.raises(CorruptRecordError, match=what):
        decode_value(data)


def test_damaged_keys() -> None:
    for data in (b"", b"\x00", H("0000" "0005" "6162"), H("0000" "0001" "6162")):
        with pytest.raises(CorruptRecordError, match="transaction log key"):
            decode_key(data)


def test_encode_refuses_out_of_range_fields() -> None:
    with pytest.raises(InvalidRequestError, match="producer_epoch"):
        encode_value(TxnLogValue(1, 40000, 10, TransactionState.EMPTY))
    with pytest.raises(InvalidRequestError):
        encode_key("")
    with pytest.raises(InvalidRequestError):
        encode_value(VALUE, 2)


_tps = st.frozensets(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 2**31 - 1)), max_size=6)


@given(pid=st.integers(-1, 2**63 - 1), epoch=st.integers(-1, 32767), timeout=st.integers(-(2**31), 2**31 - 1),
       state=st.sampled_from(list(TransactionState)), tps=_tps, ts=st.integers(-1, 2**62),
       prev=st.integers(-1, 2**62), nxt=st.integers(-1, 2**62), ctv=st.integers(0, 2), version=st.sampled_from([0, 1]))
def test_round_trip(pid: int, epoch: int, timeout: int, state: TransactionState, tps: frozenset, ts: int,
                    prev: int, nxt: int, ctv: int, version: int) -> None:
    if state == TransactionState.EMPTY:
        tps = frozenset()
    v = TxnLogValue(pid, epoch, timeout, state, tps, ts, ts // 2, prev, nxt, ctv)
    got = decode_value(encode_value(v, version))
    if version == 0:  # v0 has no tagged fields
        v = TxnLogValue(pid, epoch, timeout, state, tps, ts, ts // 2)
    assert got == v


@given(st.binary(max_size=80))
def test_arbitrary_bytes_decode_or_raise_corrupt_record(data: bytes) -> None:
    try:
        decode_value(data)
        decode_key(data)
    except CorruptRecordError:
        pass


def test_unknown_tagged_fields_in_value_and_partitions_are_skipped() -> None:
    """As Kafka's TransactionLogTest: tags 100 ("foo") and 101 (4000) in the value and in a partitions element."""
    unknown = H("02" "64" "04" "03666f6f" "65" "04" "00000fa0")  # 2 tags: 100 -> compact "foo", 101 -> int32 4000
    data = H("0001" "00000000000003e8" "0002" "0000ea60" "01" "02" "02" "61" "02" "00000000") + unknown + \
        H("0000000000000005" "0000000000000004") + unknown
    assert decode_value(data) == TxnLogValue(1000, 2, 60000, TransactionState.ONGOING, frozenset({("a", 0)}), 5, 4)
