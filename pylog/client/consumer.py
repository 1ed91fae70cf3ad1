"""The consumer: subscribe or assign, poll, seek, commit; consumer groups with a coordinator.

>>> # consumer = cluster.consumer(group_id="billing", topics=["orders"])
>>> # for record in consumer.poll(timeout=1.0): ...; consumer.commit()

* **Subscribe** (``subscribe(topics)`` or ``subscribe(pattern=...)``) with a
  ``group_id``: the consumer joins the group through its coordinator (the
  broker leading the group's ``__consumer_offsets`` partition), the leader
  member runs the assignor (``range``, ``roundrobin``, ``sticky`` or
  ``cooperative-sticky``) and every member fetches only its share. Rebalances
  are *eager* by default: when one starts, every member commits (with
  auto-commit) and gives up all its partitions, then rejoins. With only
  ``cooperative-sticky`` they are *cooperative* (KIP-429): members keep
  reading their partitions during a rebalance and give up only those that
  move, which their new owner gets one generation later. A member that does
  not ``poll`` within ``max_poll_interval_ms`` (counted from its first
  ``poll``) leaves the group until its next ``poll``. A fenced member (its
  heartbeat or commit answered ``UnknownMemberIdError`` /
  ``IllegalGenerationError``) drops its partitions at once
  (``on_partitions_lost``) and rejoins. Without a ``group_id`` a subscription simply reads every partition
  of the matching topics.
* **Static membership** (KIP-345, ``group_instance_id``): the member keeps its
  slot across restarts; see :class:`Consumer` and docs/consumer-groups.md.
* **Assign** (``assign([(topic, partition), ...])``): no group membership; a
  ``group_id`` is still used to look up and commit offsets (with generation
  -1, as Kafka's standalone consumers do).
* **Positions**: a newly assigned partition starts at the group's committed
  offset, else per ``auto_offset_reset`` (``"earliest"`` - pylog's default,
  since a local queue should not skip what is already there -, ``"latest"``,
  or ``"none"``: :class:`NoOffsetForPartitionError` from ``poll``).
* **poll(timeout)** returns records already fetched, or blocks until a fetch
  brings some: the broker parks an empty fetch until a record is appended (or
  ``fetch_max_wait_ms`` passes), and the response wakes the waiting thread
  through an event; there is no polling loop. In a simulated cluster it runs
  virtual time instead.
* **Commits**: ``commit()`` blocks until the coordinator has written the
  offsets to ``__consumer_offsets`` with acks=all; ``commit_async(callback)``
  does not block (the callback runs in a later ``poll``/``commit``/``close`` on
  the caller's thread). With ``enable_auto_commit`` the positions of the
  records returned by earlier polls are committed every
  ``auto_commit_interval_ms`` from ``poll``, before a rebalance and on close.
  Committing after processing gives *at-least-once* delivery; committing
  before processing *at-most-once* (docs/consumer-groups.md).
* ``isolation_level``: ``"read_uncommitted"`` or ``"read_committed"``. pylog has
  no transactions yet, so both read exactly the records below the high
  watermark.

Every record returned has an offset below the HW the leader reported with it
(:meth:`Consumer._check`).

Durability: what survives a consumer crash is what was committed.
Thread-safety: one consumer per thread (as Kafka's); the state lives on the
cluster's scheduler thread and calls are marshalled there, except that a
real-time ``poll`` takes already-buffered records on the caller's thread
under the consumer's buffer lock (one loop round trip less per poll).
"""
from __future__ import annotations

import inspect
import itertools
import re
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, NamedTuple, Optional, Pattern, Sequence, Set, Tuple, Union

