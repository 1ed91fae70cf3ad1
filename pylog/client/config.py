"""The clients' options: one validated, frozen dataclass per client, and the checks they share.

:class:`ConsumerConfig` and :class:`ProducerConfig` hold every keyword option of
:class:`~pylog.client.consumer.Consumer` and :class:`~pylog.client.producer.Producer`
(Kafka's names in snake_case, with their defaults) and check them all in
``__post_init__``, in one place: a bad option raises
:class:`~pylog.errors.InvalidConfigurationError` (or :class:`~pylog.errors.InvalidGroupIdError`
for ``group_id``) naming the option, before a client touches its cluster. Derived values
(the rebalance timeout, the assignors, the wrapped (de)serializers, the numeric ``acks``,
the codec id) are computed there too and kept as fields with ``init=False``.

>>> ConsumerConfig(group_id="billing", max_poll_interval_ms=1000).rebalance_timeout_ms
1000
>>> ProducerConfig(acks=1).enable_idempotence   # Kafka 3: on only with acks="all"
False

Owns: option names, defaults, validation and derived values. Not: any state of a running client.
Complexity: O(options). Durability: none (values in memory). Thread-safety: immutable once built.
"""
from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Pattern, Sequence, Tuple, Union

from pylog.client.assignors import Assignor, get_assignor
from pylog.client.types import check_serializer
from pylog.errors import InvalidConfigurationError, InvalidGroupIdError
from pylog.record import compression as codecs

logger = logging.getLogger(__name__)


