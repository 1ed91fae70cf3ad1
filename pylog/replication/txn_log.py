"""The ``__transaction_state`` topic: which partition holds a transactional id, and Kafka's record layouts.

The transaction coordinator (:mod:`pylog.replication.txn_coordinator`) keeps one
record per transactional id in this compacted topic; the last value for a key
wins and a null value (tombstone) removes the id. The layouts are Kafka's
generated ``TransactionLogKey`` / ``TransactionLogValue`` messages (JSON
schemas in Kafka's ``transaction-coordinator/src/main/resources/common/message/``),
each prefixed with its int16 version (Kafka's ``MessageUtil.toVersionPrefixedBytes``):

===================  ===========================================================================
record               layout (big-endian)
===================  ===========================================================================
key v0               int16 version=0 | string transactional_id (int16 length + UTF-8)
value v0             int16 version=0 | int64 producer_id | int16 producer_epoch |
                     int32 transaction_timeout_ms | int8 state |
                     nullable array (int32 count, -1 = null) of
                     [string topic | int32 count, int32 partition...] |
                     int64 last_update_timestamp_ms | int64 start_timestamp_ms
value v1 (flexible)  int16 version=1 | the same scalars | compact nullable array
                     (uvarint count+1, 0 = null) of [compact string topic (uvarint length+1) |
                     compact array of int32 | tagged fields] | the two timestamps |
                     tagged fields: uvarint count, then per field uvarint tag, uvarint size,
                     value, ascending tags, written only when not the default:
                     tag 0 int64 previous_producer_id (default -1), tag 1 int64
                     next_producer_id (default -1), tag 2 int16 client_transaction_version (default 0)
===================  ===========================================================================

Kafka writes value v0 while the cluster's ``transaction.version`` feature is 0
and v1 from 1 on (``TransactionVersion.transactionLogValueVersion``); both are
read. An Empty transaction is written with a null partition list. The partition
list is written grouped by topic; we sort topics and partitions so the bytes
are deterministic (Kafka's order is a hash set's, which a reader must not rely on).
Reading is stricter than Kafka's generated reader where the bytes are
malformed: tags must ascend, a known tag's size must be its type's, and no
bytes may follow the message.

Complexity: O(bytes) per record. Durability: none (pure functions).
Thread-safety: pure functions; safe anywhere.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Tuple

from pylog.errors import CorruptRecordError, InvalidRequestError
from pylog.replication.offsets_topic import java_string_hash, kafka_abs
from pylog.replication.schema_reader import I8 as _I8, I16 as _I16, I32 as _I32, I64 as _I64, SchemaReader

TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's ``transaction.state.log.num.partitions`` default
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50

KEY_VERSION = 0
#: value versions we read and write (Kafka's ``TransactionLogValue`` validVersions 0-1)
VALUE_VERSIONS = (0, 1)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

TopicPartition = Tuple[str, int]



class TransactionState(enum.IntEnum):
    """The coordinator's state of one transactional id; the values are Kafka's state ids on disk."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name (``DescribeTransactions``): ``Empty``, ``PrepareCommit``, ..."""
        return "".join(part.capitalize() for part in self.name.split("_"))


def partition_for_transactional_id(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id``, as Kafka's
    ``TransactionStateManager.partitionFor``: ``Utils.abs(id.hashCode) % partitions``.

    >>> partition_for_transactional_id("copier-1", 50)
    32
    """
    if partitions < 1:
        raise InvalidRequestError(f"{TRANSACTION_STATE_TOPIC} needs at least one partition, got {partitions}")
    return kafka_abs(java_string_hash(transactional_id)) % partitions


@dataclass(frozen=True)
class TxnLogValue:
    """One ``TransactionLogValue``: the state of a transactional id as last written."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: FrozenSet[TopicPartition] = field(default_factory=frozenset)
    last_update_timestamp_ms: int = -1
    start_timestamp_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


# ------------------------------------------------------------------ writing
def _check_int(name: str, v: int, bits: int) -> None:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise InvalidRequestError(f"transaction log field {name}={v!r} is not an int{bits}")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, compact: bool) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 32767:
        raise InvalidRequestError(f"string of {len(b)} bytes is too long for the transaction log")
    return (_uvarint(len(b) + 1) if compact else _I16.pack(len(b))) + b