from pylog.client._node import ClientFuture, ClientNode
from pylog.client.assignors import COOPERATIVE, get_assignor, rebalance_protocol
from pylog.client.assignors import decode_subscription as decode_member_subscription
from pylog.client.assignors import encode_subscription as encode_member_subscription
from pylog.errors import (
    CommitFailedError,
    CoordinatorNotAvailableError,
    CorruptRecordError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidConfigurationError,
    InvalidGroupIdError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    PylogError,
    RebalanceInProgressError,
    RequestTimedOutError,
    SerializationError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from pylog.client.fetch_decoder import FetchDecoder
from pylog.client.types import (
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
    as_commit_offsets,
    as_tp,
    as_tps,
    check_serializer,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.messages import NO_LEADER, FetchRequest
from pylog.record import CREATE_TIME

TP = Tuple[str, int]
#: orders ownership changes of every consumer of the process (tests check no partition has two owners at once)
_OWNERSHIP_SEQ = itertools.count()


class ConsumerRecord(NamedTuple):
    """One record as :meth:`Consumer.poll` returns it (Kafka's ConsumerRecord)."""

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


def _need_int(name: str, value: Any, low: int) -> None:
    """Raise InvalidConfigurationError naming ``name`` unless ``value`` is an int (not bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidConfigurationError(f"{name} must be an int >= {low}, got {value!r}")


def _topic_list(topics: Any, what: str) -> List[str]:
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


def _check_group_instance_id(value: Any, group_id: Optional[str]) -> None:
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


_RETRIABLE_GROUP_ERRORS = ("NotCoordinatorError", "CoordinatorNotAvailableError", "CoordinatorLoadInProgressError",
                           "RequestTimedOutError", "NotEnoughReplicasError")


class Consumer:
    """Reads records below the HW from partition leaders; optionally a member of a consumer group.

    See the module docstring for the behaviour. Kafka's configuration names,
    in snake_case: ``group_id``, ``client_id``, ``auto_offset_reset``,
    ``enable_auto_commit``, ``auto_commit_interval_ms``, ``isolation_level``,
    ``session_timeout_ms``, ``heartbeat_interval_ms``, ``max_poll_interval_ms``
    (a member that does not call ``poll`` within it, once it has called ``poll``,
    leaves the group; it is also the JoinGroup rebalance timeout, as in Kafka), ``rebalance_timeout_ms`` (None:
    ``max_poll_interval_ms``), ``partition_assignment_strategy`` (``"range"``,
    ``"roundrobin"``, ``"sticky"``, ``"cooperative-sticky"``; the consumer rebalances
    cooperatively when every listed assignor supports it), ``rebalance_listener``
    (an object with any of ``on_partitions_revoked``, ``on_partitions_assigned``,
    ``on_partitions_lost``, called with lists of (topic, partition) on the
    caller's thread at the next ``poll``/``commit``/``close``),
    ``fetch_max_wait_ms``, ``max_partition_fetch_bytes``, ``max_poll_records``,
    ``request_timeout_ms``, ``retry_backoff_ms``, ``consumer_timeout_ms``
    (iteration stops after this long without a record; None: never),
    ``group_instance_id`` (KIP-345 static membership: 1..249 chars of
    ``[a-zA-Z0-9._-]``, needs a ``group_id``; a consumer restarted with the same
    id within ``session_timeout_ms`` takes its old partitions back without a
    rebalance, ``close`` sends no LeaveGroup, and a consumer whose id is taken
    over by a newer one gets :class:`FencedInstanceIdError` from ``poll`` and
    ``commit`` for good), ``key_deserializer``/``value_deserializer`` (callables
    ``f(bytes)``, or kafka-python Deserializer objects, applied to the records
    ``poll`` returns; a null key or value stays None).

    Kafka's idioms (docs/kafka-python-idioms.md): wherever a partition is taken,
    a :class:`TopicPartition` (pylog's or kafka-python's) or ``(topic, partition)``;
    ``offsets_for_times``, ``beginning_offsets``, ``end_offsets``, ``pause``,
    ``resume``, ``paused``, ``poll(timeout_ms=...)``.

    ``topics`` is a collection of topic names; a single ``str`` is taken as
    one topic (``topics="big"`` subscribes to ``big``, never to ``b``, ``i``,
    ``g``). Bad arguments raise :class:`InvalidConfigurationError` naming the
    parameter: an unknown keyword (listing the known ones), a wrong type
    (``bool`` is not an int) or an out-of-range value.

    Complexity: ``poll`` costs O(records returned) plus one columnar decode per
    fetched batch.
    """

    def __init__(self, cluster: Any, *, group_id: Optional[str] = None, topics: Sequence[str] = (),
                 pattern: Union[None, str, Pattern[str]] = None, client_id: Optional[str] = None,
                 auto_offset_reset: str = "earliest", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5_000, isolation_level: str = "read_uncommitted",
                 session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 3_000,
                 rebalance_timeout_ms: Optional[int] = None, max_poll_interval_ms: int = 300_000,
                 rebalance_listener: Any = None,
                 partition_assignment_strategy: Sequence[str] = ("range", "roundrobin"),
                 fetch_max_wait_ms: int = 500, max_partition_fetch_bytes: int = 1 << 20,
                 request_timeout_ms: int = 30_000, max_poll_records: int = 500, retry_backoff_ms: int = 100,
                 consumer_timeout_ms: Optional[float] = None, group_instance_id: Optional[str] = None,
                 key_deserializer: Optional[Callable[[bytes], Any]] = None,
                 value_deserializer: Optional[Callable[[bytes], Any]] = None,
                 **unknown: Any):
        if unknown:
            hint = (" (bootstrap_servers: an in-process consumer reads its cluster directly; drop it)"
                    if "bootstrap_servers" in unknown else "")
            raise InvalidConfigurationError(
                f"unknown consumer option(s) {sorted(unknown)}{hint}; known options: {sorted(_CONSUMER_OPTIONS)}")
        self._key_deserializer = check_serializer("key_deserializer", key_deserializer)
        self._value_deserializer = check_serializer("value_deserializer", value_deserializer)
        #: partitions paused by pause(): not fetched, nothing returned for them until resume()
        self._paused: Set[TP] = set()
        topics = _topic_list(topics, "topics")
        if pattern is not None and not isinstance(pattern, (str, re.Pattern)):
            raise InvalidConfigurationError(f"pattern must be a str or compiled regex, got {pattern!r}")
        if client_id is not None and not isinstance(client_id, str):
            raise InvalidConfigurationError(f"client_id must be a str or None, got {client_id!r}")
        if not isinstance(enable_auto_commit, bool):
            raise InvalidConfigurationError(f"enable_auto_commit must be a bool, got {enable_auto_commit!r}")
        _need_int("max_poll_interval_ms", max_poll_interval_ms, 1)
        if rebalance_timeout_ms is None:
            rebalance_timeout_ms = max_poll_interval_ms  # Kafka: max.poll.interval.ms is the rebalance timeout
        for name, value, low in (("auto_commit_interval_ms", auto_commit_interval_ms, 0),
                                 ("session_timeout_ms", session_timeout_ms, 1),
                                 ("heartbeat_interval_ms", heartbeat_interval_ms, 1),
                                 ("rebalance_timeout_ms", rebalance_timeout_ms, 1),
                                 ("fetch_max_wait_ms", fetch_max_wait_ms, 0),
                                 ("max_partition_fetch_bytes", max_partition_fetch_bytes, 1),
                                 ("request_timeout_ms", request_timeout_ms, 1),
                                 ("retry_backoff_ms", retry_backoff_ms, 0)):
            _need_int(name, value, low)
        if consumer_timeout_ms is not None and (
                isinstance(consumer_timeout_ms, bool) or not isinstance(consumer_timeout_ms, (int, float))
                or not consumer_timeout_ms >= 0):
            raise InvalidConfigurationError(
                f"consumer_timeout_ms must be a non-negative number or None, got {consumer_timeout_ms!r}")
        if isinstance(partition_assignment_strategy, str):
            partition_assignment_strategy = (partition_assignment_strategy,)
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise InvalidConfigurationError(f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {auto_offset_reset!r}")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise InvalidConfigurationError(f"isolation_level must be 'read_uncommitted' or 'read_committed', got {isolation_level!r}")
        _need_int("max_poll_records", max_poll_records, 1)
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise InvalidGroupIdError(f"group_id must be a non-empty str or None, got {group_id!r}")
        _check_group_instance_id(group_instance_id, group_id)
        self._assignors = [get_assignor(n) for n in partition_assignment_strategy]
        if not self._assignors:
            raise InvalidConfigurationError("partition_assignment_strategy needs at least one assignor")
        #: KIP-429: keep partitions across a rebalance, give up only those that move
        self._cooperative = rebalance_protocol(self._assignors) == COOPERATIVE
        self.cluster = cluster
        self.store = cluster.store
        self.scheduler = cluster.scheduler
        self.group_id = group_id
        #: KIP-345 static membership (None: a dynamic member)
        self.group_instance_id = group_instance_id
        #: set once a newer member with the same group_instance_id fenced this one: poll/commit raise it
        self._fenced: Optional[FencedInstanceIdError] = None
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.isolation_level = isolation_level
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self._listener = rebalance_listener
        self._listener_calls: Deque[Tuple[str, List[TP]]] = deque()
        #: (sequence, time ms, (topic, partition), owned after) for the last 10,000 changes of ownership
        #: (tests check that no partition has two owners at once); sequence numbers order all consumers
        self.ownership_log: Deque[Tuple[int, int, TP, bool]] = deque(maxlen=10_000)
        #: positions at the moment a poll timeout made this member leave; None while polling in time
        self._poll_expired: Optional[Dict[TP, int]] = None
        self._expired_detail = ""
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.request_timeout_ms = request_timeout_ms
        self.max_poll_records = max_poll_records
        self.retry_backoff_ms = retry_backoff_ms
        self.consumer_timeout_ms = consumer_timeout_ms
        # ---- subscription and assignment (loop thread)
        self._topics: Optional[List[str]] = None
        self._pattern: Optional[Pattern[str]] = None
        self._manual = False
        self._assignment: List[TP] = []
        self._positions: Dict[TP, int] = {}  # next offset to return
        self._fetch_pos: Dict[TP, int] = {}  # next offset to fetch
        self._token: Dict[TP, int] = {}  # bumped on seek/revoke: older fetch responses are ignored
        self._hw: Dict[TP, int] = {}
        self._resetting: Set[TP] = set()
        self._inflight: Set[TP] = set()
        self._buffer: Deque[List[Any]] = deque()  # [tp, records, next index]
        self._buffered: Dict[TP, int] = {}
        self._error: Optional[BaseException] = None
        self._no_offset: Set[TP] = set()  # auto_offset_reset="none" found no committed offset (until a seek)
        # ---- group membership (loop thread)
        self.client_id = client_id or "pylog-consumer"
        self.member_id = gm.NO_MEMBER
        self.generation = gm.NO_GENERATION
        self._coordinator: Optional[int] = None
        self._finding = False
        self._state = "unjoined"  # unjoined | joining | syncing | stable
        self._rejoin = False
        self._joined_topics: Tuple[str, ...] = ()
        self._joined_counts: Dict[str, int] = {}
        self._last_heartbeat = 0
        self._hb_inflight = False
        self._next_attempt = 0
        self._tick_timer: Any = None
        #: (partitions, generation) of the last SyncGroup answer: the eager sticky assignor's user data
        self._last_assignment: Optional[Tuple[List[Tuple[str, int]], int]] = None
        #: (generation, member_id, assignment) after every completed rebalance (tests check ownership)
        self.assignment_history: List[Tuple[int, str, Tuple[TP, ...]]] = []
        # ---- commits
        self._commit_callbacks: Deque[Tuple[Callable[..., Any], Dict[TP, int], Optional[BaseException]]] = deque()
        # Commit ordering (docs/consumer-groups.md, "Commit order"): every commit issued gets the next number;
        # per partition, the number of the newest commit issued for it. A commit is never sent again once a
        # newer one of any of its partitions was issued: arriving after it, it would move the offset back.
        self._commit_seq = 0
        self._commit_issued: Dict[TP, int] = {}
        self._next_auto_commit = 0
        # ---- metrics and checks
        self.records_consumed = 0
        self.bytes_consumed = 0
        self.fetch_requests = 0
        self.rebalances = 0
        from pylog.metrics import Histogram

        #: seconds from a fetch request to its response (includes the broker's fetch_max_wait_ms long poll)
        self.fetch_latency = Histogram()
        self._client_id_given = client_id is not None
        self.violations: List[Tuple[TP, int, int]] = []
        self._decoder = FetchDecoder(ConsumerRecord)  # loop thread only
        #: partitions whose fetched data was corrupt: not fetched again, and poll() raises the
        #: error (once their good records are handed out) until seek() moves past it
        self._corrupt: Dict[TP, CorruptRecordError] = {}
        #: guards _buffer, _buffered and _positions: the loop fills the buffer, a real-time
        #: poll() takes from it on the caller's thread
        self._lock = threading.RLock()
        self._wake = threading.Event()  # set when records are buffered (or an error waits): poll()
        self._changed = threading.Event()  # set when a position is resolved (or an error waits): position()
        self._closed = False
        self._node: ClientNode = self.scheduler.run_sync(
            lambda: ClientNode("consumer", self.scheduler, cluster.transport))
        self._node.on_close.append(self._on_node_closed)
        self.scheduler.run_sync(self._start_tick)
        self._next_auto_commit = self._now() + auto_commit_interval_ms
        #: when poll() was last called; None before the first poll, whose time alone starts the poll timer
        #: (pylog joins at construction; Kafka's consumer joins inside its first poll and resets the timer
        #: when the join completes, so an application that builds consumers long before polling keeps them)
        self._last_poll_ms: Optional[int] = None
        if topics or pattern is not None:
            self.subscribe(topics or None, pattern=pattern)

    # ================================================================ helpers
    def _now(self) -> int:
        return self.scheduler.clock.now_ms()

    def _start_tick(self) -> None:
        self._tick_timer = self.scheduler.call_later(min(100, self.heartbeat_interval_ms), self._tick)

    def _on_node_closed(self) -> None:
        self._closed = True
        self._note_ownership(self._assignment, ())
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        self._wake.set()
        self._changed.set()

    def _signal(self) -> None:
        self._wake.set()
        self._changed.set()

    def _call(self, fn: Callable[[], Any]) -> Any:
        if self._closed:
            from pylog.errors import BrokerNotAvailableError

            raise BrokerNotAvailableError("the consumer is closed")
        return self.scheduler.run_sync(fn)

    def _matched_topics(self) -> List[str]:
        if self._pattern is not None:
            return sorted(t for t in self.store.topics if self._pattern.fullmatch(t) and not t.startswith("__"))
        return sorted(self._topics or [])

    def _partition_counts(self, topics: Sequence[str]) -> Dict[str, int]:
        return {t: self.store.topics[t].partitions for t in topics if t in self.store.topics}

    # ========================================================== subscription
    def subscribe(self, topics: Optional[Sequence[str]] = None, *, pattern: Union[None, str, Pattern[str]] = None,
                  listener: Any = None) -> None:
        """Subscribe to ``topics`` (a list; a single ``str`` is one topic name) or to every topic matching ``pattern`` (a regex, full match).

        With a ``group_id`` the consumer joins (or rejoins) its group; without one it
        reads every partition of the matching topics. Replaces any earlier
        subscription or assignment; a cooperative-sticky member (KIP-429) keeps
        reading the partitions of topics it still subscribes to and gives up only
        the others (the listener hears just those). ``listener`` (kafka-python's
        ConsumerRebalanceListener: ``on_partitions_revoked``, ``on_partitions_assigned``,
        and ``on_partitions_lost``) replaces ``rebalance_listener``.
        """
        if listener is not None:
            self._listener = listener
        if isinstance(topics, re.Pattern) and pattern is None:
            topics, pattern = None, topics  # subscribe(re.compile(...))
        if topics is not None:
            topics = _topic_list(topics, "subscribe() topics")
        if (topics is None) == (pattern is None):
            raise InvalidConfigurationError("subscribe() needs either a list of topics or pattern=...")
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern

        def run() -> None:
            if self._cooperative and self.group_id is not None and not self._manual:
                # KIP-429: a cooperative member keeps (and keeps reading) the partitions of topics it
                # still subscribes to, gives up only the others, and rejoins with the rest as owned.
                self._topics = list(topics) if topics is not None else None
                self._pattern = compiled
                matched = set(self._matched_topics())
                gone = [tp for tp in self._assignment if tp[0] not in matched]
                if gone:
                    self._give_up(gone)
                self._rejoin = True
                self._coordinate()
                return
            self._revoke_all("revoked")
            self._manual = False
            self._topics = list(topics) if topics is not None else None
            self._pattern = compiled
            if self.group_id is None:
                self._set_assignment([(t, p) for t, n in self._partition_counts(self._matched_topics()).items()
                                      for p in range(n)])
            else:
                self._rejoin = True
                self._coordinate()

        self._call(run)

    def assign(self, partitions: Sequence[TP]) -> None:
        """Read exactly ``partitions`` (no group membership); replaces any subscription.

        ``partitions``: TopicPartitions (pylog's or kafka-python's) or ``(topic, partition)`` pairs.
        """
        parts = [(tp.topic, tp.partition) for tp in as_tps(partitions, "assign() partitions")]

        def run() -> None:
            if self._state != "unjoined" and self.member_id:
                self._leave_group()
            self._revoke_all("revoked")
            self._topics, self._pattern, self._manual = None, None, True
            self._set_assignment(parts)

        self._call(run)

    def unsubscribe(self) -> None:
        def run() -> None:
            if self.member_id:
                self._leave_group()
            self._revoke_all("revoked")
            self._topics, self._pattern, self._manual = None, None, False

        self._call(run)

    def subscription(self) -> Set[str]:
        return set(self._call(self._matched_topics)) if not self._manual else set()

    def assignment(self) -> List[TopicPartition]:
        """The partitions this consumer currently reads (sorted TopicPartitions, equal to ``(topic, partition)``)."""
        return sorted(TopicPartition(*tp) for tp in self._call(lambda: list(self._assignment)))

    # ---------------------------------------------------------- assignment
    def _note_ownership(self, before: Sequence[TP], after: Sequence[TP]) -> None:
        now, b, a = self._now(), set(before), set(after)
        self._paused -= b - a  # a partition given up is no longer paused (Kafka drops its state)
        for tp in sorted(b - a):
            self.ownership_log.append((next(_OWNERSHIP_SEQ), now, tp, False))
        for tp in sorted(a - b):
            self.ownership_log.append((next(_OWNERSHIP_SEQ), now, tp, True))

    def _tell_listener(self, what: str, parts: Sequence[TP]) -> None:
        """Queue ``on_partitions_<what>(parts)`` for the caller's thread (run in poll/commit/close)."""
        if self._listener is not None and (parts or what == "assigned"):
            self._listener_calls.append((what, sorted(parts)))

    def _give_up(self, parts: List[TP]) -> None:
        """Hand ``parts`` back in an orderly way: auto-commit their positions (when enabled), tell
        the listener they are revoked, then stop fetching them."""
        if self.enable_auto_commit:
            self._commit_internal({tp: self._positions[tp] for tp in parts if tp in self._positions}, None, auto=True)
        self._tell_listener("revoked", parts)
        self._revoke(parts)

    def _revoke(self, parts: Sequence[TP]) -> None:
        """Stop reading ``parts`` (cooperative: only what moves to another member); keep the rest."""
        gone = set(parts)
        if not gone:
            return
        for tp in gone:
            self._token[tp] = self._token.get(tp, 0) + 1
            self._fetch_pos.pop(tp, None)
            self._resetting.discard(tp)
        keep = [tp for tp in self._assignment if tp not in gone]
        self._note_ownership(self._assignment, keep)
        self._assignment = keep
        with self._lock:
            for tp in gone:
                self._positions.pop(tp, None)
                self._drop_buffered(tp)

    def _revoke_all(self, why: Optional[str] = None) -> None:
        """Give up every partition; ``why`` ("revoked" or "lost") tells the rebalance listener."""
        if why is not None:
            self._tell_listener(why, self._assignment)
        for tp in self._assignment:
            self._token[tp] = self._token.get(tp, 0) + 1
        self._note_ownership(self._assignment, ())
        self._assignment = []
        self._positions.clear()
        self._fetch_pos.clear()
        self._resetting.clear()
        with self._lock:
            self._buffer.clear()
            self._buffered.clear()

    def _set_assignment(self, parts: Sequence[TP]) -> None:
        """Take ``parts``; positions come from committed offsets (with a group) or the reset policy."""
        new = list(dict.fromkeys(parts))
        self._note_ownership(self._assignment, new)
        self._assignment = new
        for tp in [tp for tp in self._corrupt if tp not in new]:
            del self._corrupt[tp]
        todo = [tp for tp in self._assignment if tp not in self._positions]
        if not todo:
            return
        self._resetting.update(todo)
        if self.group_id is None:
            for tp in todo:
                self._reset_offset(tp, self.auto_offset_reset)
            return
        self._fetch_committed(todo, self._on_committed_for_positions)

    def _on_committed_for_positions(self, result: Optional[Dict[TP, Optional[OffsetAndMetadata]]],
                                    error: Optional[BaseException]) -> None:
        if error is not None or result is None:
            # retry later (the tick resolves partitions still resetting)
            self._next_attempt = self._now() + self.retry_backoff_ms
            return
        for tp, om in result.items():
            if tp not in self._resetting or tp not in self._assignment:
                continue
            if om is not None and om.offset >= 0:
                self._set_position(tp, om.offset)
            else:
                self._reset_offset(tp, self.auto_offset_reset)
        self._send_fetches()

    def _set_position(self, tp: TP, offset: int) -> None:
        self._resetting.discard(tp)
        self._no_offset.discard(tp)
        self._corrupt.pop(tp, None)
        self._token[tp] = self._token.get(tp, 0) + 1
        with self._lock:
            self._positions[tp] = offset
            self._drop_buffered(tp)
        self._fetch_pos[tp] = offset
        self._changed.set()

    def _drop_buffered(self, tp: TP) -> None:
        with self._lock:
            if self._buffered.pop(tp, 0):
                self._buffer = deque(c for c in self._buffer if c[0] != tp)

    def _reset_offset(self, tp: TP, policy: str) -> None:
        """Resolve ``tp``'s position by ``policy``: ask the leader for its earliest or latest offset."""
        if policy == "none":
            self._resetting.discard(tp)
            self._no_offset.add(tp)
            self._error = NoOffsetForPartitionError(
                f"no committed offset for {tp[0]}-{tp[1]} (group {self.group_id!r}) and auto_offset_reset='none'")
            self._signal()
            return
        self._resetting.add(tp)
        st = self.store.partitions.get(tp)
        if st is None or st.leader == NO_LEADER:
            return  # the tick retries
        ts = gm.EARLIEST_TIMESTAMP if policy == "earliest" else gm.LATEST_TIMESTAMP
        token = self._token.get(tp, 0)
        req = gm.ListOffsetsRequest(tp[0], tp[1], ts, self._node.next_corr(),
                                    isolation_level=1 if self.isolation_level == "read_committed" else 0)

        def done(resp: Any) -> None:
            if self._token.get(tp, 0) != token or tp not in self._resetting:
                return
            if resp is None or resp.error is not None:
                return  # the tick retries
            self._set_position(tp, resp.offset)
            self._send_fetches()

        self._node.request(st.leader, req, self.request_timeout_ms, done)

    # ================================================================= seek
    def _need_assigned(self, tp: TP) -> None:
        if tp not in self._assignment:
            raise UnknownTopicOrPartitionError(
                f"{tp[0]}-{tp[1]} is not assigned to this consumer (assigned: {sorted(self._assignment)})")

    def seek(self, topic: Any = None, partition: Any = None, offset: Any = None) -> None:
        """The next poll returns the partition's records from ``offset``.

        ``seek(topic, partition, offset)``, or Kafka's ``seek(TopicPartition, offset)``
        (also ``seek(partition=tp, offset=o)``, kafka-python's keywords); ``offset`` may be
        an OffsetAndMetadata.
        """
        topic, partition, offset = self._tp_args("seek", topic, partition, offset)
        if hasattr(offset, "offset") and not isinstance(offset, int):
            offset = offset.offset
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"seek offset must be a non-negative int, got {offset!r} for {topic}-{partition}")

        def run() -> None:
            self._need_assigned((topic, partition))
            self._set_position((topic, partition), offset)

        self._call(run)

    def _seek_policy(self, partitions: Sequence[TP], policy: str) -> None:
        partitions = [(tp.topic, tp.partition) for tp in as_tps(partitions, f"seek_to_{'beginning' if policy == 'earliest' else 'end'}() partitions")]

        def run() -> None:
            tps = list(partitions) or list(self._assignment)
            for tp in tps:
                self._need_assigned(tp)
            for tp in tps:
                self._token[tp] = self._token.get(tp, 0) + 1
                with self._lock:
                    self._positions.pop(tp, None)
                    self._drop_buffered(tp)
                self._fetch_pos.pop(tp, None)
                self._reset_offset(tp, policy)

        self._call(run)

    def seek_to_beginning(self, *partitions: TP) -> None:
        """Move to the log start of ``partitions`` (all assigned ones when none given)."""
        self._seek_policy(partitions, "earliest")

    def seek_to_end(self, *partitions: TP) -> None:
        """Move to the end visible to consumers (the HW) of ``partitions`` (all assigned when none given)."""
        self._seek_policy(partitions, "latest")

    def position(self, topic: Any, partition: Any = None, timeout: float = 30.0, *,
                 timeout_ms: Optional[int] = None) -> int:
        """Offset of the next record ``poll`` will return for the partition (waits while it is being resolved).

        ``position(topic, partition)`` or Kafka's ``position(TopicPartition)``;
        ``timeout_ms`` is kafka-python's name for ``timeout`` (in milliseconds).
        """
        topic, partition, _ = self._tp_args("position", topic, partition, None, need_offset=False)
        if timeout_ms is not None:
            timeout = self._timeout_ms_arg("position", timeout_ms)
        tp = (topic, partition)

        def known() -> bool:
            return tp in self._positions or self._error is not None or tp not in self._assignment

        def get() -> int:
            self._need_assigned(tp)
            if tp not in self._positions and self._error is not None:
                err, self._error = self._error, None
                raise err
            return self._positions[tp]

        if not self._call(known):
            self._wait(known, timeout)
        if not self._call(known):
            raise RequestTimedOutError(f"position of {topic}-{partition} not resolved within {timeout} s")
        return self._call(get)

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Block until ``predicate()`` (run on the loop) holds: virtual time in a simulation, else an event
        that every position change or error sets (no polling)."""
        if self.scheduler.simulated:
            self.scheduler.wait_until(predicate, int(timeout * 1000))
            return
        import time

        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()
            if self._call(predicate):
                return
            left = deadline - time.monotonic()
            if left <= 0 or self._closed:
                return
            self._changed.wait(left)

    # ================================================================= poll
    def _poll(self, timeout: float = 1.0, max_records: Optional[int] = None) -> List[ConsumerRecord]:
        """Records fetched within ``timeout`` seconds (virtual seconds in a simulated cluster).

        Returns at once when records are buffered; otherwise blocks until a
        fetch response brings some (it is woken by the append, through the
        broker's fetch purgatory) or the timeout passes. Raises
        :class:`NoOffsetForPartitionError` / :class:`OffsetOutOfRangeError`
        with ``auto_offset_reset="none"``; :class:`FencedInstanceIdError` (on every call) once a newer
        consumer took this one's ``group_instance_id``; retriable errors are retried inside.
        """
        limit = max_records or self.max_poll_records
        self._last_poll_ms = self._now()
        if self._poll_expired is not None:
            self._call(self._resume_after_poll_timeout)
        self._run_callbacks()
        if self.enable_auto_commit and self._now() >= self._next_auto_commit:
            self._next_auto_commit = self._now() + self.auto_commit_interval_ms
            self._call(lambda: self._commit_internal(None, None, auto=True))
        if self.scheduler.simulated:
            out = self._call(lambda: self._take(limit))
            if out or timeout <= 0:
                return out
            self.scheduler.wait_until(lambda: bool(self._buffer) or self._error is not None or self._closed
                                      or self._fenced is not None, int(timeout * 1000))
            return self._call(lambda: self._take(limit))
        # Real time: records already buffered are taken on this thread (under the buffer lock);
        # the loop thread is only asked to act when there is nothing to hand out.
        out = self._take_fast(limit)
        if out:
            return out
        out = self._call(lambda: self._take(limit))
        if out or timeout <= 0:
            return out
        import time

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            self._wake.wait(left)
            out = self._take_fast(limit)
            if out:
                return out
            if self._error is not None or self._closed or self._corrupt or self._fenced is not None:
                return self._call(lambda: self._take(limit))

    def _take_fast(self, limit: int) -> List[ConsumerRecord]:
        """Caller's thread: take buffered records; ask the loop for more fetches when a partition runs low."""
        if self._error is not None or self._closed:
            return []
        out = self._take_records(limit)
        if out:
            self.scheduler.call_soon(self._send_fetches)
        return out

    def _take_records(self, limit: int) -> List[ConsumerRecord]:
        """Hand out up to ``limit`` buffered records and advance the positions.

        The buffer holds lists of records (from the per-batch decoder) and
        :class:`RecordRun` columns (from the run decoder); a run's records are
        built here, after the buffer lock is released.
        """
        pieces: List[Tuple[Any, int, int]] = []
        taken = 0
        with self._lock:
            buf = self._buffer
            while buf and taken < limit:
                chunk = buf[0]
                tp, recs, i = chunk
                n = len(recs)
                j = min(n, i + limit - taken)
                pieces.append((recs, i, j))
                taken += j - i
                self._buffered[tp] -= j - i
                self._positions[tp] = (recs[j - 1].offset if type(recs) is list else recs.offset_at(j - 1)) + 1
                if j == n:
                    buf.popleft()
                else:
                    chunk[2] = j
            if taken:
                self.records_consumed += taken
            if not buf:
                self._wake.clear()
        if len(pieces) == 1:
            recs, i, j = pieces[0]
            if type(recs) is not list:
                return recs.take(i, j)
            return recs if i == 0 and j == len(recs) else recs[i:j]
        out: List[ConsumerRecord] = []
        for recs, i, j in pieces:
            if type(recs) is not list:
                out.extend(recs.take(i, j))
            else:
                out.extend(recs if i == 0 and j == len(recs) else recs[i:j])
        return out

    def _take(self, limit: int) -> List[ConsumerRecord]:
        """On the loop: raise a pending error, drive the group, hand out records, send fetches."""
        if self._fenced is not None and not self._manual:
            raise self._fenced
        if self._error is not None:
            if isinstance(self._error, NoOffsetForPartitionError):
                # As Kafka: the rebalance listener runs first (it may seek), and only partitions still
                # without a position then raise; an explicit seek() is honoured.
                if self._listener_calls:
                    return []
                missing = sorted(tp for tp in self._no_offset if tp in self._assignment and tp not in self._positions)
                self._no_offset.clear()
                if not missing:
                    self._error = None
                else:
                    self._error = NoOffsetForPartitionError(
                        f"no committed offset for {', '.join(f'{t}-{p}' for t, p in missing)} (group "
                        f"{self.group_id!r}) and auto_offset_reset='none': seek() to choose where to start")
            if self._error is not None:
                err, self._error = self._error, None
                raise err
        self._coordinate()
        out = self._take_records(limit)
        if not out:
            self._raise_corrupt()
        self._send_fetches()
        return out

    def _raise_corrupt(self) -> None:
        """Raise the error of a corrupt partition whose good records were all handed out (Kafka's
        consumer does the same on every poll until the application seeks past the bad batch)."""
        for tp, err in self._corrupt.items():
            if not self._buffered.get(tp, 0):
                raise CorruptRecordError(str(err))

    def _send_fetches(self) -> None:
        if self._closed:
            return
        for tp in self._assignment:
            if tp in self._inflight or tp in self._resetting or tp not in self._fetch_pos or tp in self._corrupt \
                    or tp in self._paused:
                continue
            if self._buffered.get(tp, 0) >= self.max_poll_records:
                continue
            st = self.store.partitions.get(tp)
            if st is None or st.leader == NO_LEADER:
                continue
            pos = self._fetch_pos[tp]
            token = self._token.get(tp, 0)
            req = FetchRequest(-1, tp[0], tp[1], pos, -1, self._node.next_corr(),
                               max_bytes=self.max_partition_fetch_bytes, max_wait_ms=self.fetch_max_wait_ms)
            self._inflight.add(tp)
            self.fetch_requests += 1
            sent = self.scheduler.clock.now_ms()

            def on_fetch(resp: Any, tp: TP = tp, pos: int = pos, token: int = token, sent: int = sent) -> None:
                self._on_fetch(tp, pos, token, resp, sent)

            self._node.request(st.leader, req, self.request_timeout_ms, on_fetch)

    def _on_fetch(self, tp: TP, pos: int, token: int, resp: Any, sent_ms: Optional[int] = None) -> None:
        self._inflight.discard(tp)
        if resp is not None and sent_ms is not None:
            self.fetch_latency.observe((self.scheduler.clock.now_ms() - sent_ms) / 1000.0)
        if self._closed or resp is None or self._token.get(tp, 0) != token or self._fetch_pos.get(tp) != pos:
            if resp is None and not self._closed:
                return  # timed out or the broker went away: the tick sends again
            self._send_fetches()
            return
        if resp.error is OffsetOutOfRangeError:
            policy = self.auto_offset_reset
            if policy == "none":
                self._error = OffsetOutOfRangeError(
                    f"fetch offset {pos} is out of range for {tp[0]}-{tp[1]} (log start {resp.log_start_offset}, "
                    f"HW {resp.high_watermark}) and auto_offset_reset='none'")
                self._signal()
                return
            self._positions.pop(tp, None)
            self._fetch_pos.pop(tp, None)
            self._reset_offset(tp, policy)
            return
        if resp.error is not None:
            return  # NotLeader etc.: the tick retries after the metadata moves
        hw = resp.high_watermark
        self._hw[tp] = hw
        if resp.records:
            nxt = pos
            got = 0
            chunks: List[List[Any]] = []
            topic, partition = tp

            def emit(recs: Any) -> None:
                nonlocal got
                chunks.append([tp, recs, 0])
                got += len(recs)

            def above_hw(offset: int) -> None:
                self.violations.append((tp, offset, hw))

            try:
                nxt = self._decoder.decode(resp.records, pos, hw, topic, partition, emit, above_hw)
            except CorruptRecordError as exc:
                # Keep the records before the damage; stop fetching this partition and let poll()
                # raise once they are handed out, naming where (the application may seek past it).
                nxt = self._decoder.next_offset
                self._corrupt[tp] = CorruptRecordError(
                    f"{topic}-{partition}: the batch fetched at offset {nxt} is corrupt "
                    f"({exc}); records before it were delivered; seek past it to go on")
                self._signal()
            self.bytes_consumed += len(resp.records)
            self._fetch_pos[tp] = nxt
            if got:
                with self._lock:
                    self._buffer.extend(chunks)
                    self._buffered[tp] = self._buffered.get(tp, 0) + got
                    self._wake.set()
                self._changed.set()
        self._send_fetches()

    # ================================================================ group
    def _tick(self) -> None:
        if self._closed:
            return
        try:
            self._coordinate()
            now = self._now()
            # partitions whose position could not be resolved yet, or without a fetch in flight
            if self._resetting and now >= self._next_attempt:
                self._next_attempt = now + self.retry_backoff_ms
                pending = [tp for tp in self._resetting if tp not in self._positions]
                if pending:
                    if self.group_id is None:
                        for tp in pending:
                            self._reset_offset(tp, self.auto_offset_reset)
                    else:
                        self._fetch_committed(pending, self._on_committed_for_positions)
            self._send_fetches()
        finally:
            self._tick_timer = self.scheduler.call_later(min(100, self.heartbeat_interval_ms), self._tick)

    def _coordinate(self) -> None:
        """Drive group membership one step (on the loop): find the coordinator, join, sync, heartbeat."""
        if self._closed:
            return
        if self.group_id is None or self._manual:
            if self.group_id is None and not self._manual and (self._topics or self._pattern is not None):
                want = [(t, p) for t, n in self._partition_counts(self._matched_topics()).items() for p in range(n)]
                if set(want) != set(self._assignment):
                    self._set_assignment(want)
            return
        if self._topics is None and self._pattern is None:
            return
        if self._fenced is not None:
            return  # fatal: another consumer holds our group_instance_id (see _on_fenced)
        now = self._now()
        if self._poll_expired is not None:
            return  # left the group after a poll timeout: the next poll() rejoins
        if self._last_poll_ms is not None and (self.member_id or self._state != "unjoined") and \
                now - self._last_poll_ms > self.max_poll_interval_ms:
            self._on_poll_timeout(now)
            return
        if self._state == "stable":
            topics = tuple(self._matched_topics())
            if topics != self._joined_topics or self._partition_counts(topics) != self._joined_counts:
                self._rejoin = True  # the subscription now covers other topics or partitions
        if self._coordinator is None:
            if not self._finding and now >= self._next_attempt:
                self._find_coordinator()
            return
        if self._rejoin and self._state in ("unjoined", "stable"):
            if now >= self._next_attempt:
                self._join()
            return
        # Heartbeats go on while the SyncGroup answer is awaited (Kafka's heartbeat thread runs in
        # COMPLETING_REBALANCE too): the coordinator expires a member whose session lapses while it
        # waits there (e.g. for a leader that died), while this member still reads its partitions.
        if self._state in ("stable", "syncing") and not self._hb_inflight and \
                now - self._last_heartbeat >= self.heartbeat_interval_ms:
            self._heartbeat()

    def _on_poll_timeout(self, now: int) -> None:
        """``poll`` was not called within ``max_poll_interval_ms``: leave the group (Kafka's heartbeat
        thread does the same), so the coordinator gives the partitions to the other members at once.

        The partitions are dropped here (this consumer fetches on the loop, so it would keep reading
        them); the listener hears ``on_partitions_lost`` and a commit fails with
        :class:`CommitFailedError` until the next ``poll`` rejoins.
        """
        self._poll_expired = {tp: self._positions[tp] for tp in self._assignment if tp in self._positions}
        self._expired_detail = (f"member {self.member_id!r} of group {self.group_id!r} (generation "
                                f"{self.generation}) left the group: {now - (self._last_poll_ms or 0)} ms since the last "
                                f"poll() exceeds max_poll_interval_ms={self.max_poll_interval_ms}")
        self._leave_group()
        self._rejoin = False
        self._revoke_all("lost")

    def _resume_after_poll_timeout(self) -> None:
        """The first ``poll`` after a poll timeout: rejoin as a new member."""
        if self._poll_expired is not None:
            self._poll_expired = None
            self._rejoin = True
            self._coordinate()

    def _coordinator_lost(self, why: str = "") -> None:
        self._coordinator = None
        self._next_attempt = self._now() + self.retry_backoff_ms
        if self._state in ("joining", "syncing"):
            # The rebalance in progress went through that coordinator (a commit or heartbeat
            # found it gone): start it again with the next one; a late JoinGroup/SyncGroup
            # answer from the old one is then ignored.
            self._state = "unjoined"
            self._rejoin = True

    def _find_coordinator(self) -> None:
        assert self.group_id is not None
        cfg = self.store.topics.get(ot.OFFSETS_TOPIC)
        target = None
        if cfg is not None:
            st = self.store.partitions.get((ot.OFFSETS_TOPIC, ot.partition_for_group(self.group_id, cfg.partitions)))
            if st is not None and st.leader != NO_LEADER:
                target = st.leader
        if target is None:
            target = self.store.controller_id
        if target is None:
            self._next_attempt = self._now() + self.retry_backoff_ms
            return
        self._finding = True

        def done(resp: Any) -> None:
            self._finding = False
            if resp is None or resp.error is not None:
                self._next_attempt = self._now() + self.retry_backoff_ms
                return
            self._coordinator = resp.node_id
            self._coordinate()

        self._node.request(target, gm.FindCoordinatorRequest(self.group_id, self._node.next_corr()),
                           self.request_timeout_ms, done)

    def _handle_group_error(self, error: type, message: str = "") -> None:
        """What a group error means for this member (Kafka's AbstractCoordinator rules)."""
        name = error.__name__
        if error is FencedInstanceIdError:
            self._on_fenced(message)
            return
        if name in _RETRIABLE_GROUP_ERRORS:
            self._coordinator_lost()
        elif error is UnknownMemberIdError:
            self.member_id, self.generation = gm.NO_MEMBER, gm.NO_GENERATION
        elif error is IllegalGenerationError:
            self.generation = gm.NO_GENERATION
        if error in (UnknownMemberIdError, IllegalGenerationError) and self._assignment:
            # Fenced: the group may have given these partitions to others already. Eager or cooperative,
            # they are lost at once (Kafka's onPartitionsLost), not kept and fetched until the JoinGroup.
            self._revoke_all("lost")
        self._next_attempt = self._now() + self.retry_backoff_ms
        if self._state != "unjoined":
            self._state = "unjoined"
        self._rejoin = True

    def _on_fenced(self, message: str) -> None:
        """KIP-345: a newer consumer joined with this one's ``group_instance_id``. Fatal, as in Kafka: the
        partitions are lost at once, the consumer stops taking part in the group (rejoining would fence
        the other one in turn), and ``poll``/``commit`` raise :class:`FencedInstanceIdError` until closed."""
        if self._fenced is not None:
            return
        self._fenced = FencedInstanceIdError(
            f"consumer with group_instance_id {self.group_instance_id!r} (member {self.member_id!r}, group "
            f"{self.group_id!r}) was fenced by a newer member with the same group instance id: {message}")
        if self._assignment:
            self._revoke_all("lost")
        self.member_id, self.generation = gm.NO_MEMBER, gm.NO_GENERATION
        self._state = "unjoined"
        self._rejoin = False
        self._signal()

    def _join(self) -> None:
        """Send JoinGroup. Eager: commit (auto-commit) and give up every partition first.
        Cooperative: give up only partitions no longer subscribed; the rest are kept (and keep
        being fetched) and listed as owned in the subscription, with the generation."""
        assert self.group_id is not None and self._coordinator is not None
        topics = tuple(self._matched_topics())
        counts = self._partition_counts(topics)
        if self._assignment and (self.generation < 0 or not self.member_id):
            self._revoke_all("lost")  # fenced or left: whatever it held may belong to others now
        if self._cooperative:
            gone = [tp for tp in self._assignment if tp[1] >= counts.get(tp[0], 0)]
            if gone:
                self._give_up(gone)
            sub = encode_member_subscription(list(topics), sorted(self._assignment), self.generation)
        else:
            if self._assignment and self.enable_auto_commit and self.generation >= 0:
                self._commit_internal(None, None, auto=True)
            self._revoke_all("revoked")
            sub = ot.encode_subscription(list(topics))
        if not self._cooperative and self._last_assignment is not None:
            # the eager sticky assignor's user data: the last assignment and its generation (Kafka's
            # StickyAssignor.subscriptionUserData), kept across revocations and fencing
            protocols = tuple((a.name, ot.encode_subscription(list(topics), a.subscription_user_data(
                *self._last_assignment))) for a in self._assignors)
        else:
            protocols = tuple((a.name, sub) for a in self._assignors)
        self._state = "joining"
        self._rejoin = False
        self._joined_topics = topics
        self._joined_counts = counts
        req = gm.JoinGroupRequest(self.group_id, self._node.next_corr(), member_id=self.member_id,
                                  session_timeout_ms=self.session_timeout_ms,
                                  rebalance_timeout_ms=self.rebalance_timeout_ms, protocol_type="consumer",
                                  protocols=protocols, client_id=self.client_id,
                                  group_instance_id=self.group_instance_id)
        self._node.request(self._coordinator, req, self.rebalance_timeout_ms + 5_000, self._on_join)

    def _lost_during_rebalance(self) -> None:
        """A JoinGroup/SyncGroup got no answer: rejoin, through a coordinator looked up again."""
        self._state = "unjoined"
        self._rejoin = True
        self._coordinator_lost()

    def _on_join(self, resp: Any) -> None:
        if self._closed or self._state != "joining":
            return
        if resp is None:
            self._lost_during_rebalance()
            return
        if resp.error is not None:
            if resp.error is InconsistentGroupProtocolError:
                self._error = resp.error(resp.message)
                self._signal()
            self._handle_group_error(resp.error, resp.message)
            return
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        assignments: Tuple[Tuple[str, bytes], ...] = ()
        if resp.leader == resp.member_id:
            subs = {mid: decode_member_subscription(meta) for mid, meta in resp.members}
            topics = sorted({t for s in subs.values() for t in s.topics})
            assignor = get_assignor(resp.protocol_name)
            plan = assignor.assign_members(self._partition_counts(topics), subs)
            assignments = tuple((mid, ot.encode_assignment(parts)) for mid, parts in plan.items())
        self._state = "syncing"
        self._last_heartbeat = self._now()  # the JoinGroup answer restarted the session on the coordinator
        req = gm.SyncGroupRequest(self.group_id, self._node.next_corr(), generation_id=self.generation,  # type: ignore[arg-type]
                                  member_id=self.member_id, assignments=assignments,
                                  group_instance_id=self.group_instance_id)
        assert self._coordinator is not None
        self._node.request(self._coordinator, req, self.rebalance_timeout_ms + 5_000, self._on_sync)

    def _on_sync(self, resp: Any) -> None:
        if self._closed or self._state != "syncing":
            return
        if resp is None:
            self._lost_during_rebalance()
            return
        if resp.error is not None:
            self._handle_group_error(resp.error, resp.message)
            return
        parts = ot.decode_assignment(resp.assignment)
        self._state = "stable"
        self._last_heartbeat = self._now()
        self.rebalances += 1
        self.assignment_history.append((self.generation, self.member_id, tuple(sorted(parts))))
        self._last_assignment = (sorted(parts), self.generation)
        if self._cooperative:
            # KIP-429: revoke only what this generation took away, then rejoin at once so the
            # next generation can hand it to its new owner; keep reading everything else.
            new, old = set(parts), set(self._assignment)
            revoked = [tp for tp in self._assignment if tp not in new]
            added = [tp for tp in parts if tp not in old]
            if revoked:
                self._give_up(revoked)
                self._rejoin = True
            self._tell_listener("assigned", added)
        else:
            self._tell_listener("assigned", parts)
        self._set_assignment(parts)
        self._changed.set()
        self._send_fetches()

    def _heartbeat(self) -> None:
        assert self.group_id is not None and self._coordinator is not None
        self._hb_inflight = True
        self._last_heartbeat = self._now()
        generation, member = self.generation, self.member_id
        req = gm.HeartbeatRequest(self.group_id, self._node.next_corr(), generation_id=generation, member_id=member,
                                  group_instance_id=self.group_instance_id)

        def done(resp: Any) -> None:
            self._hb_inflight = False
            if self._closed or self._state not in ("stable", "syncing") or self.generation != generation or \
                    self.member_id != member:  # (a static member's new id keeps the generation)
                return
            if resp is None:
                self._coordinator_lost()
                return
            if resp.error is not None:
                if resp.error is RebalanceInProgressError:
                    if self._state == "stable":  # while syncing, the SyncGroup answer says so too
                        self._rejoin = True
                        self._coordinate()
                else:
                    self._handle_group_error(resp.error, resp.message)

        self._node.request(self._coordinator, req, self.request_timeout_ms, done)

    def _leave_group(self, answered: Optional[Callable[[], None]] = None) -> bool:
        """Leave the group (close, unsubscribe, assign, poll timeout). A static member sends no LeaveGroup
        (Kafka's rule for ``group.instance.id``): it keeps its slot until its session times out, so a
        restart within ``session_timeout_ms`` causes no rebalance; it only forgets its member id.
        Returns whether a LeaveGroup was sent; ``answered()`` runs when it is answered or times out."""
        sent = False
        if self.group_id is not None and self.member_id and self._coordinator is not None and \
                self.group_instance_id is None:
            req = gm.LeaveGroupRequest(self.group_id, self._node.next_corr(), member_id=self.member_id)
            self._node.request(self._coordinator, req, self.request_timeout_ms,
                               (lambda resp: answered()) if answered is not None else (lambda resp: None))
            sent = True
        self.member_id, self.generation = gm.NO_MEMBER, gm.NO_GENERATION
        self._state = "unjoined"
        return sent

    # =============================================================== commits
    def _fetch_committed(self, tps: Sequence[TP], callback: Callable[[Optional[Dict[TP, Optional[OffsetAndMetadata]]],
                                                                       Optional[BaseException]], None]) -> None:
        """OffsetFetch from the coordinator (looked up first when unknown); ``callback(result, error)``."""
        if self.group_id is None:
            callback({tp: None for tp in tps}, None)
            return
        if self._coordinator is None:
            if not self._finding:
                self._find_coordinator()
            callback(None, CoordinatorNotAvailableError(f"coordinator of group {self.group_id!r} not known yet"))
            return
        req = gm.OffsetFetchRequest(self.group_id, self._node.next_corr(), partitions=tuple(tps))

        def done(resp: Any) -> None:
            if resp is None:
                self._coordinator_lost()
                callback(None, RequestTimedOutError(f"OffsetFetch for group {self.group_id!r} timed out"))
                return
            if resp.error is not None:
                if resp.error.__name__ in _RETRIABLE_GROUP_ERRORS:
                    self._coordinator_lost()
                callback(None, resp.error(resp.message))
                return
            callback({(t, p): (OffsetAndMetadata(o, m, e) if o >= 0 else None) for t, p, o, e, m in resp.offsets}, None)

        self._node.request(self._coordinator, req, self.request_timeout_ms, done)

    def _commit_internal(self, offsets: Optional[Dict[TP, Any]], future: Optional[ClientFuture], *, auto: bool = False,
                         deadline: Optional[int] = None, seq: int = 0) -> None:
        """On the loop: send an OffsetCommit (retrying retriable errors until ``deadline``, unless a newer
        commit of one of its partitions was issued meanwhile). ``seq``: this commit's number (0: a new one)."""
        if self.group_id is None:
            if future is not None:
                future.set_exception(InvalidGroupIdError("commit needs a group_id (this consumer has none)"))
            return
        if self._fenced is not None and not self._manual:
            if future is not None:
                future.set_exception(self._fenced)
            return
        if self._poll_expired is not None and not self._manual:
            what = sorted(offsets if offsets is not None else self._poll_expired)
            if future is not None:
                future.set_exception(CommitFailedError(
                    f"commit of {', '.join(f'{t}-{p}' for t, p in what) or 'no partitions'} refused: "
                    f"{self._expired_detail}; the group may have given them to another member. Call poll() "
                    f"to rejoin, or raise max_poll_interval_ms / lower max_poll_records"))
            return
        if offsets is None:
            offsets = {tp: self._positions[tp] for tp in self._assignment if tp in self._positions}
        rows = []
        for tp, v in offsets.items():
            if isinstance(v, OffsetAndMetadata):
                rows.append((tp[0], tp[1], v.offset, v.leader_epoch, v.metadata))
            else:
                rows.append((tp[0], tp[1], int(v), -1, ""))
        if not rows:
            if future is not None:
                future.set_result({})
            return
        deadline = deadline if deadline is not None else self._now() + self.request_timeout_ms
        plain = {tp: (v.offset if isinstance(v, OffsetAndMetadata) else int(v)) for tp, v in offsets.items()}
        if not seq:
            self._commit_seq += 1
            seq = self._commit_seq
            for tp in offsets:
                self._commit_issued[tp] = seq

        def retry(err: BaseException) -> None:
            if self._closed or self._now() >= deadline or auto:
                if future is not None:
                    future.set_exception(err)
                return
            newer = sorted(tp for tp in offsets if self._commit_issued.get(tp, 0) > seq)
            if newer:
                # Kafka's rule (its consumer never resends a commit once a newer one was sent): this one,
                # arriving after the newer commit, would move the offsets back.
                if future is not None:
                    future.set_exception(type(err)(
                        f"{err}; not retried: a newer commit of {', '.join(f'{t}-{p}' for t, p in newer)} was "
                        f"issued since, and this one arriving after it would move the offset back"))
                return
            self.scheduler.call_later(self.retry_backoff_ms,
                                      lambda: self._commit_internal(offsets, future, deadline=deadline, seq=seq))

        if self._coordinator is None:
            if not self._finding:
                self._find_coordinator()
            retry(CoordinatorNotAvailableError(f"coordinator of group {self.group_id!r} not found"))
            return
        if self._manual or self._state != "stable" and self.generation < 0:
            generation, member = gm.NO_GENERATION, gm.NO_MEMBER
        else:
            generation, member = self.generation, self.member_id
        req = gm.OffsetCommitRequest(self.group_id, self._node.next_corr(), generation_id=generation,
                                     member_id=member, offsets=tuple(rows),
                                     group_instance_id=self.group_instance_id if member else None)

        def done(resp: Any) -> None:
            if resp is None:
                lost = self._node.failure
                self._coordinator_lost()
                retry(lost if lost is not None else
                      RequestTimedOutError(f"OffsetCommit for group {self.group_id!r} timed out"))
                return
            if resp.error is not None:
                err = resp.error(resp.message)
                if resp.error.__name__ in _RETRIABLE_GROUP_ERRORS:
                    self._coordinator_lost()
                    retry(err)
                    return
                if resp.error is FencedInstanceIdError:
                    if member == self.member_id:  # (not about an older member id of this same consumer)
                        self._handle_group_error(resp.error, resp.message)
                        err = self._fenced or err
                elif resp.error in (IllegalGenerationError, UnknownMemberIdError):
                    if generation == self.generation:  # (not a late answer about an older generation)
                        self._handle_group_error(resp.error)
                elif resp.error is RebalanceInProgressError and not self._cooperative:
                    # (cooperative: the rebalance under way completes on its own; rejoining after
                    # it would only start another one)
                    self._rejoin = True
                if future is not None:
                    future.set_exception(err)
                return
            if future is not None:
                future.set_result(plain)

        self._node.request(self._coordinator, req, self.request_timeout_ms, done)

    def commit(self, offsets: Optional[Dict[TP, Any]] = None, timeout: Optional[float] = None) -> Dict[TP, int]:
        """Commit ``offsets`` (default: the position of every assigned partition) and wait for it.

        Returns what was committed. Raises :class:`IllegalGenerationError` /
        :class:`UnknownMemberIdError` when this member was fenced by a rebalance
        (the commit is refused), :class:`FencedInstanceIdError` when a newer consumer took this one's
        ``group_instance_id``, :class:`InvalidGroupIdError` without a group.
        Durability: once it returns, the offsets are in ``__consumer_offsets`` on
        the offsets partition's ISR (acks=all).
        """
        fut = self.commit_async(offsets)
        result = fut.result(timeout if timeout is not None else self.request_timeout_ms / 1000 + 5)
        self._run_callbacks()
        return {TopicPartition(*tp): o for tp, o in result.items()}

    def commit_async(self, offsets: Optional[Dict[TP, Any]] = None,
                     callback: Optional[Callable[[Dict[TP, int], Optional[BaseException]], Any]] = None) -> ClientFuture:
        """Commit without waiting; ``callback(offsets, exception)`` runs in a later poll/commit/close."""
        fut = ClientFuture(self.scheduler)
        if callback is not None:
            def queue(f: ClientFuture) -> None:
                exc = f.exception()
                done: Dict[TP, int] = {} if exc is not None else {TopicPartition(*tp): o for tp, o in f._value.items()}
                self._commit_callbacks.append((callback, done, exc))
            fut.add_done_callback(queue)
        snapshot: Optional[Dict[TP, Any]] = None
        if offsets is not None:
            snapshot = {tuple(tp): om for tp, om in as_commit_offsets(offsets).items()}  # type: ignore[misc]
        self._call(lambda: self._commit_internal(snapshot, fut))
        return fut

    def _run_callbacks(self) -> None:
        while self._listener_calls:
            what, parts = self._listener_calls.popleft()
            fn = getattr(self._listener, f"on_partitions_{what}", None)
            if fn is None and what == "lost":  # Kafka's default onPartitionsLost calls onPartitionsRevoked
                fn = getattr(self._listener, "on_partitions_revoked", None)
            if fn is not None:
                fn([TopicPartition(*tp) for tp in parts])  # kafka-python's listeners read tp.topic
        while self._commit_callbacks:
            cb, offsets, exc = self._commit_callbacks.popleft()
            cb(offsets, exc)

    def committed(self, topic: Any, partition: Any = None, timeout: float = 30.0, *,
                  metadata: bool = False) -> Any:
        """The group's committed offset for the partition (None when nothing was committed).

        ``committed(topic, partition)`` or Kafka's ``committed(TopicPartition)``; with
        ``metadata=True`` (kafka-python's) the :class:`OffsetAndMetadata` instead of the offset.
        """
        topic, partition, _ = self._tp_args("committed", topic, partition, None, need_offset=False)
        if self.group_id is None:
            raise InvalidGroupIdError("committed() needs a group_id (this consumer has none)")
        fut = ClientFuture(self.scheduler)
        deadline = self._now() + int(timeout * 1000)

        def attempt() -> None:
            def cb(result: Any, error: Optional[BaseException]) -> None:
                if error is None:
                    om = result.get((topic, partition))
                    fut.set_result(None if om is None else (om if metadata else om.offset))
                elif self._now() < deadline and not self._closed:
                    self.scheduler.call_later(self.retry_backoff_ms, attempt)
                else:
                    fut.set_exception(error)

            self._fetch_committed([(topic, partition)], cb)

        self._call(attempt)
        return fut.result(timeout + 1)

    # ================================================================ lag etc.
    def lag(self) -> Dict[TP, int]:
        """Per assigned partition: the last HW seen minus the position (records not yet returned)."""
        def run() -> Dict[TP, int]:
            return {tp: max(0, self._hw[tp] - self._positions[tp]) for tp in self._assignment
                    if tp in self._hw and tp in self._positions}

        return self._call(run)

    def highwater(self, topic: Any, partition: Any = None) -> Optional[int]:
        """The HW the leader reported with the last fetch of the partition (None before any).

        ``highwater(topic, partition)`` or Kafka's ``highwater(TopicPartition)``.
        """
        topic, partition, _ = self._tp_args("highwater", topic, partition, None, need_offset=False)
        return self._call(lambda: self._hw.get((topic, partition)))

    def metrics(self) -> List[Any]:
        """Counters since creation and per-partition lag, as :class:`pylog.metrics.Metric` (labelled with the client id).

        ``pylog_consumer_records_consumed_total`` (records returned by poll),
        ``pylog_consumer_bytes_fetched_total`` (fetched record-batch bytes),
        ``pylog_consumer_fetch_requests_total`` (fetch requests sent),
        ``pylog_consumer_rebalances_total`` (assignments received),
        ``pylog_consumer_records_lag`` per assigned partition (last HW seen minus position),
        ``pylog_consumer_assigned_partitions``, ``pylog_consumer_fetch_latency_seconds`` (a histogram).
        The ``client_id`` label is the ``client_id`` given to the consumer (Kafka's client-id tag), else
        its node id; give each consumer of a cluster its own ``client_id`` if it is to render together.
        """
        from pylog.metrics import metric

        def run() -> List[Any]:
            # The client_id the user gave (as Kafka's client-id metric tag), else the node id (unique).
            cid = self.client_id if self._client_id_given else self._node.node_id
            group = self.group_id or ""
            out = [
                metric("pylog_consumer_records_consumed_total", "counter", "Records returned by poll.",
                       self.records_consumed, client_id=cid, group=group),
                metric("pylog_consumer_bytes_fetched_total", "counter", "Bytes of record batches fetched.",
                       self.bytes_consumed, client_id=cid, group=group),
                metric("pylog_consumer_fetch_requests_total", "counter", "Fetch requests sent.",
                       self.fetch_requests, client_id=cid, group=group),
                metric("pylog_consumer_rebalances_total", "counter", "Group assignments received (completed rebalances).",
                       self.rebalances, client_id=cid, group=group),
                metric("pylog_consumer_assigned_partitions", "gauge", "Partitions currently assigned.",
                       len(self._assignment), client_id=cid, group=group),
                metric("pylog_consumer_fetch_latency_seconds", "histogram",
                       "Seconds from a fetch request to its response (with the fetch_max_wait_ms long poll).",
                       self.fetch_latency.snapshot(), client_id=cid, group=group),
            ]
            for tp in self._assignment:
                if tp in self._hw and tp in self._positions:
                    out.append(metric("pylog_consumer_records_lag", "gauge",
                                      "High watermark last seen minus the consumer's position.",
                                      max(0, self._hw[tp] - self._positions[tp]), client_id=cid, group=group,
                                      topic=tp[0], partition=tp[1]))
            return out

        return self._call(run)

    # ================================================ Kafka's idioms (kafka-python names)
    def _tp_args(self, what: str, topic: Any, partition: Any, offset: Any,
                 need_offset: bool = True) -> Tuple[str, int, Any]:
        """Normalise ``(topic, partition[, offset])`` or ``(TopicPartition[, offset])`` (also given as
        ``partition=tp``, kafka-python's keyword) into ``(topic, partition, offset)``."""
        if topic is None and partition is not None and not isinstance(partition, int):
            topic, partition = partition, None  # seek(partition=tp, offset=o)
        if isinstance(topic, str):
            if isinstance(partition, bool) or not isinstance(partition, int):
                raise InvalidConfigurationError(
                    f"{what}(): give a TopicPartition or a topic and an int partition, got {topic!r}, {partition!r}")
            tp = as_tp((topic, partition), f"{what}() partition")
        else:
            tp = as_tp(topic, f"{what}() partition")
            if partition is not None:
                if offset is not None or not need_offset:
                    raise InvalidConfigurationError(
                        f"{what}(): too many arguments after the TopicPartition {tuple(tp)!r}: {partition!r}")
                offset = partition
        if need_offset and offset is None:
            raise InvalidConfigurationError(f"{what}(): no offset given for {tp.topic}-{tp.partition}")
        return tp.topic, tp.partition, offset

    @staticmethod
    def _timeout_ms_arg(what: str, timeout_ms: Any) -> float:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or not timeout_ms >= 0:
            raise InvalidConfigurationError(f"{what}(): timeout_ms must be a number >= 0, got {timeout_ms!r}")
        return timeout_ms / 1000

    def poll(self, timeout: Optional[float] = None, max_records: Optional[int] = None, *,
             timeout_ms: Optional[float] = None) -> "PollResult":
        """Records fetched within ``timeout`` seconds (default 1; virtual seconds in a simulated cluster).

        ``timeout_ms`` is kafka-python's name (milliseconds); give one or the other.
        The result is a list of :class:`ConsumerRecord` in fetch order that also
        answers kafka-python's per-partition view: ``.items()``, ``.keys()``,
        ``.values()`` and ``result[TopicPartition]`` (see :class:`PollResult`).
        Keys and values pass through ``key_deserializer``/``value_deserializer``
        when set (a null key or value stays None).

        Returns at once when records are buffered; otherwise blocks until a
        fetch response brings some (it is woken by the append, through the
        broker's fetch purgatory) or the timeout passes. Raises
        :class:`NoOffsetForPartitionError` / :class:`OffsetOutOfRangeError`
        with ``auto_offset_reset="none"``; :class:`FencedInstanceIdError` (on every call) once a newer
        consumer took this one's ``group_instance_id``; :class:`SerializationError` when a
        deserializer raises (naming the record); retriable errors are retried inside.
        Complexity: O(records returned).
        """
        if timeout_ms is not None:
            if timeout is not None:
                raise InvalidConfigurationError("poll(): give timeout (seconds) or timeout_ms, not both")
            timeout = self._timeout_ms_arg("poll", timeout_ms)
        elif timeout is None:
            timeout = 1.0
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise InvalidConfigurationError(f"poll(): timeout must be a number of seconds, got {timeout!r}")
        records = self._poll(timeout, max_records)
        if self._key_deserializer is not None or self._value_deserializer is not None:
            records = [self._deserialize(r) for r in records]
        return PollResult(records)

    def _deserialize(self, r: ConsumerRecord) -> ConsumerRecord:
        kd, vd = self._key_deserializer, self._value_deserializer
        try:
            key = kd(r.key, r.topic) if kd is not None and r.key is not None else r.key
        except Exception as exc:  # noqa: BLE001 - the user's code; named and chained
            raise SerializationError(f"key_deserializer raised {type(exc).__name__}: {exc} for the record at "
                                     f"offset {r.offset} of {r.topic}-{r.partition}") from exc
        try:
            value = vd(r.value, r.topic) if vd is not None and r.value is not None else r.value
        except Exception as exc:  # noqa: BLE001
            raise SerializationError(f"value_deserializer raised {type(exc).__name__}: {exc} for the record at "
                                     f"offset {r.offset} of {r.topic}-{r.partition}") from exc
        return r._replace(key=key, value=value)

    def pause(self, *partitions: Any) -> None:
        """Stop fetching and returning records of ``partitions`` until :meth:`resume` (Kafka's pause).

        The positions stay where they are: records fetched but not yet returned
        are fetched again after ``resume``. Group membership goes on (a paused
        consumer still heartbeats and must still call ``poll``). Raises
        :class:`UnknownTopicOrPartitionError` for a partition not assigned to
        this consumer (Kafka: IllegalStateException "No current assignment").
        A partition that is revoked stops being paused.
        """
        tps = [(tp.topic, tp.partition) for tp in as_tps(partitions, "pause() partitions")]

        def run() -> None:
            for tp in tps:
                self._need_assigned(tp)
            for tp in tps:
                self._paused.add(tp)
                self._token[tp] = self._token.get(tp, 0) + 1  # a fetch in flight is ignored
                with self._lock:
                    self._drop_buffered(tp)
                    if tp in self._positions:
                        self._fetch_pos[tp] = self._positions[tp]

        self._call(run)

    def resume(self, *partitions: Any) -> None:
        """Fetch and return ``partitions`` again (Kafka's resume); resuming one not paused does nothing.

        Raises :class:`UnknownTopicOrPartitionError` for a partition not assigned to this consumer.
        """
        tps = [tuple(tp) for tp in as_tps(partitions, "resume() partitions")]

        def run() -> None:
            for tp in tps:
                self._need_assigned(tp)  # type: ignore[arg-type]
            for tp in tps:
                self._paused.discard(tp)
            self._send_fetches()

        self._call(run)

    def paused(self) -> Set[TopicPartition]:
        """The partitions paused by :meth:`pause` (and still assigned)."""
        return self._call(lambda: {TopicPartition(*tp) for tp in self._paused if tp in self._assignment})

    def topics(self) -> Set[str]:
        """Every topic of the cluster except internal ones (``__consumer_offsets``...), as kafka-python's ``topics()``."""
        return {t for t in self.store.topics if not t.startswith("__")}

    def partitions_for_topic(self, topic: str) -> Optional[Set[int]]:
        """The partition numbers of ``topic`` (None when it does not exist), as kafka-python's."""
        cfg = self.store.topics.get(topic)
        return None if cfg is None else set(range(cfg.partitions))

    def _check_partitions_exist(self, tps: Sequence[TopicPartition], what: str) -> None:
        for tp in tps:
            cfg = self.store.topics.get(tp.topic)
            if cfg is None or tp.partition >= cfg.partitions:
                raise UnknownTopicOrPartitionError(
                    f"{what}(): {tp.topic}-{tp.partition} does not exist"
                    + ("" if cfg is None else f" (topic {tp.topic!r} has {cfg.partitions} partitions)"))

    def _list_offsets(self, queries: Dict[TopicPartition, int], timeout: float, what: str) -> Dict[TopicPartition, Any]:
        """Kafka's ListOffsets for each partition from its leader (timestamp -2 earliest, -1 latest,
        else a time); NotLeader and timeouts are retried every ``retry_backoff_ms`` until ``timeout``."""
        self._check_partitions_exist(list(queries), what)
        if not queries:
            return {}
        fut = ClientFuture(self.scheduler)
        results: Dict[TopicPartition, Any] = {}
        deadline = self._now() + int(timeout * 1000)
        level = 1 if self.isolation_level == "read_committed" else 0

        def attempt(tp: TopicPartition) -> None:
            if fut.done():
                return
            st = self.store.partitions.get(tuple(tp))
            if st is None or st.leader == NO_LEADER:
                again(tp, f"{tp.topic}-{tp.partition} has no leader")
                return
            req = gm.ListOffsetsRequest(tp.topic, tp.partition, queries[tp], self._node.next_corr(),
                                        isolation_level=level)

            def done(resp: Any) -> None:
                if fut.done():
                    return
                if resp is None or resp.error is not None:
                    if resp is not None and resp.error is InvalidConfigurationError:
                        fut.set_exception(InvalidConfigurationError(resp.message))
                        return
                    again(tp, "no answer" if resp is None else f"{resp.error.__name__}: {resp.message}")
                    return
                results[tp] = resp
                if len(results) == len(queries):
                    fut.set_result(dict(results))

            self._node.request(st.leader, req, self.request_timeout_ms, done)

        def again(tp: TopicPartition, why: str) -> None:
            if self._closed or self._now() >= deadline:
                fut.set_exception(RequestTimedOutError(
                    f"{what}(): no offsets for {tp.topic}-{tp.partition} within {timeout} s ({why})"))
                return
            self.scheduler.call_later(self.retry_backoff_ms, lambda: attempt(tp))

        def start() -> None:
            for tp in queries:
                attempt(tp)

        self._call(start)
        return fut.result(timeout + 1)

    def _offsets_timeout(self, what: str, timeout_ms: Any) -> float:
        return self.request_timeout_ms / 1000 if timeout_ms is None else self._timeout_ms_arg(what, timeout_ms)

    def beginning_offsets(self, partitions: Any, timeout_ms: Optional[int] = None) -> Dict[TopicPartition, int]:
        """The first offset of each partition (its log start offset), as Kafka's ``beginningOffsets``.

        Needs no assignment. Raises :class:`UnknownTopicOrPartitionError` for a partition that
        does not exist, :class:`RequestTimedOutError` after ``timeout_ms`` (default
        ``request_timeout_ms``) without an answer. Complexity: one request per partition.
        """
        tps = as_tps(partitions, "beginning_offsets() partitions")
        resp = self._list_offsets({tp: gm.EARLIEST_TIMESTAMP for tp in tps}, self._offsets_timeout(
            "beginning_offsets", timeout_ms), "beginning_offsets")
        return {tp: r.offset for tp, r in resp.items()}

    def end_offsets(self, partitions: Any, timeout_ms: Optional[int] = None) -> Dict[TopicPartition, int]:
        """The end of each partition visible to this consumer (the high watermark; the last stable offset
        under ``read_committed``, the same while pylog has no transactions), as Kafka's ``endOffsets``:
        the offset the next appended record will get once replicated.

        Needs no assignment; errors as :meth:`beginning_offsets`.
        """
        tps = as_tps(partitions, "end_offsets() partitions")
        resp = self._list_offsets({tp: gm.LATEST_TIMESTAMP for tp in tps}, self._offsets_timeout(
            "end_offsets", timeout_ms), "end_offsets")
        return {tp: r.offset for tp, r in resp.items()}

    def offsets_for_times(self, timestamps: Dict[Any, int],
                          timeout_ms: Optional[int] = None) -> Dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """Per partition, the earliest offset whose record timestamp is >= the given one (ms), as Kafka's
        ``offsetsForTimes``: an :class:`OffsetAndTimestamp` (offset, that record's timestamp, leader
        epoch), or None when no record below the high watermark is that late.

        ``timestamps``: ``{TopicPartition or (topic, partition): ms since the epoch}``. A negative or
        non-int timestamp raises :class:`InvalidConfigurationError` naming the partition (Kafka: "The
        target time ... cannot be negative"); errors otherwise as :meth:`beginning_offsets`.
        Complexity: one request per partition; the broker does Kafka's time-index lookup.
        """
        if not isinstance(timestamps, dict):
            raise InvalidConfigurationError(
                f"offsets_for_times() takes a dict {{TopicPartition: timestamp ms}}, got {type(timestamps).__name__}")
        queries: Dict[TopicPartition, int] = {}
        for k, ts in timestamps.items():
            tp = as_tp(k, "offsets_for_times() partition")
            if isinstance(ts, bool) or not isinstance(ts, int):
                raise InvalidConfigurationError(
                    f"offsets_for_times(): the target time for {tp.topic}-{tp.partition} must be an int of "
                    f"milliseconds since the epoch, got {ts!r}")
            if ts < 0:
                raise InvalidConfigurationError(
                    f"offsets_for_times(): the target time for {tp.topic}-{tp.partition} is {ts}; "
                    "it cannot be negative")
            queries[tp] = ts
        resp = self._list_offsets(queries, self._offsets_timeout("offsets_for_times", timeout_ms), "offsets_for_times")
        return {tp: (OffsetAndTimestamp(r.offset, r.timestamp, r.leader_epoch) if r.offset >= 0 else None)
                for tp, r in resp.items()}

    # ============================================================ iteration
    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records forever (or until ``consumer_timeout_ms`` passes without one)."""
        import time

        while True:
            start = time.monotonic() if not self.scheduler.simulated else self._now() / 1000
            while True:
                batch = self.poll(0.5 if self.consumer_timeout_ms is None else min(0.5, self.consumer_timeout_ms / 1000))
                if batch:
                    break
                now = time.monotonic() if not self.scheduler.simulated else self._now() / 1000
                if self.consumer_timeout_ms is not None and (now - start) * 1000 >= self.consumer_timeout_ms:
                    return
            yield from batch

    # ================================================================ close
    def close(self, autocommit: bool = True, timeout: float = 30.0) -> None:
        """Commit (with auto-commit), leave the group, stop. Idempotent.

        As Kafka's ``close(Duration)``, everything waits within ``timeout`` seconds in all: the final
        auto-commit, then the coordinator's answer to LeaveGroup (so the group no longer lists this member
        once ``close`` returns, even if the cluster is closed right after: the next consumer of the group
        does not wait for this one's session timeout). Past the timeout it closes anyway.

        A static member (``group_instance_id``) does not leave: the coordinator keeps its slot (and its
        partitions, unread meanwhile) until its session times out, so a consumer restarted with the same
        instance id within ``session_timeout_ms`` takes them back without a rebalance (Kafka's default).
        """
        if self._closed:
            return
        import time

        deadline = time.monotonic() + timeout
        vdeadline = self._now() + int(timeout * 1000)  # the same, in virtual time for a simulated cluster

        def left_s() -> float:
            if self.scheduler.simulated:
                return max(0.0, (vdeadline - self._now()) / 1000.0)
            return max(0.0, deadline - time.monotonic())

        try:
            if autocommit and self.enable_auto_commit:
                try:
                    self.commit(timeout=timeout)
                except PylogError:
                    pass
            self._run_callbacks()
            if not self._closed:
                answered = ClientFuture(self.scheduler)
                if self.scheduler.run_sync(lambda: self._leave_group(lambda: answered.set_result(None))):
                    try:
                        answered.result(left_s())
                    except PylogError:
                        pass  # the close timeout passed first: close anyway (Kafka does too)
        finally:
            if not self._closed:
                self.scheduler.run_sync(self._node.close_node)

    def _crash(self) -> None:
        """Testing hook: vanish like a killed process (no commit, no LeaveGroup); the session times out."""
        if not self._closed:
            self.scheduler.run_sync(self._node.close_node)

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self) -> None:
        assert not self.violations, f"consumer saw offsets at or above the HW: {self.violations[:5]}"
        if not self.scheduler.simulated:
            return

        def run() -> None:
            assert all(n >= 0 for n in self._buffered.values()), self._buffered
            assert sum(len(c[1]) - c[2] for c in self._buffer) == sum(self._buffered.values())

        self.scheduler.run_sync(run)


class PollResult(List[ConsumerRecord]):
    """What :meth:`Consumer.poll` returns: a list of records in fetch order (pylog's view), which also
    answers kafka-python's ``{TopicPartition: [records]}`` view through ``items()``, ``keys()``,
    ``values()``, ``get(tp)`` and ``result[tp]`` (a TopicPartition or ``(topic, partition)``).

    Iterating yields records (not partitions, as a kafka-python dict would) and ``len()`` counts
    records. Complexity: the per-partition view is built in O(records) on each call.
    """

    __slots__ = ()

    def _by_partition(self) -> Dict[TopicPartition, List[ConsumerRecord]]:
        out: Dict[TopicPartition, List[ConsumerRecord]] = {}
        for r in list.__iter__(self):
            out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
        return out

    def items(self) -> Any:
        return self._by_partition().items()

    def keys(self) -> Any:
        return self._by_partition().keys()

    def values(self) -> Any:
        return self._by_partition().values()

    def get(self, tp: Any, default: Any = None) -> Any:
        return self._by_partition().get(as_tp(tp, "poll result key"), default)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, slice)):
            return list.__getitem__(self, key)
        return self._by_partition()[as_tp(key, "poll result key")]


#: the keyword options Consumer takes (listed when an unknown one is passed)
_CONSUMER_OPTIONS = tuple(
    n for n, prm in inspect.signature(Consumer.__init__).parameters.items() if prm.kind is prm.KEYWORD_ONLY)

__all__ = ["Consumer", "ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp", "PollResult", "TopicPartition"]
