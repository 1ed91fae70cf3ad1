"""The ``__consumer_offsets`` topic: which partition holds a group, and Kafka's key/value byte layouts.

Every record of the topic has a key that starts with an int16 *version*
telling what the record is, followed by the fields in Kafka's classic
(non-flexible) encoding: int16 length + UTF-8 for a string (-1 for a null
string), int32 length + bytes for bytes, big-endian integers, int32 count for
an array.

=======================  ===========================================================================
record                   layout
=======================  ===========================================================================
OffsetCommitKey          int16 version=1 | string group | string topic | int32 partition
OffsetCommitValue v3     int16 version=3 | int64 offset | int32 leader_epoch | string metadata |
                         int64 commit_timestamp
GroupMetadataKey         int16 version=2 | string group
GroupMetadataValue v3    int16 version=3 | string protocol_type | int32 generation |
                         nullable string protocol | nullable string leader |
                         int64 current_state_timestamp | int32 count, then per member:
                         string member_id | nullable string group_instance_id | string client_id |
                         string client_host | int32 rebalance_timeout | int32 session_timeout |
                         bytes subscription | bytes assignment
=======================  ===========================================================================

A null value is a tombstone: it deletes the offset (or the group) for the
log cleaner (the topic is compacted) and for a coordinator loading the log.
Values of versions 0, 1 (with ``expire_timestamp``) and 2 are read too.

The consumer protocol's ``subscription`` and ``assignment`` (member metadata
inside ``GroupMetadataValue``, and the bytes a JoinGroup/SyncGroup carries)
use Kafka's ConsumerProtocolSubscription / ConsumerProtocolAssignment v0:
``int16 version=0 | [string topic] | nullable bytes user_data`` and
``int16 version=0 | [string topic, [int32 partition]] | nullable bytes user_data``.

Complexity: O(bytes) per record. Durability: none (pure functions).
Thread-safety: pure functions; safe anywhere.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from pylog.errors import CorruptRecordError
from pylog.replication.schema_reader import I16 as _I16, I32 as _I32, I64 as _I64, SchemaReader
from pylog.storage.control_record import ControlRecordType, parse_control_type

if TYPE_CHECKING:
    from pylog.storage.log import Log

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 50

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3



# --------------------------------------------------------------- partitioning
def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units, int32 overflow).

    >>> java_string_hash("a"), java_string_hash("")
    (97, 0)
    """
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``abs(n)``, except that ``Integer.MIN_VALUE`` maps to 0."""
    return 0 if n == -(2**31) else abs(n)


def partition_for_group(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``, as Kafka's GroupCoordinator picks it.

    >>> partition_for_group("my-group", 50)
    12
    """
    if partitions < 1:
        raise ValueError(f"{OFFSETS_TOPIC} needs at least one partition, got {partitions}")
    return kafka_abs(java_string_hash(group_id)) % partitions


# ------------------------------------------------------------------ primitives
class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: List[bytes] = []

    def i16(self, v: int) -> "_Writer":
        self.parts.append(_I16.pack(v))
        return self

    def i32(self, v: int) -> "_Writer":
        self.parts.append(_I32.pack(v))
        return self

    def i64(self, v: int) -> "_Writer":
        self.parts.append(_I64.pack(v))
        return self

    def string(self, v: Optional[str]) -> "_Writer":
        if v is None:
            self.parts.append(_I16.pack(-1))
        else:
            b = v.encode("utf-8")
            if len(b) > 32767:
                raise ValueError(f"string of {len(b)} bytes is too long for an int16 length")
            self.parts.append(_I16.pack(len(b)) + b)
        return self

    def bytes_(self, v: Optional[bytes]) -> "_Writer":
        if v is None:
            self.parts.append(_I32.pack(-1))
        else:
            self.parts.append(_I32.pack(len(v)) + bytes(v))
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


# --------------------------------------------------------------------- records
class OffsetCommitKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    group: str


class OffsetCommitValue(NamedTuple):
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