def need_int(name: str, value: Any, low: int) -> None:
    """Raise InvalidConfigurationError naming ``name`` unless ``value`` is an int (not bool) >= ``low``.

    >>> need_int("linger_ms", 0, 0)
    >>> need_int("linger_ms", True, 0)
    Traceback (most recent call last):
    ...
    pylog.errors.InvalidConfigurationError: linger_ms must be an int >= 0, got True
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidConfigurationError(f"{name} must be an int >= {low}, got {value!r}")


def topic_list(topics: Any, what: str) -> List[str]:
    """``topics`` as a list of topic names: a single str is one topic; each name a non-empty str."""
    if isinstance(topics, str):
        topics = [topics] if topics else []
    if isinstance(topics, (bytes, bytearray, dict)) or not hasattr(topics, "__iter__"):
        raise InvalidConfigurationError(f"{what} must be a collection of topic names or one str, got {topics!r}")
    out = list(topics)
    for t in out:
        if not isinstance(t, str) or not t:
            raise InvalidConfigurationError(f"{what} must hold non-empty str topic names, got {t!r}")
    return out


_INSTANCE_ID_CHARS = re.compile(r"[a-zA-Z0-9._-]+")


def check_group_instance_id(value: Any, group_id: Optional[str]) -> None:
    """Kafka's ``JoinGroupRequest.validateGroupInstanceId`` (the topic-name rules: 1..249 chars of
    ``[a-zA-Z0-9._-]``, not ``.`` or ``..``), and a static member needs a group."""
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise InvalidConfigurationError(f"group_instance_id must be a non-empty str or None, got {value!r}")
    if len(value) > 249 or value in (".", "..") or not _INSTANCE_ID_CHARS.fullmatch(value):
        raise InvalidConfigurationError(
            f"group_instance_id {value!r} is not legal: 1..249 characters of [a-zA-Z0-9._-], not '.' or '..'")
    if group_id is None:
        raise InvalidConfigurationError(f"group_instance_id {value!r} needs a group_id (static membership of a group)")


def _option_names(cls: type) -> Tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def _split_unknown(cls: type, what: str, hint: str, options: Mapping[str, Any]) -> Dict[str, Any]:
    """``options`` minus unknown names; an unknown name raises, listing the known ones."""
    names = _option_names(cls)
    unknown = sorted(k for k in options if k not in names)
    if unknown:
        extra = hint if "bootstrap_servers" in unknown else ""
        raise InvalidConfigurationError(
            f"unknown {what} option(s) {unknown}{extra}; known options: {sorted(names)}")
    return dict(options)


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # a frozen dataclass fills its derived fields in __post_init__


@dataclass(frozen=True)
class ConsumerConfig:
    """Every option of :class:`~pylog.client.consumer.Consumer` (its docstring says what each does), checked.

    Derived: ``rebalance_timeout_ms`` (None given: ``max_poll_interval_ms``, as Kafka),
    ``partition_assignment_strategy`` (a tuple; one str is one assignor), ``topics`` (a tuple),
    ``assignors`` and the wrapped ``key_deserializer_fn``/``value_deserializer_fn`` (``f(data, topic)``).
    """

    group_id: Optional[str] = None
    topics: Sequence[str] = ()
    pattern: Union[None, str, Pattern[str]] = None
    client_id: Optional[str] = None
    auto_offset_reset: str = "earliest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    isolation_level: str = "read_uncommitted"
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: Optional[int] = None
    max_poll_interval_ms: int = 300_000
    rebalance_listener: Any = None
    partition_assignment_strategy: Sequence[str] = ("range", "roundrobin")
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1 << 20
    request_timeout_ms: int = 30_000
    max_poll_records: int = 500
    retry_backoff_ms: int = 100
    consumer_timeout_ms: Optional[float] = None
    group_instance_id: Optional[str] = None
    key_deserializer: Optional[Callable[[bytes], Any]] = None
    value_deserializer: Optional[Callable[[bytes], Any]] = None
    # ---- derived in __post_init__
    assignors: Tuple[Assignor, ...] = field(init=False, repr=False, compare=False, default=())
    key_deserializer_fn: Optional[Callable[[Any, str], Any]] = field(init=False, repr=False, compare=False,
                                                                     default=None)
    value_deserializer_fn: Optional[Callable[[Any, str], Any]] = field(init=False, repr=False, compare=False,
                                                                       default=None)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "ConsumerConfig":
        """The config for ``Consumer(cluster, **options)``: an unknown name raises, listing the known ones."""
        return cls(**_split_unknown(cls, "consumer", " (bootstrap_servers: an in-process consumer reads its "
                                    "cluster directly; drop it)", options))

    def __post_init__(self) -> None:
        # The order of the checks is the order Consumer.__init__ always had (the first bad option is named).
        _set(self, "key_deserializer_fn", check_serializer("key_deserializer", self.key_deserializer))
        _set(self, "value_deserializer_fn", check_serializer("value_deserializer", self.value_deserializer))
        _set(self, "topics", tuple(topic_list(self.topics, "topics")))
        pattern, client_id = self.pattern, self.client_id
        if pattern is not None and not isinstance(pattern, (str, re.Pattern)):
            raise InvalidConfigurationError(f"pattern must be a str or compiled regex, got {pattern!r}")
        if client_id is not None and not isinstance(client_id, str):
            raise InvalidConfigurationError(f"client_id must be a str or None, got {client_id!r}")
        if not isinstance(self.enable_auto_commit, bool):
            raise InvalidConfigurationError(f"enable_auto_commit must be a bool, got {self.enable_auto_commit!r}")
        need_int("max_poll_interval_ms", self.max_poll_interval_ms, 1)
        if self.rebalance_timeout_ms is None:
            _set(self, "rebalance_timeout_ms", self.max_poll_interval_ms)  # Kafka: max.poll.interval.ms is the rebalance timeout
        for name, low in (("auto_commit_interval_ms", 0), ("session_timeout_ms", 1), ("heartbeat_interval_ms", 1),
                          ("rebalance_timeout_ms", 1), ("fetch_max_wait_ms", 0), ("max_partition_fetch_bytes", 1),
                          ("request_timeout_ms", 1), ("retry_backoff_ms", 0)):
            need_int(name, getattr(self, name), low)
        timeout = self.consumer_timeout_ms
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise InvalidConfigurationError(
                f"consumer_timeout_ms must be a non-negative number or None, got {timeout!r}")
        if isinstance(self.partition_assignment_strategy, str):
            _set(self, "partition_assignment_strategy", (self.partition_assignment_strategy,))
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise InvalidConfigurationError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {self.auto_offset_reset!r}")
        if self.isolation_level not in ("read_uncommitted", "read_committed"):
            raise InvalidConfigurationError(
                f"isolation_level must be 'read_uncommitted' or 'read_committed', got {self.isolation_level!r}")
        need_int("max_poll_records", self.max_poll_records, 1)
        group_id = self.group_id
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise InvalidGroupIdError(f"group_id must be a non-empty str or None, got {group_id!r}")
        check_group_instance_id(self.group_instance_id, group_id)
        assignors = tuple(get_assignor(n) for n in self.partition_assignment_strategy)
        if not assignors:
            raise InvalidConfigurationError("partition_assignment_strategy needs at least one assignor")
        _set(self, "assignors", assignors)
        if isinstance(self.partition_assignment_strategy, list):
            _set(self, "partition_assignment_strategy", tuple(self.partition_assignment_strategy))


#: ``acks`` as given -> as sent (-1 is "all")
ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}


@dataclass(frozen=True)
class ProducerConfig:
    """Every option of :class:`~pylog.client.producer.Producer` (its docstring says what each does), checked.

    Derived: ``acks_value`` (0, 1 or -1), ``enable_idempotence`` (None given: True with acks "all" and
    ``max_in_flight`` <= 5, as Kafka 3; ``idempotence`` is its older name; always True with a
    ``transactional_id``, which refuses ``enable_idempotence=False``, acks other than "all" and
    ``max_in_flight`` > 5, as Kafka), ``compression`` (the codec id),
    ``compression_level`` (checked for the codec), the wrapped ``key_serializer_fn``/``value_serializer_fn``.
    """

    acks: Any = "all"
    batch_size: int = 16384
    linger_ms: int = 0
    compression_type: Optional[str] = None
    max_in_flight: int = 5
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    enable_idempotence: Optional[bool] = None
    idempotence: Optional[bool] = None
    transactional_id: Optional[str] = None
    transaction_timeout_ms: int = 60_000
    retries: int = 2**31 - 1
    buffer_memory: int = 33_554_432
    max_block_ms: int = 60_000
    key_serializer: Any = None
    value_serializer: Any = None
    compression_level: Optional[int] = None
    # ---- derived in __post_init__
    acks_value: int = field(init=False, compare=False, default=-1)
    compression: int = field(init=False, compare=False, default=0)
    key_serializer_fn: Optional[Callable[[Any, str], Any]] = field(init=False, repr=False, compare=False, default=None)
    value_serializer_fn: Optional[Callable[[Any, str], Any]] = field(init=False, repr=False, compare=False,
                                                                     default=None)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "ProducerConfig":
        """The config for ``Producer(cluster, **options)``: an unknown name raises, listing the known ones."""
        return cls(**_split_unknown(cls, "producer", " (bootstrap_servers: an in-process producer writes to its "
                                    "cluster directly; drop it)", options))

    def __post_init__(self) -> None:
        # The order of the checks is the order Producer.__init__ always had (the first bad option is named).
        _set(self, "key_serializer_fn", check_serializer("key_serializer", self.key_serializer))
        _set(self, "value_serializer_fn", check_serializer("value_serializer", self.value_serializer))
        acks = self.acks
        if isinstance(acks, bool) or not isinstance(acks, (int, str)) or acks not in ACKS:
            raise InvalidConfigurationError(f"acks must be 0, 1 or 'all', got {acks!r}")
        tid = self.transactional_id
        if tid is not None and (not isinstance(tid, str) or not tid):
            raise InvalidConfigurationError(f"transactional_id must be a non-empty str or None, got {tid!r}")
        for name, low in (("batch_size", 1), ("linger_ms", 0), ("max_in_flight", 1), ("retry_backoff_ms", 0),
                          ("request_timeout_ms", 1), ("delivery_timeout_ms", 1), ("retries", 0),
                          ("buffer_memory", 1), ("max_block_ms", 0), ("transaction_timeout_ms", 1)):
            need_int(name, getattr(self, name), low)
        if self.batch_size > self.buffer_memory:
            raise InvalidConfigurationError(
                f"batch_size ({self.batch_size}) must not exceed buffer_memory ({self.buffer_memory}): "
                "every batch holds batch_size bytes of the buffer")
        for name in ("enable_idempotence", "idempotence"):
            flag = getattr(self, name)
            if flag is not None and not isinstance(flag, bool):
                raise InvalidConfigurationError(f"{name} must be a bool or None, got {flag!r}")
        _set(self, "acks_value", ACKS[acks])
        enable = self.enable_idempotence
        if self.idempotence is not None and enable is None:
            enable = self.idempotence
        if tid is not None:
            # Kafka: a transactional producer is idempotent ("Cannot set a transactional.id without also
            # enabling idempotence"), so acks=all and at most 5 requests in flight per partition.
            if enable is False:
                raise InvalidConfigurationError(
                    f"transactional_id {tid!r} needs enable_idempotence (a transactional producer is idempotent)")
            enable = True
        if enable is None:
            enable = self.acks_value == -1 and self.max_in_flight <= 5
        elif enable:
            what = "enable_idempotence" if tid is None else f"transactional_id {tid!r} (idempotent)"
            if self.acks_value != -1:
                raise InvalidConfigurationError(f"{what} needs acks='all', got acks={acks!r}")
            if self.max_in_flight > 5:
                raise InvalidConfigurationError(f"{what} needs max_in_flight <= 5, got {self.max_in_flight}")
        _set(self, "enable_idempotence", bool(enable))
        try:
            _set(self, "compression", codecs.codec_id(self.compression_type))
        except InvalidConfigurationError as exc:
            raise InvalidConfigurationError(f"compression_type: {exc}") from None
        _set(self, "compression_level", codecs.check_level(self.compression, self.compression_level))


#: the keyword options each client takes (listed when an unknown one is passed)
CONSUMER_OPTIONS = _option_names(ConsumerConfig)
PRODUCER_OPTIONS = _option_names(ProducerConfig)

__all__ = ["ConsumerConfig", "ProducerConfig", "CONSUMER_OPTIONS", "PRODUCER_OPTIONS", "need_int", "topic_list",
           "check_group_instance_id"]