def encode_key(transactional_id: str) -> bytes:
    """The record key of ``transactional_id`` (``TransactionLogKey`` v0, version-prefixed).

    >>> encode_key("t1").hex()
    '000000027431'
    """
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidRequestError(f"transactional id must be a non-empty string, got {transactional_id!r}")
    return _I16.pack(KEY_VERSION) + _string(transactional_id, compact=False)


def _grouped(partitions: FrozenSet[TopicPartition]) -> List[Tuple[str, List[int]]]:
    by_topic: Dict[str, List[int]] = {}
    for topic, p in partitions:
        _check_int(f"partition of {topic}", p, 32)
        by_topic.setdefault(topic, []).append(p)
    return [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]


def encode_value(value: TxnLogValue, version: int = 1) -> bytes:
    """The record value for ``value`` in ``TransactionLogValue`` ``version`` (0 or 1), version-prefixed.

    Raises :class:`InvalidRequestError` for a field out of its type's range,
    an unknown version, or an Empty state with partitions (Kafka refuses that too).
    """
    if version not in VALUE_VERSIONS:
        raise InvalidRequestError(f"transaction log value version {version} is not one of {VALUE_VERSIONS}")
    _check_int("producer_id", value.producer_id, 64)
    _check_int("producer_epoch", value.producer_epoch, 16)
    _check_int("transaction_timeout_ms", value.transaction_timeout_ms, 32)
    _check_int("last_update_timestamp_ms", value.last_update_timestamp_ms, 64)
    _check_int("start_timestamp_ms", value.start_timestamp_ms, 64)
    _check_int("previous_producer_id", value.previous_producer_id, 64)
    _check_int("next_producer_id", value.next_producer_id, 64)
    _check_int("client_transaction_version", value.client_transaction_version, 16)
    state = TransactionState(value.state)
    if state == TransactionState.EMPTY and value.partitions:
        raise InvalidRequestError(f"an Empty transaction has no partitions, got {sorted(value.partitions)}")
    compact = version >= 1
    parts = [_I16.pack(version), _I64.pack(value.producer_id), _I16.pack(value.producer_epoch),
             _I32.pack(value.transaction_timeout_ms), _I8.pack(int(state))]
    if state == TransactionState.EMPTY:
        parts.append(_uvarint(0) if compact else _I32.pack(-1))
    else:
        groups = _grouped(value.partitions)
        parts.append(_uvarint(len(groups) + 1) if compact else _I32.pack(len(groups)))
        for topic, ids in groups:
            parts.append(_string(topic, compact))
            parts.append(_uvarint(len(ids) + 1) if compact else _I32.pack(len(ids)))
            parts.extend(_I32.pack(p) for p in ids)
            if compact:
                parts.append(_uvarint(0))  # the element's (empty) tagged fields
    parts.append(_I64.pack(value.last_update_timestamp_ms))
    parts.append(_I64.pack(value.start_timestamp_ms))
    if compact:
        tagged: List[Tuple[int, bytes]] = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tagged.append((0, _I64.pack(value.previous_producer_id)))
        if value.next_producer_id != NO_PRODUCER_ID:
            tagged.append((1, _I64.pack(value.next_producer_id)))
        if value.client_transaction_version != 0:
            tagged.append((2, _I16.pack(value.client_transaction_version)))
        parts.append(_uvarint(len(tagged)))
        for tag, data in tagged:
            parts.append(_uvarint(tag) + _uvarint(len(data)) + data)
    return b"".join(parts)


