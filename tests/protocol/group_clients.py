"""One small driver per real Kafka client (kafka-python, confluent-kafka, aiokafka) for the group tests:
start a group member, poll, commit synchronously, read its assignment, close.

Every client is configured for quick rebalances (session timeout 6 s, heartbeats every 300 ms, rebalance
timeout 20 s); the coordinator's ``group.initial.rebalance.delay.ms`` is 0 in pylog
(``GroupCoordinator.initial_rebalance_delay_ms``), so nothing waits on a timer when members come and go.
All three use the eager ``range`` assignor by default (a member gives up every partition before it rejoins).
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

#: (partition, offset, value) of one record a member read
Rec = Tuple[int, int, bytes]

SESSION_MS = 6_000
HEARTBEAT_MS = 300
REBALANCE_MS = 20_000
POLL_S = 0.1
#: see :class:`KafkaPythonMember`: a poll returns as soon as records arrive, so this costs nothing when busy
KAFKA_PYTHON_POLL_MS = 1_000


class Member:
    """A started group member of one client library."""

    name: str

    def poll(self) -> List[Rec]:
        raise NotImplementedError

    def assignment(self) -> Set[int]:
        raise NotImplementedError

    def commit(self, metadata: Optional[str] = None) -> bool:
        """Commit the positions of what :meth:`poll` returned; False if the group refused (rebalance)."""
        raise NotImplementedError

    def take(self) -> Tuple[List[Rec], Set[int]]:
        """Poll once and commit what was read: (records, partitions whose commit the group refused)."""
        recs = self.poll()
        failed = {p for p, _, _ in recs} if recs and not self.commit() else set()
        return recs, failed

    def close(self) -> Tuple[List[Rec], Set[int]]:
        """Leave the group and close; returns what was read and not yet taken (threaded members)."""
        raise NotImplementedError


# ------------------------------------------------------------------ kafka-python
class KafkaPythonMember(Member):
    """A KafkaConsumer polled by a thread of its own (``threaded``), as an application runs one.

    kafka-python 3.0.12 applies a JoinGroup/SyncGroup result only to a ``poll()`` waiting when it arrives:
    one that finishes between polls is dropped and the member joins again - and a leader joining again
    starts another rebalance (on Kafka too). Several consumers polled in turn by one thread therefore
    rebalance without end; one thread per consumer polling back to back (or one consumer whose polls
    last longer than a join round trip) does not.
    """

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, threaded: bool = True,
                 instance: Optional[str] = None):
        from kafka import KafkaConsumer

        self.name = name
        self.topic = topic
        extra = {} if instance is None else {"group_instance_id": instance}
        self.c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=name, **extra,
                               auto_offset_reset="earliest", enable_auto_commit=False,
                               session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                               max_poll_interval_ms=REBALANCE_MS, request_timeout_ms=REBALANCE_MS + 5_000)
        self._lock = threading.Lock()
        self._read: List[Rec] = []
        self._failed: Set[int] = set()
        self._assigned: Set[int] = set()
        self._error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if threaded:
            self._thread = threading.Thread(target=self._run, name=f"kafka-python-{name}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                recs = self.poll()
                failed = {p for p, _, _ in recs} if recs and not self.commit() else set()
                assigned = {tp.partition for tp in self.c.assignment()}
                with self._lock:
                    self._read.extend(recs)
                    self._failed |= failed
                    self._assigned = assigned
        except BaseException as exc:  # handed to the test thread by take()/close()
            self._error = exc

    def _drain(self) -> Tuple[List[Rec], Set[int]]:
        if self._error is not None:
            raise self._error
        with self._lock:
            out = (self._read, self._failed)
            self._read, self._failed = [], set()
        return out

    def take(self) -> Tuple[List[Rec], Set[int]]:
        if self._thread is None:
            return super().take()
        time.sleep(POLL_S)  # the member's thread polls meanwhile
        return self._drain()

    def poll(self) -> List[Rec]:
        out: List[Rec] = []
        # long enough for a join round trip to finish inside one poll, even on a loaded machine
        for tp, recs in self.c.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).items():
            out.extend((tp.partition, r.offset, r.value) for r in recs)
        return out

    def assignment(self) -> Set[int]:
        if self._thread is not None:
            with self._lock:
                return set(self._assigned)
        return {tp.partition for tp in self.c.assignment()}

    def commit(self, metadata: Optional[str] = None) -> bool:
        from kafka.errors import CommitFailedError, RebalanceInProgressError
        from kafka.structs import OffsetAndMetadata, TopicPartition

        try:
            if metadata is None:
                self.c.commit()
            else:
                self.c.commit({TopicPartition(self.topic, p): OffsetAndMetadata(self.c.position(
                    TopicPartition(self.topic, p)), metadata, -1) for p in self.assignment()})
            return True
        except (CommitFailedError, RebalanceInProgressError):
            return False

    def close(self) -> Tuple[List[Rec], Set[int]]:
        left: Tuple[List[Rec], Set[int]] = ([], set())
        if self._thread is not None:
            self._stop.set()
            self._thread.join(60)
            left = self._drain()
        self.c.close(autocommit=False)
        return left


# --------------------------------------------------------------- confluent-kafka
class ConfluentMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, name: str, instance: Optional[str] = None):
        from confluent_kafka import Consumer

        self.name = name
        self.topic = topic
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                "max.poll.interval.ms": REBALANCE_MS, "topic.metadata.refresh.interval.ms": 1_000}
        if instance is not None:
            conf["group.instance.id"] = instance
        self.c = Consumer(conf)
        self.c.subscribe([topic])
        self._positions: Dict[int, int] = {}

    def poll(self) -> List[Rec]:
        out: List[Rec] = []
        for m in self.c.consume(num_messages=500, timeout=POLL_S):
            if m.error() is None:
                out.append((m.partition(), m.offset(), m.value()))
                self._positions[m.partition()] = m.offset() + 1
        return out

    def assignment(self) -> Set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self, metadata: Optional[str] = None) -> bool:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        owned = self.assignment()
        offsets = []
        for p, off in self._positions.items():
            if p in owned:
                offsets.append(TopicPartition(self.topic, p, off) if metadata is None
                               else TopicPartition(self.topic, p, off, metadata=metadata))
        if not offsets:
            return True
        try:
            res = self.c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in (KafkaError._NO_OFFSET,):
                return True
            if err.code() in (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
                              KafkaError.UNKNOWN_MEMBER_ID, KafkaError._ASSIGNMENT_LOST):
                return False
            raise
        return all(tp.error is None for tp in res or [])

    def close(self) -> Tuple[List[Rec], Set[int]]:
        self.c.close()
        return [], set()


# ----------------------------------------------------------------------- aiokafka
class _Loop:
    """One asyncio loop on a thread, shared by a test's aiokafka members."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="aiokafka-test-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class AioKafkaMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, name: str, loop: _Loop,
                 instance: Optional[str] = None):
        from aiokafka import AIOKafkaConsumer

        self.name = name
        self.topic = topic
        self.loop = loop
        self.bootstrap = bootstrap

        async def make() -> Any:
            extra = {} if instance is None else {"group_instance_id": instance}
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=name, **extra,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                 max_poll_interval_ms=REBALANCE_MS, rebalance_timeout_ms=REBALANCE_MS,
                                 request_timeout_ms=REBALANCE_MS + 5_000)
            await c.start()
            return c

        self.c = loop.run(make())

    def poll(self) -> List[Rec]:
        async def get() -> List[Rec]:
            batches = await self.c.getmany(timeout_ms=int(POLL_S * 1000))
            return [(tp.partition, r.offset, r.value) for tp, recs in batches.items() for r in recs]

        return self.loop.run(get())

    def assignment(self) -> Set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self, metadata: Optional[str] = None) -> bool:
        from aiokafka.errors import CommitFailedError, IllegalStateError, RebalanceInProgressError
        from aiokafka.structs import OffsetAndMetadata, TopicPartition

        async def go() -> bool:
            try:
                if metadata is None:
                    await self.c.commit()
                else:
                    await self.c.commit({TopicPartition(self.topic, p): OffsetAndMetadata(
                        await self.c.position(TopicPartition(self.topic, p)), metadata) for p in self.assignment()})
                return True
            except (CommitFailedError, RebalanceInProgressError, IllegalStateError):
                return False

        return self.loop.run(go())

    def close(self) -> Tuple[List[Rec], Set[int]]:
        self.loop.run(self.c.stop())
        return [], set()


