"""The options the ``pylog`` Spark source and sink accept, and the error for any other.

Spark passes every ``.option(k, v)`` through, and a silently ignored option
is a wrong answer (``startingOffset`` for ``startingOffsets`` would read
everything). So an option that is not in these lists is refused, naming the
closest known option and listing them all; an option of Spark's Kafka source
or sink that has no meaning for a log directory (``kafka.bootstrap.servers``
and the other ``kafka.*`` consumer and producer settings, ``groupIdPrefix``,
``kafkaConsumer.pollTimeoutMs``, ...) is refused with the reason.

No Spark import: usable and testable alone. Thread-safety: pure functions.
Complexity: O(options x known options) for the typo suggestion.
"""
from __future__ import annotations

import difflib
import re
from typing import Dict, Iterable, Mapping, Optional

from pylog.errors import InvalidConfigurationError

#: every option of ``spark.read.format("pylog")`` and ``spark.readStream.format("pylog")``
SOURCE_OPTIONS = (
    "path",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "failOnUnknownTopic",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "includeHeaders",
    "kafka.isolation.level",
    "isolation.level",
    "dataLossLog",
)

#: every option of ``df.write.format("pylog")`` and ``df.writeStream.format("pylog")``
SINK_OPTIONS = (
    "path",
    "topic",
    "numPartitions",
    "batchSize",
    "lockTimeoutMs",
    "includeHeaders",
    "checkpointLocation",
)

_NO_BROKER = "pylog reads and writes the log directory given as 'path'; there is no broker to connect to"
_NO_GROUP = "pylog's source uses no consumer group: a stream's progress lives in Spark's checkpoint"
_NO_FETCH = "pylog reads local segment files; there is no fetch to time out or retry"

#: Kafka source/sink options that do not apply, with the reason (lower-case keys)
NOT_APPLICABLE: Dict[str, str] = {
    "kafka.bootstrap.servers": _NO_BROKER + ": drop it (the directory is .option('path', dir) or .load(dir))",
    "kafka.group.id": _NO_GROUP,
    "groupidprefix": _NO_GROUP,
    "kafkaconsumer.polltimeoutms": _NO_FETCH,
    "fetchoffset.numretries": _NO_FETCH,
    "fetchoffset.retryintervalms": _NO_FETCH,
    "kafka.auto.offset.reset": "Spark's Kafka source refuses it too: use startingOffsets",
    "kafka.enable.auto.commit": "Spark's Kafka source refuses it too: progress lives in Spark's checkpoint",
    "kafka.key.deserializer": "keys are always returned as binary (cast them in SQL), as Spark's Kafka source does",
    "kafka.value.deserializer": "values are always returned as binary (cast them in SQL), as Spark's Kafka source does",
    "kafka.key.serializer": "the sink writes the binary or string 'key' column as it is",
    "kafka.value.serializer": "the sink writes the binary or string 'value' column as it is",
    "kafka.partitioner.class": "the sink uses Kafka's default partitioner (murmur2 of the key); set a 'partition' column to choose",
}


def _canonical(known: Iterable[str]) -> Dict[str, str]:
    return {k.lower(): k for k in known}


def check_options(options: Mapping[str, str], known: Iterable[str], where: str) -> None:
    """Raise :class:`InvalidConfigurationError` for an option outside ``known`` (case-insensitive).

    ``where`` names the reader or writer in the message ("the pylog source").
    """
    canon = _canonical(known)
    for key in options:
        low = key.lower()
        if low in canon:
            continue
        reason = NOT_APPLICABLE.get(low)
        if reason is None and re.match(r"^kafka\.", low):
            reason = (
                f"{_NO_BROKER}, so Kafka client settings do not apply (the one honoured is kafka.isolation.level)"
                if "isolation.level" in canon
                else f"{_NO_BROKER}, so Kafka producer settings do not apply"
            )
        if reason is not None:
            raise InvalidConfigurationError(f"option {key!r} does not apply to {where}: {reason}")
        guess: Optional[str] = None
        close = difflib.get_close_matches(low, list(canon), n=1, cutoff=0.75)
        if close:
            guess = canon[close[0]]
        hint = f" (did you mean {guess!r}?)" if guess else ""
        raise InvalidConfigurationError(
            f"unknown option {key!r} for {where}{hint}; known options: {', '.join(sorted(canon.values(), key=str.lower))}"
        )


_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1.0, "us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0, "h": 3_600_000.0,
            "d": 86_400_000.0}


def parse_duration_ms(value: str, what: str) -> int:
    """Spark's ``timeStringAsMs``: ``"15m"``, ``"30s"``, ``"500ms"``, ``"2h"``; a bare number is milliseconds."""
    m = _DURATION.match(str(value))
    if not m:
        raise InvalidConfigurationError(
            f"option {what!r} must be a duration such as '15m', '30s', '500ms' or a number of milliseconds, got {value!r}"
        )
    unit = m.group(2).lower() if m.group(2) else None
    return int(int(m.group(1)) * _UNIT_MS[unit])
