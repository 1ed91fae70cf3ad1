"""__consumer_offsets: partition-for-group vectors and Kafka's key/value byte layouts."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.errors import CorruptRecordError
from pylog.replication import offsets_topic as ot


def java_hash_by_hand(s: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, wrapped to a signed int32."""
    units = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize("s,expected", [
    ("", 0),
    ("a", 97),
    ("ab", 97 * 31 + 98),
    ("my-group", -1906497762),
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units in Java
    ("polygenelubricants", -(2**31)),  # the classic Integer.MIN_VALUE hash
])
def test_java_string_hash_vectors(s, expected):
    assert ot.java_string_hash(s) == expected
    assert java_hash_by_hand(s) == expected


def test_partition_for_group_matches_kafka():
    # kafka-cp my-group (jshell: abs(id.hashCode()) % 50) prints 12
    assert ot.partition_for_group("my-group", 50) == 12
    # Utils.abs(Integer.MIN_VALUE) is 0, not MIN_VALUE (Math.abs would give a negative partition)
    assert ot.kafka_abs(-(2**31)) == 0
    assert ot.partition_for_group("polygenelubricants", 50) == 0
    assert ot.partition_for_group("a", 50) == 97 % 50
    with pytest.raises(ValueError):
        ot.partition_for_group("g", 0)


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_group_property(group, n):
    h = java_hash_by_hand(group)
    want = (0 if h == -(2**31) else abs(h)) % n
    assert ot.partition_for_group(group, n) == want


def test_offset_commit_key_bytes():
    key = ot.encode_offset_commit_key("g1", "orders", 7)
    assert key == b"\x00\x01" + b"\x00\x02g1" + b"\x00\x06orders" + b"\x00\x00\x00\x07"
    assert ot.decode_key(key) == ot.OffsetCommitKey("g1", "orders", 7)


def test_group_metadata_key_bytes():
    key = ot.encode_group_metadata_key("g1")
    assert key == b"\x00\x02\x00\x02g1"
    assert ot.decode_key(key) == ot.GroupMetadataKey("g1")


def test_offset_commit_value_v3_bytes():
    v = ot.OffsetCommitValue(offset=100, leader_epoch=5, metadata="m", commit_timestamp=1000)
    data = ot.encode_offset_commit_value(v)
    assert data == (b"\x00\x03" + struct.pack(">q", 100) + struct.pack(">i", 5) + b"\x00\x01m"
                    + struct.pack(">q", 1000))
    assert ot.decode_offset_commit_value(data) == v


def test_offset_commit_value_older_versions_decode():
    v1 = b"\x00\x01" + struct.pack(">q", 42) + b"\x00\x00" + struct.pack(">q", 7) + struct.pack(">q", 99)
    assert ot.decode_offset_commit_value(v1) == ot.OffsetCommitValue(42, -1, "", 7, 99)
    v0 = b"\x00\x00" + struct.pack(">q", 42) + b"\x00\x02hi" + struct.pack(">q", 7)
    assert ot.decode_offset_commit_value(v0) == ot.OffsetCommitValue(42, -1, "hi", 7, -1)


def test_group_metadata_value_v3_bytes():
    member = ot.MemberMetadata("m-1", "client", "/host", 300, 45, b"S", b"AA")
    v = ot.GroupMetadataValue("consumer", 3, "range", "m-1", 1234, (member,))
    data = ot.encode_group_metadata_value(v)
    want = (b"\x00\x03" + b"\x00\x08consumer" + struct.pack(">i", 3) + b"\x00\x05range" + b"\x00\x03m-1"
            + struct.pack(">q", 1234) + struct.pack(">i", 1)
            + b"\x00\x03m-1" + b"\xff\xff" + b"\x00\x06client" + b"\x00\x05/host"
            + struct.pack(">i", 300) + struct.pack(">i", 45) + struct.pack(">i", 1) + b"S" + struct.pack(">i", 2) + b"AA")
    assert data == want
    assert ot.decode_group_metadata_value(data) == v


def test_empty_group_metadata_has_null_protocol_and_leader():
    v = ot.GroupMetadataValue("consumer", 4, None, None, 5, ())
    data = ot.encode_group_metadata_value(v)
    assert data == b"\x00\x03\x00\x08consumer" + struct.pack(">i", 4) + b"\xff\xff\xff\xff" + struct.pack(">q", 5) + bytes(4)
    assert ot.decode_group_metadata_value(data) == v


def test_consumer_protocol_subscription_and_assignment_bytes():
    sub = ot.encode_subscription(["a", "bc"])
    assert sub == b"\x00\x00" + struct.pack(">i", 2) + b"\x00\x01a\x00\x02bc" + b"\xff\xff\xff\xff"
    assert ot.decode_subscription(sub) == (["a", "bc"], None)
    asg = ot.encode_assignment([("b", 1), ("a", 2), ("b", 0)])
    assert asg == (b"\x00\x00" + struct.pack(">i", 2) + b"\x00\x01a" + struct.pack(">ii", 1, 2)
                   + b"\x00\x01b" + struct.pack(">iii", 2, 0, 1) + b"\xff\xff\xff\xff")
    assert ot.decode_assignment(asg) == [("a", 2), ("b", 0), ("b", 1)]
    assert ot.decode_assignment(b"") == []


@pytest.mark.parametrize("bad", [b"", b"\x00", b"\x00\x09\x00\x01g", b"\x00\x01\x00\x05ab", b"\x00\x02\x00\x01gX"])
def test_bad_keys_raise_corrupt_record(bad):
    with pytest.raises(CorruptRecordError, match="__consumer_offsets"):
        ot.decode_key(bad)


names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(names, names, st.integers(0, 2**31 - 1), st.integers(-1, 2**62), st.integers(-1, 2**31 - 1), names,
       st.integers(-1, 2**62))
def test_round_trips(group, topic, partition, offset, epoch, metadata, ts):
    assert ot.decode_key(ot.encode_offset_commit_key(group, topic, partition)) == (group, topic, partition)
    assert ot.decode_key(ot.encode_group_metadata_key(group)) == (group,)
    v = ot.OffsetCommitValue(offset, epoch, metadata, ts)
    assert ot.decode_offset_commit_value(ot.encode_offset_commit_value(v)) == v


@given(st.lists(st.tuples(names, names, st.binary(max_size=20), st.binary(max_size=20)), max_size=4),
       st.integers(0, 1000), st.one_of(st.none(), names))
def test_group_metadata_round_trip(members, generation, protocol):
    ms = tuple(ot.MemberMetadata(mid, cid, "/h", 10, 20, sub, asg) for mid, cid, sub, asg in members)
    v = ot.GroupMetadataValue("consumer", generation, protocol, ms[0].member_id if ms else None, 77, ms)
    assert ot.decode_group_metadata_value(ot.encode_group_metadata_value(v)) == v


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 100)), unique=True))
def test_assignment_round_trip(parts):
    assert ot.decode_assignment(ot.encode_assignment(parts)) == sorted(parts)