# ------------------------------------------------------------------------ factory
class Clients:
    """Starts members of one client library; :meth:`close` closes whatever is left."""

    def __init__(self, kind: str, bootstrap: str):
        self.kind = kind
        self.bootstrap = bootstrap
        self._loop: Optional[_Loop] = _Loop() if kind == "aiokafka" else None
        self.members: List[Member] = []

    def member(self, group: str, topic: str, name: str, threaded: bool = True, instance: Optional[str] = None) -> Member:
        """A member named ``name`` (its client id); ``instance``: a static member's group.instance.id."""
        if self.kind == "kafka-python":
            m: Member = KafkaPythonMember(self.bootstrap, group, topic, name, threaded, instance)
        elif self.kind == "confluent-kafka":
            m = ConfluentMember(self.bootstrap, group, topic, name, instance)
        else:
            assert self._loop is not None
            m = AioKafkaMember(self.bootstrap, group, topic, name, self._loop, instance)
        self.members.append(m)
        return m

    def close(self, m: Member) -> Tuple[List[Rec], Set[int]]:
        self.members.remove(m)
        return m.close()

    def close_all(self) -> None:
        for m in list(self.members):
            try:
                self.close(m)
            except Exception:
                pass
        if self._loop is not None:
            self._loop.close()
            self._loop = None


KINDS = ("kafka-python", "confluent-kafka", "aiokafka")
