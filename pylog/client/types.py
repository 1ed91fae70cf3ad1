"""Kafka's small value types for the clients, and the argument normalisers that accept Kafka's idioms.

:class:`TopicPartition`, :class:`OffsetAndMetadata` and :class:`OffsetAndTimestamp`
are NamedTuples with kafka-python's field names (so ``tp.topic``,
``tp.partition``, ``om.offset``, ``om.metadata`` work, and a
``TopicPartition`` equals and hashes as the plain ``(topic, partition)``
tuple pylog uses internally). Wherever a client takes a partition it also
takes kafka-python's ``TopicPartition`` (also a namedtuple) and any object
with ``.topic`` and ``.partition`` (e.g. confluent-kafka's); wherever it takes
an offset to commit, any object with ``.offset`` (and optionally
``.metadata``, ``.leader_epoch``).

Owns: the value types and argument normalisers every client shares.
Thread-safety: immutable values and pure functions. Complexity: O(1) per item.
Durability: none (values in memory).
"""
from __future__ import annotations

import logging

from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from pylog.errors import InvalidConfigurationError, InvalidOffsetError, SerializationError
from pylog.record import CREATE_TIME

logger = logging.getLogger(__name__)


class ConsumerRecord(NamedTuple):
    """One record as :meth:`Consumer.poll <pylog.client.consumer.Consumer.poll>` returns it (Kafka's ConsumerRecord)."""

    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: int
    headers: Sequence[Tuple[str, Optional[bytes]]]
    #: 0 CreateTime, 1 LogAppendTime
    timestamp_type: int = CREATE_TIME
    #: the leader epoch of the batch that carried the record
    leader_epoch: int = -1


class TopicPartition(NamedTuple):
    """A topic and a partition number (Kafka's TopicPartition); equal to the tuple ``(topic, partition)``."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """An offset to commit (the next record to read), optional metadata and leader epoch (Kafka's)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    """What :meth:`~pylog.Consumer.offsets_for_times` finds: the earliest offset whose timestamp is at
    or after the one asked for, that record's timestamp, and its batch's leader epoch (Kafka's)."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


def as_tp(obj: Any, what: str = "partition") -> TopicPartition:
    """``obj`` as a :class:`TopicPartition`: a ``(topic, partition)`` pair or anything with ``.topic``/``.partition``.

    Raises :class:`InvalidConfigurationError` naming ``what`` for anything else.
    """
    if isinstance(obj, TopicPartition):
        return obj
    topic = getattr(obj, "topic", None)
    partition = getattr(obj, "partition", None)
    if topic is None or partition is None or callable(topic) or callable(partition):
        if isinstance(obj, tuple) and len(obj) == 2:
            topic, partition = obj
        else:
            raise InvalidConfigurationError(
                f"{what} must be a TopicPartition or a (topic, partition) pair, got {obj!r}")
    if not isinstance(topic, str) or not topic:
        raise InvalidConfigurationError(f"{what}: the topic must be a non-empty str, got {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidConfigurationError(f"{what}: the partition of {topic!r} must be an int >= 0, got {partition!r}")
    return TopicPartition(topic, partition)


def as_tps(objs: Iterable[Any], what: str = "partitions") -> List[TopicPartition]:
    """A collection of partitions (see :func:`as_tp`); a lone str or TopicPartition is refused by name."""
    if isinstance(objs, (str, bytes)) or objs is None or not hasattr(objs, "__iter__") or (
            isinstance(objs, tuple) and len(objs) == 2 and isinstance(objs[0], str)):
        raise InvalidConfigurationError(
            f"{what} must be a collection of TopicPartitions or (topic, partition) pairs, got {objs!r}")
    return [as_tp(o, what) for o in objs]


def as_commit_offset(tp: TopicPartition, value: Any) -> OffsetAndMetadata:
    """An offset to commit for ``tp``: an int, pylog's or kafka-python's OffsetAndMetadata, or anything with ``.offset``."""
    if isinstance(value, OffsetAndMetadata):
        off, meta, epoch = value
    elif hasattr(value, "offset") and not isinstance(value, int):
        off = value.offset
        meta = getattr(value, "metadata", "") or ""
        epoch = getattr(value, "leader_epoch", -1)
        epoch = -1 if epoch is None else epoch
    else:
        off, meta, epoch = value, "", -1
    if isinstance(off, bool) or not isinstance(off, int) or off < 0:
        raise InvalidOffsetError(f"the offset to commit for {tp.topic}-{tp.partition} must be an int >= 0, got {off!r}")
    if not isinstance(meta, str):
        raise InvalidConfigurationError(f"the commit metadata for {tp.topic}-{tp.partition} must be a str, got {meta!r}")
    return OffsetAndMetadata(off, meta, int(epoch))


def as_commit_offsets(offsets: Any) -> Dict[TopicPartition, OffsetAndMetadata]:
    """``{partition: offset}`` for ``commit``: keys as :func:`as_tp`, values as :func:`as_commit_offset`."""
    if not isinstance(offsets, dict):
        raise InvalidConfigurationError(
            f"offsets must be a dict {{TopicPartition: OffsetAndMetadata or int}}, got {type(offsets).__name__}")
    out: Dict[TopicPartition, OffsetAndMetadata] = {}
    for k, v in offsets.items():
        tp = as_tp(k, "a key of offsets")
        out[tp] = as_commit_offset(tp, v)
    return out


def check_serializer(name: str, fn: Any) -> Optional[Callable[[Any, str], Any]]:
    """A (de)serializer option: None, a callable ``f(data)``, or an object with ``serialize(topic, data)``
    / ``deserialize(topic, data)`` (kafka-python's Serializer/Deserializer classes); returned as
    ``f(data, topic)``."""
    if fn is None:
        return None
    method = "deserialize" if name.endswith("deserializer") else "serialize"
    bound = getattr(fn, method, None)
    if callable(bound):
        def call(data: Any, topic: str = "", _b: Any = bound) -> Any:
            try:
                return _b(topic, None, data)  # kafka-python >= 2.1: (topic, headers, data)
            except TypeError:
                return _b(topic, data)
        return call
    if not callable(fn):
        raise InvalidConfigurationError(f"{name} must be a callable f(data) or None, got {fn!r}")

    def call_one(data: Any, topic: str = "", _f: Callable[[Any], Any] = fn) -> Any:
        return _f(data)
    return call_one


def serialize(fn: Callable[..., Any], data: Any, what: str, topic: str) -> Optional[Union[bytes, bytearray, memoryview]]:
    """Run a producer serializer on a non-None ``data``; the result must be bytes-like."""
    try:
        out = fn(data, topic)
    except Exception as exc:  # noqa: BLE001 - the user's code; named and chained
        raise SerializationError(f"{what} raised {type(exc).__name__}: {exc} (topic {topic!r}, {what[:-11]} {data!r:.80})") from exc
    if out is not None and not isinstance(out, (bytes, bytearray, memoryview)):
        raise SerializationError(
            f"{what} returned {type(out).__name__}, not bytes (topic {topic!r}, {what[:-11]} {data!r:.80})")
    return out


__all__ = ["ConsumerRecord", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp", "as_tp", "as_tps", "as_commit_offset",
           "as_commit_offsets", "check_serializer", "serialize"]
