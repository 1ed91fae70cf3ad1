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
* ``isolation_level``: ``"read_uncommitted"`` (every record below the high
  watermark) or ``"read_committed"`` (Kafka's: only below the last stable
  offset, where no transaction is open, and without the records of aborted
  transactions; the position moves past transaction markers and aborted data;
  ``end_offsets`` and lag measure to the LSO). docs/transactions.md, "Read side".

Every record returned has an offset below the HW (read_committed: the LSO) the
leader reported with it (:meth:`Consumer._check`).

The consumer is a facade over three parts, one concept each, which it
inherits (Kafka's ``KafkaConsumer`` over ``SubscriptionState``, ``Fetcher``
and ``ConsumerCoordinator``): :mod:`pylog.client.subscription` (what it
reads and from where), :mod:`pylog.client.fetcher` (fetch requests and the
buffer of decoded records) and :mod:`pylog.client.consumer_coordinator`
(group membership and commits); its options are a validated
:class:`~pylog.client.config.ConsumerConfig`. This module owns the public
API, the loop-thread marshalling, waiting, ``poll`` and ``close``.

Complexity: ``poll`` is O(records returned) plus one columnar decode per
fetched batch; a rebalance is O(partitions) per member.
Durability: what survives a consumer crash is what was committed.
Thread-safety: one consumer per thread (as Kafka's); the state lives on the
cluster's scheduler thread and calls are marshalled there, except that a
real-time ``poll`` takes already-buffered records on the caller's thread
under the consumer's buffer lock (one loop round trip less per poll).
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Pattern, Sequence, Set, Tuple, Union

from pylog.client._node import ClientFuture, ClientNode
from pylog.client.config import ConsumerConfig, topic_list
from pylog.client.consumer_coordinator import ConsumerCoordinator, MemberState
from pylog.client.fetcher import Fetcher
from pylog.client.subscription import TP, SubscriptionState
from pylog.client.types import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
    as_commit_offsets,
    as_tp,
    as_tps,
)
from pylog.errors import (
    InvalidConfigurationError,
    InvalidGroupIdError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    PylogError,
    RequestTimedOutError,
    SerializationError,
)
from pylog.metrics import metric
from pylog.replication import group_messages as gm
from pylog.replication.txn_messages import ConsumerGroupMetadata
from pylog.runtime.cluster_context import ClusterContext

logger = logging.getLogger(__name__)



