"""Control records: the key and value of a transaction marker (Kafka's ``ControlRecordType`` and
``EndTransactionMarker``).

A control batch (attributes bit 5, 0x20; a transaction marker also has the
transactional bit 4: 0x30) holds exactly one control record. Its layouts
(big-endian):

==================  ===================================================================
part                layout
==================  ===================================================================
key (4 bytes)       int16 version=0 | int16 type (ABORT=0, COMMIT=1; 2-6 are KRaft's)
marker value (6)    int16 version=0 | int32 coordinator_epoch
==================  ===================================================================

A reader accepts a key of version >= 0 and at least 4 bytes, and reads a
higher version as version 0 (Kafka: "must be backwards compatible"); a
negative version means corruption. The same holds for the marker value. An
unknown type id reads as :attr:`ControlRecordType.UNKNOWN` (a consumer skips it).

The marker batch itself (producer id and epoch of the transaction,
baseSequence -1, one record) is built by the record layer; this module only
knows the record's key and value.

Complexity: O(1). Durability: none (pure functions). Thread-safety: pure functions.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from pylog.errors import CorruptRecordError, InvalidRequestError

if TYPE_CHECKING:
    from pylog.record import RecordBatch

CONTROL_KEY_VERSION = 0
CONTROL_KEY_SIZE = 4
END_TXN_MARKER_VERSION = 0
END_TXN_MARKER_VALUE_SIZE = 6

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    """The type id in a control record's key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


def encode_control_key(kind: ControlRecordType) -> bytes:
    """The 4-byte key of a control record of type ``kind``.

    >>> encode_control_key(ControlRecordType.COMMIT).hex()
    '00000001'
    """
    kind = ControlRecordType(kind)
    if kind == ControlRecordType.UNKNOWN:
        raise InvalidRequestError("cannot write a control record of type UNKNOWN")
    return _KEY.pack(CONTROL_KEY_VERSION, int(kind))


def _where(offset: Optional[int]) -> str:
    return f" at offset {offset}" if offset is not None else ""


def parse_control_type(key: Optional[bytes], *, path: Optional[str] = None, position: Optional[int] = None,
                       offset: Optional[int] = None) -> ControlRecordType:
    """The type of the control record whose key is ``key``.

    Raises :class:`CorruptRecordError` (naming ``path``, ``position`` and the record
    ``offset`` when given) for a null or short key or a negative version.
    """
    at = _where(offset)
    if key is None or len(key) < CONTROL_KEY_SIZE:
        n = "null" if key is None else f"{len(key)} bytes"
        raise CorruptRecordError(f"control record key{at} is {n}, needs at least {CONTROL_KEY_SIZE}",
                                 path=path, position=position)
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"control record key{at} has version {version}", path=path, position=position)
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


@dataclass(frozen=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker and the epoch of the coordinator that wrote it."""

    kind: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRequestError(f"an end-transaction marker is COMMIT or ABORT, not {self.kind!r}")
        if not -(2**31) <= self.coordinator_epoch < 2**31:
            raise InvalidRequestError(f"coordinator epoch {self.coordinator_epoch} is not an int32")

    @property
    def committed(self) -> bool:
        return self.kind == ControlRecordType.COMMIT

    def key(self) -> bytes:
        """The control record key (4 bytes)."""
        return encode_control_key(self.kind)

    def value(self) -> bytes:
        """The marker value (6 bytes).

        >>> EndTransactionMarker(ControlRecordType.ABORT, 7).value().hex()
        '000000000007'
        """
        return _VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @classmethod
    def decode(cls, key: Optional[bytes], value: Optional[bytes], *, path: Optional[str] = None,
               position: Optional[int] = None, offset: Optional[int] = None) -> "EndTransactionMarker":
        """The marker in a control record's ``key`` and ``value``.

        Raises :class:`CorruptRecordError` for a key that is not a COMMIT/ABORT
        key, a null or short value, or a negative value version.
        """
        kind = parse_control_type(key, path=path, position=position, offset=offset)
        at = _where(offset)
        if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise CorruptRecordError(f"control record{at} of type {kind.name} is not a transaction marker",
                                     path=path, position=position)
        if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
            n = "null" if value is None else f"{len(value)} bytes"
            raise CorruptRecordError(f"transaction marker value{at} is {n}, needs at least "
                                     f"{END_TXN_MARKER_VALUE_SIZE}", path=path, position=position)
        version, epoch = _VALUE.unpack_from(value, 0)
        if version < 0:
            raise CorruptRecordError(f"transaction marker value{at} has version {version}",
                                     path=path, position=position)
        return cls(kind, epoch)


def marker_of_batch(batch: "RecordBatch") -> Optional[EndTransactionMarker]:
    """The COMMIT/ABORT marker in a control batch, None for another control type (e.g. LEADER_CHANGE).

    Raises :class:`CorruptRecordError` naming the batch's file and base offset when the batch holds
    no record or its key/value do not decode. Complexity: O(batch bytes).
    """
    records = batch.records()
    off = batch.base_offset
    if not records:
        raise CorruptRecordError(f"control batch at offset {off} holds no record", path=batch.path)
    r = records[0]
    key = bytes(r.key) if r.key is not None else None
    kind = parse_control_type(key, path=batch.path, offset=off)
    if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return None
    value = bytes(r.value) if r.value is not None else None
    return EndTransactionMarker.decode(key, value, path=batch.path, offset=off)