class MemberMetadata(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: Optional[str] = None


class GroupMetadataValue(NamedTuple):
    protocol_type: str
    generation: int
    protocol: Optional[str]
    leader: Optional[str]
    current_state_timestamp: int
    members: Tuple[MemberMetadata, ...]


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _Writer().i16(OFFSET_COMMIT_KEY_VERSION).string(group).string(topic).i32(partition).done()


def encode_group_metadata_key(group: str) -> bytes:
    return _Writer().i16(GROUP_METADATA_KEY_VERSION).string(group).done()


def encode_offset_commit_value(v: OffsetCommitValue) -> bytes:
    """Version 3 (with the leader epoch), as Kafka 2.1+ writes it."""
    return (_Writer().i16(OFFSET_COMMIT_VALUE_VERSION).i64(v.offset).i32(v.leader_epoch)
            .string(v.metadata).i64(v.commit_timestamp).done())


def encode_group_metadata_value(v: GroupMetadataValue) -> bytes:
    w = (_Writer().i16(GROUP_METADATA_VALUE_VERSION).string(v.protocol_type).i32(v.generation)
         .string(v.protocol).string(v.leader).i64(v.current_state_timestamp).i32(len(v.members)))
    for m in v.members:
        (w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
         .i32(m.rebalance_timeout).i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment))
    return w.done()


Key = Union[OffsetCommitKey, GroupMetadataKey]


class LogEntry(NamedTuple):
    """One record of an offsets partition, as the coordinator's ``load`` reads the log (in offset order).

    ``offset``: the record's offset (-1: unknown; ``load`` then uses the entry's position in the
    sequence). ``producer_id``/``producer_epoch``/``transactional``: its batch's header - a transactional
    offset commit (TxnOffsetCommit) waits for its producer's marker. ``marker``: for a transaction marker
    (a COMMIT/ABORT control record; ``key``/``value`` None) True for COMMIT, False for ABORT; None for
    a data record. Other control records are not entries.
    """

    key: Optional[bytes]
    value: Optional[bytes]
    offset: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    transactional: bool = False
    marker: Optional[bool] = None