class Consumer(SubscriptionState, Fetcher, ConsumerCoordinator):
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

    def __init__(self, cluster: ClusterContext, *, group_id: Optional[str] = None, topics: Sequence[str] = (),
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
        # The keyword options as given: the signature lists ConsumerConfig's fields with its defaults
        # (tests/unit/test_client_config.py keeps the two equal), so help() and inspect show them.
        options = dict(locals())
        del options["self"], options["cluster"], options["unknown"]
        #: every option, validated (:class:`~pylog.client.config.ConsumerConfig`); copied to attributes below
        self.config = config = ConsumerConfig.from_options({**options, **unknown})
        self._key_deserializer = config.key_deserializer_fn
        self._value_deserializer = config.value_deserializer_fn
        self.cluster = cluster
        self.store = cluster.metadata
        self.scheduler = cluster.scheduler
        self.group_id = config.group_id
        #: KIP-345 static membership (None: a dynamic member)
        self.group_instance_id = config.group_instance_id
        self.auto_offset_reset = config.auto_offset_reset
        self.enable_auto_commit = config.enable_auto_commit and config.group_id is not None
        self.auto_commit_interval_ms = config.auto_commit_interval_ms
        self.isolation_level = config.isolation_level
        self.session_timeout_ms = config.session_timeout_ms
        self.heartbeat_interval_ms = config.heartbeat_interval_ms
        assert config.rebalance_timeout_ms is not None  # ConsumerConfig fills it in
        self.rebalance_timeout_ms = config.rebalance_timeout_ms
        self.max_poll_interval_ms = config.max_poll_interval_ms
        self.fetch_max_wait_ms = config.fetch_max_wait_ms
        self.max_partition_fetch_bytes = config.max_partition_fetch_bytes
        self.request_timeout_ms = config.request_timeout_ms
        self.max_poll_records = config.max_poll_records
        self.retry_backoff_ms = config.retry_backoff_ms
        self.consumer_timeout_ms = config.consumer_timeout_ms
        self.client_id = config.client_id or "pylog-consumer"
        self._client_id_given = config.client_id is not None
        self._init_subscription(config.rebalance_listener)
        self._init_fetcher()
        self._init_coordinator(config.assignors)
        self._error: Optional[BaseException] = None  # raised by the next poll (or position)
        self._next_attempt = 0  # when to retry what failed (coordinator lookup, join, position)
        self._tick_timer: Any = None
        self._commit_callbacks: Deque[Tuple[Callable[..., Any], Dict[TP, int], Optional[BaseException]]] = deque()
        self._next_auto_commit = 0
        self._changed = threading.Event()  # set when a position is resolved (or an error waits): position()
        self._closed = False
        self._node: ClientNode = self.scheduler.run_sync(
            lambda: ClientNode("consumer", self.scheduler, cluster.transport))
        self._node.on_close.append(self._on_node_closed)
        self.scheduler.run_sync(self._start_tick)
        self._next_auto_commit = self._now() + config.auto_commit_interval_ms
        #: when poll() was last called; None before the first poll, whose time alone starts the poll timer
        #: (pylog joins at construction; Kafka's consumer joins inside its first poll and resets the timer
        #: when the join completes, so an application that builds consumers long before polling keeps them)
        self._last_poll_ms: Optional[int] = None
        if config.topics or config.pattern is not None:
            self.subscribe(list(config.topics) or None, pattern=config.pattern)

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
            topics = topic_list(topics, "subscribe() topics")
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
            if self._state is not MemberState.UNJOINED and self.member_id:
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


    # ================================================================= seek
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


    # =============================================================== commits
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

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group metadata for a transactional producer's ``send_offsets_to_transaction``
        (Kafka's ``groupMetadata()``): group id, generation, member id and static instance id as of now
        (the group coordinator refuses the transactional commit of a member a rebalance has fenced).
        :class:`InvalidGroupIdError` without a ``group_id``. O(1); any thread."""
        group_id = self.group_id
        if group_id is None:
            raise InvalidGroupIdError("group_metadata() needs a consumer with a group_id")
        return self._call(lambda: ConsumerGroupMetadata(group_id, self.generation, self.member_id,
                                                        self.group_instance_id))

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
        """Per assigned partition: the last HW seen minus the position (records not yet returned); under
        ``read_committed`` the last LSO seen (Kafka's consumer lag: what this consumer can still read)."""
        def run() -> Dict[TP, int]:
            end = self._lso if self._read_committed else self._hw
            return {tp: max(0, end[tp] - self._positions[tp]) for tp in self._assignment
                    if tp in end and tp in self._positions}

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
            end = self._lso if self._read_committed else self._hw
            for tp in self._assignment:
                if tp in end and tp in self._positions:
                    out.append(metric("pylog_consumer_records_lag", "gauge",
                                      "High watermark (read_committed: last stable offset) last seen minus "
                                      "the consumer's position.",
                                      max(0, end[tp] - self._positions[tp]), client_id=cid, group=group,
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
        """The end of each partition visible to this consumer, as Kafka's ``endOffsets``: the high
        watermark (the offset the next appended record will get once replicated), or under
        ``read_committed`` the last stable offset (the first offset of the oldest open transaction,
        if below the HW).

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
__all__ = ["Consumer", "ConsumerConfig", "ConsumerRecord", "MemberState", "OffsetAndMetadata", "OffsetAndTimestamp",
           "PollResult", "TopicPartition"]