# ------------------------------------------------------------------ reading
def decode_key(data: bytes) -> Optional[str]:
    """The transactional id of a ``__transaction_state`` record key.

    Returns None for a key of an unknown version (Kafka's loader skips those:
    "a left over from an aborted upgrade"). Raises :class:`CorruptRecordError`
    naming the field when the bytes are short, have a bad length or trailing bytes.
    """
    if data is None:
        raise CorruptRecordError("transaction log key: null key")
    r = SchemaReader(data, "transaction log key")
    version = r.i16("version")
    if version != KEY_VERSION:
        return None
    tid = r.string("transactional_id", compact=False)
    r.end()
    return tid


def decode_value(data: Optional[bytes]) -> Optional[TxnLogValue]:
    """Decode a ``__transaction_state`` record value; None for a tombstone (null value).

    Raises :class:`CorruptRecordError` naming the field and byte position for
    short input, an unknown version or state id, a negative count, a null
    topic, or trailing bytes. Unknown tagged fields are skipped (as Kafka's
    generated reader does).
    """
    if data is None:
        return None
    r = SchemaReader(data, "transaction log value")
    version = r.i16("version")
    if version not in VALUE_VERSIONS:
        raise r.fail(f"unknown value version {version}")
    compact = version >= 1
    pid = r.i64("producer_id")
    epoch = r.i16("producer_epoch")
    timeout = r.i32("transaction_timeout_ms")
    state_id = r.i8("transaction_status")
    try:
        state = TransactionState(state_id)
    except ValueError:
        raise r.fail(f"unknown transaction state id {state_id}") from None
    count = r.uvarint("transaction_partitions") - 1 if compact else r.i32("transaction_partitions")
    partitions = set()
    if count < -1:
        raise r.fail(f"transaction_partitions count {count}")
    for _ in range(max(count, 0)):
        topic = r.string("topic", compact)
        n = r.uvarint("partition_ids") - 1 if compact else r.i32("partition_ids")
        if n < 0:
            raise r.fail(f"partition_ids count {n} for topic {topic!r}")
        if n * 4 > len(r.buf) - r.pos:
            raise r.fail(f"partition_ids of {n} entries for topic {topic!r} do not fit")
        for _ in range(n):
            partitions.add((topic, r.i32("partition_id")))
        if compact:
            _tagged(r)  # the element's tagged fields: none known, skipped
    last_update = r.i64("transaction_last_update_timestamp_ms")
    start = r.i64("transaction_start_timestamp_ms")
    prev_pid, next_pid, ctv = NO_PRODUCER_ID, NO_PRODUCER_ID, 0
    if compact:
        for tag, body in _tagged(r):
            if tag == 0:
                prev_pid = _fixed(r, body, _I64, "previous_producer_id")
            elif tag == 1:
                next_pid = _fixed(r, body, _I64, "next_producer_id")
            elif tag == 2:
                ctv = _fixed(r, body, _I16, "client_transaction_version")
    r.end()
    if state == TransactionState.EMPTY:
        partitions = set()  # Kafka's loader ignores partitions of an Empty transaction
    return TxnLogValue(pid, epoch, timeout, state, frozenset(partitions), last_update, start,
                       prev_pid, next_pid, ctv)


def _tagged(r: SchemaReader) -> List[Tuple[int, bytes]]:
    n = r.uvarint("tagged field count")
    out: List[Tuple[int, bytes]] = []
    last = -1
    for _ in range(n):
        tag = r.uvarint("tag")
        if tag <= last:
            raise r.fail(f"tagged field {tag} after {last} (tags must ascend)")
        last = tag
        size = r.uvarint(f"size of tagged field {tag}")
        out.append((tag, bytes(r.take(size, f"tagged field {tag}"))))
    return out


def _fixed(r: SchemaReader, body: bytes, st: struct.Struct, name: str) -> int:
    if len(body) != st.size:
        raise r.fail(f"tagged field {name} has {len(body)} bytes, expected {st.size}")
    return int(st.unpack(body)[0])