def decode_key(data: bytes) -> Key:
    """An ``OffsetCommitKey`` (versions 0 and 1) or ``GroupMetadataKey`` (version 2)."""
    r = SchemaReader(data, f"{OFFSETS_TOPIC} key")
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        k: Key = OffsetCommitKey(group, topic, r.i32())
    elif version == 2:
        k = GroupMetadataKey(r.string())
    else:
        raise CorruptRecordError(f"{OFFSETS_TOPIC} key: unknown key version {version}")
    r.end()
    return k


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """Versions 0-3 (version 1 carries an expire timestamp, 3 a leader epoch)."""
    r = SchemaReader(data, f"{OFFSETS_TOPIC} offset commit value")
    version = r.i16()
    if not 0 <= version <= 3:
        raise CorruptRecordError(f"{OFFSETS_TOPIC} offset commit value: unknown version {version}")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    ts = r.i64()
    expire = r.i64() if version == 1 else -1
    r.end()
    return OffsetCommitValue(offset, epoch, metadata or "", ts, expire)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Versions 0-3 (1 adds rebalance_timeout, 2 current_state_timestamp, 3 group_instance_id)."""
    r = SchemaReader(data, f"{OFFSETS_TOPIC} group metadata value")
    version = r.i16()
    if not 0 <= version <= 3:
        raise CorruptRecordError(f"{OFFSETS_TOPIC} group metadata value: unknown version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    ts = r.i64() if version >= 2 else -1
    n = r.i32()
    if n < 0 or n > len(data):
        raise CorruptRecordError(f"{OFFSETS_TOPIC} group metadata value: bad member count {n}")
    members = []
    for _ in range(n):
        member_id = r.string()
        instance = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        host = r.string()
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        if version == 0:
            rebalance = session
        sub = r.bytes_() or b""
        asg = r.bytes_() or b""
        members.append(MemberMetadata(member_id, client_id, host, rebalance, session, sub, asg, instance))
    r.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))


# ----------------------------------------------------------- consumer protocol
def encode_subscription(topics: Sequence[str], user_data: Optional[bytes] = None) -> bytes:
    """ConsumerProtocolSubscription v0."""
    w = _Writer().i16(0).i32(len(topics))
    for t in topics:
        w.string(t)
    return w.bytes_(user_data).done()


def decode_subscription(data: bytes) -> Tuple[List[str], Optional[bytes]]:
    r = SchemaReader(data, f"{OFFSETS_TOPIC} subscription")
    r.i16()  # every version starts with v0's fields
    n = r.i32()
    if n < 0 or n > len(data):
        raise CorruptRecordError(f"subscription: bad topic count {n}")
    topics = [r.string() for _ in range(n)]
    user = r.bytes_() if r.left > 0 else None
    return topics, user


def encode_assignment(partitions: Sequence[Tuple[str, int]], user_data: Optional[bytes] = None) -> bytes:
    """ConsumerProtocolAssignment v0: topics in sorted order, partitions ascending."""
    by_topic: Dict[str, List[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    w = _Writer().i16(0).i32(len(by_topic))
    for t in sorted(by_topic):
        w.string(t).i32(len(by_topic[t]))
        for p in sorted(by_topic[t]):
            w.i32(p)
    return w.bytes_(user_data).done()


def decode_assignment(data: bytes) -> List[Tuple[str, int]]:
    if not data:
        return []
    r = SchemaReader(data, f"{OFFSETS_TOPIC} assignment")
    r.i16()
    n = r.i32()
    if n < 0 or n > len(data):
        raise CorruptRecordError(f"assignment: bad topic count {n}")
    out: List[Tuple[str, int]] = []
    for _ in range(n):
        t = r.string()
        k = r.i32()
        if k < 0 or k > len(data):
            raise CorruptRecordError(f"assignment: bad partition count {k} for topic {t!r}")
        out.extend((t, r.i32()) for _ in range(k))
    return out


def read_log_entries(log: "Log", end: Optional[int] = None) -> Iterator[LogEntry]:
    """Every record of an offsets partition's ``log`` from its start up to ``end`` (default: its log end),
    in offset order, as the coordinator's ``load`` takes them: with its batch's producer id, epoch and
    transactional bit; a transaction marker as an entry with ``marker`` set (other control records
    are skipped). Raises CorruptRecordError (file, offset) for a malformed control record.
    O(records read); reads 1 MiB of batches at a time; the caller holds the log open."""
    offset = log.log_start_offset
    stop = log.log_end_offset if end is None else min(end, log.log_end_offset)
    while offset < stop:
        batches = log.read_batches(offset, 1 << 20)
        if not batches:
            break
        for batch in batches:
            if batch.base_offset >= stop:
                return
            pid, epoch, txn = batch.producer_id, batch.producer_epoch, batch.is_transactional
            if batch.is_control:
                for r in batch.records():
                    kind = parse_control_type(r.key, path=batch.path, offset=r.offset)
                    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                        yield LogEntry(None, None, r.offset, pid, epoch, txn, kind == ControlRecordType.COMMIT)
            else:
                for r in batch.records():
                    if r.offset < stop:
                        yield LogEntry(r.key, r.value, r.offset, pid, epoch, txn)
            offset = batch.last_offset + 1


__all__ = [
    "OFFSETS_TOPIC", "DEFAULT_OFFSETS_PARTITIONS", "java_string_hash", "kafka_abs", "partition_for_group",
    "LogEntry", "read_log_entries", "OffsetCommitKey", "GroupMetadataKey", "OffsetCommitValue", "GroupMetadataValue", "MemberMetadata",
    "encode_offset_commit_key", "encode_group_metadata_key", "encode_offset_commit_value",
    "encode_group_metadata_value", "decode_key", "decode_offset_commit_value", "decode_group_metadata_value",
    "encode_subscription", "decode_subscription", "encode_assignment", "decode_assignment",
]
