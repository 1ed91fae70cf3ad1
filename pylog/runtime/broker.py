"""A broker node: drives one ReplicaManager (and the Controller when it holds the role) on a scheduler.

The broker owns a log directory (``<cluster>/broker-<id>``) on a disk
(:class:`FileIO`, or :class:`SimulatedDiskIO` in simulations), registers its
handler with the transport, and runs a periodic tick that:

* claims or renews the controller role in the :class:`MetadataStore`
  (a crashed controller's lease expires after the session timeout; a clean
  stop resigns at once), and runs the :class:`Controller` while it holds it;
* heartbeats to the controller every ``heartbeat_interval_ms``;
* runs the replica manager's timers;
* hosts the :class:`GroupCoordinator` of the consumer groups whose
  ``__consumer_offsets`` partition it leads: when it becomes leader of such a
  partition it loads the partition's log into the coordinator, when it stops
  leading the coordinator unloads those groups (see docs/consumer-groups.md);
* hosts the transaction coordinator the same way for the ``__transaction_state``
  partitions it leads (:class:`pylog.runtime.txn_host.TxnHost`, docs/transactions.md).

Group requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DeleteGroups, TxnOffsetCommit, and the admin ListGroups, DescribeGroups,
OffsetDelete) go to the coordinator, and committed ``__consumer_offsets``
transaction markers complete its transactional offsets; FindCoordinator and ListOffsets are
answered here. Transaction requests (FindCoordinator(TRANSACTION), InitProducerId
with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and the
answers to its WriteTxnMarkers go to the :class:`TxnHost`. The tick also expires idle producer ids in every replica's
producer state (``expiry_config``: ``producer_id_expiration_ms``).

Messages addressed to :data:`CONTROLLER` go to the broker the store names.

Durability: :meth:`stop` with ``clean=True`` checkpoints HWs and closes every
log (flush + clean-shutdown marker); ``clean=False`` abandons the logs and,
on a simulated disk, drops every byte not fsynced.
Thread-safety: all methods run on the scheduler's thread.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Hashable, Optional, Tuple

from pylog.errors import CoordinatorNotAvailableError, InvalidConfigurationError, NotLeaderError
from pylog.replication import group_messages as gm
from pylog.replication.controller import Controller, MetadataStore
from pylog.replication.group_coordinator import GroupCoordinator
from pylog.replication.messages import (
    NO_LEADER,
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeat,
    FetchRequest,
    FetchResponse,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
    HeartbeatResponse,
    LeaderAndIsrRequest,
    Outbox,
    MultiProduceRequest,
    ProduceRequest,
    ProduceResponse,
    StopReplicaResponse,
    TopicsDeleted,
)
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group, read_log_entries
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC
from pylog.replication.txn_messages import TxnOffsetCommitRequest
from pylog.replication.partition import LEADER
from pylog.replication.replica_manager import CONTROLLER, ReplicaManager, ReplicaManagerConfig
from pylog.replication.txn_messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, \
    WriteTxnMarkersRequest, WriteTxnMarkersResponse
from pylog.runtime.scheduler import Scheduler, Timer
from pylog.runtime.txn_host import TxnHost, leader_of_state_partition
from pylog.runtime.transport.base import Transport
from pylog.storage.fileio import FileIO, SimulatedDiskIO
from pylog.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
)


class _NoRealSync(FileIO):
    """A FileIO whose fsyncs are no-ops on the real disk (the simulated disk tracks durability itself)."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


class SimDisk(SimulatedDiskIO, _NoRealSync):
    """SimulatedDiskIO (crash drops unsynced bytes) without paying for real fsyncs."""


#: messages a broker sends itself as a local call (no network to fail): the coordinators' appends to
#: their own partitions, the transaction coordinator's markers to and verifications from partitions it leads
_LOCAL = (ProduceRequest, ProduceResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
          AddPartitionsToTxnRequest, AddPartitionsToTxnResponse)


class Broker:
    """One in-process broker."""

    def __init__(
        self,
        broker_id: int,
        path: str,
        scheduler: Scheduler,
        transport: Transport,
        store: MetadataStore,
        *,
        disk: FileIO,
        config: ReplicaManagerConfig,
        log_config: Optional[Dict[str, object]] = None,
        heartbeat_interval_ms: int = 500,
        session_timeout_ms: int = 3_000,
        tick_ms: int = 50,
        expiry_config: Optional[Dict[str, int]] = None,
        stall_grace: bool = False,
        txn_config: Optional[Dict[str, int]] = None,
    ):
        self.broker_id = broker_id
        self.log_dir = os.path.join(path, f"broker-{broker_id}")
        self.scheduler = scheduler
        self.transport = transport
        self.store = store
        self.disk = disk
        self.config = config
        self.log_config = log_config or {}
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.tick_ms = tick_ms
        #: Real time: a tick that comes more than session_timeout_ms / 3 after the previous one means
        #: the loop thread (which every in-process broker shares) was stalled - a GC pause, a slow disk,
        #: a starved process. Nobody could heartbeat meanwhile, so that time is not held against the
        #: brokers: the controller discounts it, and the others do not take the controller lease on
        #: that tick. Off in simulations (virtual time never stalls).
        self.stall_grace = stall_grace
        self._last_tick_ms: Optional[int] = None
        #: offsets_retention_ms, offsets_retention_check_interval_ms, producer_id_expiration_ms,
        #: producer_id_expiration_check_interval_ms (Kafka's broker configs; unset: Kafka's defaults)
        self.expiry_config = dict(expiry_config or {})
        #: the transaction coordinator's settings: ``abort_timed_out_interval_ms`` (Kafka's
        #: transaction.abort.timed.out.transaction.cleanup.interval.ms), ``retry_backoff_ms``,
        #: ``transaction_version`` (2; 1 is the test-only switch without the KIP-890 bump),
        #: ``max_timeout_ms`` (Kafka's transaction.max.timeout.ms); unset: the defaults
        self.txn_config = dict(txn_config or {})
        self._next_producer_expiry_ms = -1
        self.rm: Optional[ReplicaManager] = None
        self.coordinator: Optional[GroupCoordinator] = None
        self.txn: Optional[TxnHost] = None
        self.controller: Optional[Controller] = None
        self.running = False
        self.incarnation = 0
        self.want_shutdown = False
        self.shutdown_ok = False
        self.leads = -1
        # A fresh directory, or one whose logs were closed cleanly, counts as a clean stop.
        self.last_stop_clean = not os.path.isdir(self.log_dir) or os.path.exists(
            os.path.join(self.log_dir, ".kafka_cleanshutdown")) or not any(
            "-" in n for n in os.listdir(self.log_dir))
        self._timer: Optional[Timer] = None
        self._wakeup_queued = False  # a _run_fetch_wakeups call is queued on the scheduler
        self._last_heartbeat = -(10**12)
        self._hb_applied: Optional[Tuple[Any, int, Tuple[Tuple[str, int, int], ...]]] = None
        #: :meth:`_sync_key` at the last coordinator sync (None: none yet)
        self._synced: Optional[Tuple[Any, ...]] = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.running:
            return
        # Incarnations keep growing across processes: the store remembers the last registration.
        self.incarnation = max(self.incarnation, self.store.broker_incarnations.get(self.broker_id, 0)) + 1
        self.rm = ReplicaManager(self.broker_id, self.log_dir, file_io=self.disk, clock_ms=self.scheduler.clock.now_ms,
                                 config=self.config, log_config=self.log_config, incarnation=self.incarnation)
        self.coordinator = GroupCoordinator(self.broker_id, request_timeout_ms=self.config.request_timeout_ms,
                                            incarnation=self.incarnation)
        for key in ("offsets_retention_ms", "offsets_retention_check_interval_ms"):
            if key in self.expiry_config:
                setattr(self.coordinator, key, int(self.expiry_config[key]))
        rm = self.rm
        self.txn = TxnHost(self.broker_id, self.store, rm.allocate_producer_id,
                           lambda p: leader_of_state_partition(rm, p),
                           request_timeout_ms=self.config.request_timeout_ms, incarnation=self.incarnation,
                           **self.txn_config)  # type: ignore[arg-type]
        rm.txn_verifier.coordinator_for = self.txn.coordinator_node
        self._next_producer_expiry_ms = -1
        self.running = True
        self.want_shutdown = self.shutdown_ok = False
        self._last_heartbeat = -(10**12)
        # __consumer_offsets markers complete the group coordinator's transactional offsets
        self.rm.marker_listener = self._on_marker_committed
        self.transport.register(self.broker_id, self._on_message)
        self._tick()

    def stop(self, clean: bool) -> None:
        """Stop now (the caller has already done a controlled shutdown if it wanted one)."""
        if not self.running:
            return
        self.running = False
        self.last_stop_clean = clean
        if self._timer is not None:
            self._timer.cancel()
        self.transport.unregister(self.broker_id)
        self.controller = None
        self.coordinator = None
        self.txn = None
        assert self.rm is not None
        try:
            self.rm.shutdown(clean=clean)
        except OSError:
            # A disk error during a clean stop: the logs that failed to close were left as a
            # crash leaves them, so the next start must recover (and say so to the controller).
            self.last_stop_clean = False
            self.store.resign(self.broker_id)
            raise
        if clean:
            self.store.resign(self.broker_id)
        elif isinstance(self.disk, SimulatedDiskIO):
            self.disk.crash()

    # -------------------------------------------------------------- plumbing
    def send(self, out: Outbox) -> None:
        """Deliver ``out`` from this broker: what a call on its controller returned (the cluster
        facade's topic admin). Loop thread only."""
        self._send(out)

    def _send(self, out: Outbox) -> None:
        for dst, msg in out.items:
            if dst == CONTROLLER:
                dst = self.store.controller_id
                if dst is None:
                    continue
            if dst == self.broker_id and isinstance(msg, _LOCAL):
                # The group coordinator appending to its own offsets partition: a local call, as
                # Kafka's coordinator appends through its own ReplicaManager (no network to fail);
                # the transaction coordinator's markers and verifications likewise.
                self.scheduler.call_soon(self._deliver_local, self.incarnation, msg)
                continue
            self.transport.send(self.broker_id, dst, msg)

    def _deliver_local(self, incarnation: int, msg: Any) -> None:
        if self.running and self.incarnation == incarnation:
            self._on_message(self.broker_id, msg)

    def _on_message(self, src: Hashable, msg: Any) -> None:
        if not self.running:
            return
        now = self.scheduler.clock.now_ms()
        if msg.__class__ is ProduceRequest or msg.__class__ is MultiProduceRequest:  # the common messages: none
            # of the checks below applies
            rm = self.rm
            self._send(rm.handle(src, msg, now))  # type: ignore[union-attr]
            if rm.fetch_wakeups and not self._wakeup_queued:  # type: ignore[union-attr]
                self._queue_fetch_wakeups()
            return
        if isinstance(msg, (BrokerHeartbeat, AlterPartitionRequest, StopReplicaResponse, AllocateProducerIdsRequest)):
            if self.controller is not None and self.controller.active and self.store.controller_id == self.broker_id:
                self._send(self.controller.handle(src, msg, now))
            return
        if isinstance(msg, HeartbeatResponse):
            self.leads = msg.leads
            self.shutdown_ok = msg.should_shut_down
            return
        cls = msg.__class__
        if cls is ReplicaFetchRequest or cls is ReplicaFetchResponse or cls is FetchRequest or cls is FetchResponse:
            # replication: none of the below applies
            self._send(self.rm.handle(src, msg, now))  # type: ignore[union-attr]
            return
        assert self.rm is not None and self.coordinator is not None and self.txn is not None
        if TxnHost.handles(msg):
            self._sync_coordinator_if_moved(now)
            self._send(self.txn.handle(src, msg, now))
            return
        if isinstance(msg, ProduceResponse) and self.txn.owns_correlation(msg.correlation_id):
            self._send(self.txn.on_produce_response(msg, now))
            return
        if isinstance(msg, (gm.GroupRequest, gm.ListGroupsRequest, TxnOffsetCommitRequest)):
            self._sync_coordinator_if_moved(now)
            if isinstance(msg, gm.FindCoordinatorRequest):
                self.transport.send(self.broker_id, src, self._find_coordinator(msg))
            else:
                self._send(self.coordinator.handle(src, msg, now))
            return
        if isinstance(msg, ProduceResponse) and self.coordinator.owns_correlation(msg.correlation_id):
            self._send(self.coordinator.on_produce_response(msg, now))
            return
        if isinstance(msg, gm.ListOffsetsRequest):
            self.transport.send(self.broker_id, src, self._list_offsets(msg))
            return
        if isinstance(msg, TopicsDeleted):
            self._sync_coordinator_if_moved(now)
            self._send(self.coordinator.on_topics_deleted(msg.topics, now))
            return
        self._send(self.rm.handle(src, msg, now))
        if self.rm.fetch_wakeups and not self._wakeup_queued:
            self._queue_fetch_wakeups()
        if isinstance(msg, LeaderAndIsrRequest):
            self._sync_coordinator(now)

    def _queue_fetch_wakeups(self) -> None:
        """Answer the fetches a produce woke after the messages queued now (see
        ``ReplicaManager.fetch_wakeups``): a producer's pipelined requests are all appended
        first, and each parked follower gets them in one response."""
        self._wakeup_queued = True
        self.scheduler.call_soon(self._run_fetch_wakeups)

    def _run_fetch_wakeups(self) -> None:
        # (For the current replica manager, also after a restart: its parked fetches are
        # answered only if they can be, whoever asks.)
        self._wakeup_queued = False
        if self.running and self.rm is not None:
            self._send(self.rm.complete_fetch_wakeups(self.scheduler.clock.now_ms()))

    # ---------------------------------------------------------- coordinator
    def _sync_key(self) -> Tuple[Any, ...]:
        """What :meth:`_sync_coordinator`'s result depends on: the replica manager and its
        ``epochs_version`` (bumped by every LeaderAndIsr, AlterPartition answer and StopReplica, and
        when a replica is added: the only ways a replica's role or leader epoch changes), and the two
        topics' metadata entries. O(1)."""
        topics = self.store.topics
        txn_cfg, offsets_cfg = topics.get(TRANSACTION_STATE_TOPIC), topics.get(OFFSETS_TOPIC)
        return (self.rm, self.rm.epochs_version if self.rm is not None else -1,
                txn_cfg, txn_cfg.partitions if txn_cfg is not None else -1,
                offsets_cfg, offsets_cfg.partitions if offsets_cfg is not None else -1)

    def _sync_coordinator_if_moved(self, now: int) -> None:
        """:meth:`_sync_coordinator` when leadership may have changed since the last one (see
        :meth:`_sync_key`), else nothing: a coordinator request costs O(1) here instead of a walk over
        every ``__transaction_state`` and ``__consumer_offsets`` partition. The tick and every
        LeaderAndIsr still sync unconditionally."""
        key = self._sync_key()
        if key != self._synced:
            self._sync_coordinator(now)

    def _sync_coordinator(self, now: int) -> None:
        """Load the offsets (and ``__transaction_state``) partitions this broker newly leads into the
        coordinators; unload the lost ones. O(partitions of the two topics)."""
        co, rm = self.coordinator, self.rm
        if co is None or rm is None:
            return
        self._synced = self._sync_key()
        if self.txn is not None:
            self._send(self.txn.sync(now))
        cfg = self.store.topics.get(OFFSETS_TOPIC)
        if cfg is None:
            return
        co.num_partitions = cfg.partitions
        for p in range(cfg.partitions):
            part = rm.partitions.get((OFFSETS_TOPIC, p))
            leading = part is not None and part.role == LEADER
            if leading and co.loaded.get(p) != part.leader_epoch:  # type: ignore[union-attr]
                self._send(co.load(p, part.leader_epoch, read_log_entries(part.log), now))  # type: ignore[union-attr]
            elif not leading and p in co.loaded:
                self._send(co.unload(p))

    def _on_marker_committed(self, topic: str, partition: int, producer_id: int, committed: bool) -> None:
        """The replica manager's ``marker_listener``: a COMMIT/ABORT marker this broker leads is committed."""
        if topic == OFFSETS_TOPIC and self.running and self.coordinator is not None and self.rm is not None:
            # the producer's epoch as the partition knows it now (the marker's, or a later one): the
            # coordinator then refuses a TxnOffsetCommit of an older epoch (a fenced zombie's)
            part = self.rm.partitions.get((topic, partition))
            entry = part.log.producer_state.producers.get(producer_id) if part is not None else None
            self._send(self.coordinator.complete_txn(partition, producer_id, committed, self.scheduler.clock.now_ms(),
                                                     producer_epoch=entry.epoch if entry is not None else -1))

    def _find_coordinator(self, req: gm.FindCoordinatorRequest) -> gm.FindCoordinatorResponse:
        cfg = self.store.topics.get(OFFSETS_TOPIC)
        if cfg is None:
            return gm.FindCoordinatorResponse(req.correlation_id, error=CoordinatorNotAvailableError,
                                              message=f"the {OFFSETS_TOPIC} topic does not exist yet")
        p = partition_for_group(req.group_id, cfg.partitions)
        assert self.coordinator is not None
        if p in self.coordinator.loaded:
            return gm.FindCoordinatorResponse(req.correlation_id, node_id=self.broker_id)
        st = self.store.partitions.get((OFFSETS_TOPIC, p))
        if st is None or st.leader == NO_LEADER:
            return gm.FindCoordinatorResponse(req.correlation_id, error=CoordinatorNotAvailableError,
                                              message=f"{OFFSETS_TOPIC}-{p} (group {req.group_id!r}) has no leader")
        return gm.FindCoordinatorResponse(req.correlation_id, node_id=st.leader)

    def _list_offsets(self, req: gm.ListOffsetsRequest) -> gm.ListOffsetsResponse:
        """The earliest offset (log start) or the latest visible one: the HW, the LSO under read_committed
        (``isolation_level`` 1, Kafka's ``lastFetchableOffset``); a lookup by time finds only records below it."""
        assert self.rm is not None
        part = self.rm.partitions.get((req.topic, req.partition))
        base = dict(topic=req.topic, partition=req.partition, correlation_id=req.correlation_id)
        if part is None or part.role != LEADER:
            return gm.ListOffsetsResponse(**base, error=NotLeaderError,  # type: ignore[arg-type]
                                          message=f"broker {self.broker_id} is not the leader of {req.topic}-{req.partition}")
        visible = part.last_stable_offset if req.isolation_level == 1 else part.high_watermark
        if req.timestamp == gm.EARLIEST_TIMESTAMP:
            offset = part.log.log_start_offset
        elif req.timestamp == gm.LATEST_TIMESTAMP:
            offset = visible
        elif req.timestamp < 0:
            return gm.ListOffsetsResponse(**base, error=InvalidConfigurationError,  # type: ignore[arg-type]
                                          message=f"ListOffsets for {req.topic}-{req.partition}: timestamp "
                                                  f"{req.timestamp} is neither -2, -1 nor a time >= 0")
        else:
            # Kafka's fetchOffsetByTimestamp: only records below the HW count; none -> offset -1.
            found = part.log.offset_for_time(req.timestamp)
            if found is None or found >= visible:
                return gm.ListOffsetsResponse(**base, offset=-1, leader_epoch=-1)  # type: ignore[arg-type]
            ts = -1
            for rec in part.log.read(found, 1 << 20, max_offset=found + 1):
                ts = rec.timestamp if rec.timestamp is not None else -1
                break
            return gm.ListOffsetsResponse(**base, offset=found, leader_epoch=part.leader_epoch,  # type: ignore[arg-type]
                                          timestamp=ts)
        return gm.ListOffsetsResponse(**base, offset=offset, leader_epoch=part.leader_epoch)  # type: ignore[arg-type]

    def _tick(self) -> None:
        if not self.running:
            return
        now = self.scheduler.clock.now_ms()
        stalled = 0
        if self.stall_grace and self._last_tick_ms is not None and now - self._last_tick_ms > self.session_timeout_ms // 3:
            stalled = now - self._last_tick_ms
        self._last_tick_ms = now
        previous = self.store.controller_id
        may_claim = not stalled or previous == self.broker_id
        if may_claim and self.store.try_claim(self.broker_id, now, self.session_timeout_ms, self.incarnation):
            if self.controller is None or self.controller.epoch != self.store.controller_epoch:
                self.controller = Controller(self.broker_id, self.store, session_timeout_ms=self.session_timeout_ms,
                                             now_ms=now, previous_controller=previous if previous != self.broker_id else None)
                # Register this incarnation first: if this broker restarted, its old
                # leaderships are failed over before the full state goes out.
                applied = tuple((t, p, part.partition_epoch) for (t, p), part in self.rm.partitions.items())  # type: ignore[union-attr]
                self._send(self.controller.handle(self.broker_id, BrokerHeartbeat(self.broker_id, self.incarnation, False, applied,
                                                                                  unclean_restart=not self.last_stop_clean), now))
                self._send(self.controller.activate(now))
            if stalled:
                self.controller.discount_stall(stalled, now)
            self._send(self.controller.tick(now))
        elif may_claim:
            self.controller = None
        if now - self._last_heartbeat >= self.heartbeat_interval_ms:
            self._last_heartbeat = now
            self._send_heartbeat()
        assert self.rm is not None and self.coordinator is not None
        self._send(self.rm.tick(now))
        self._sync_coordinator(now)
        self._send(self.coordinator.tick(now))
        assert self.txn is not None
        self._send(self.txn.tick(now))
        self._expire_producers(now)
        self._timer = self.scheduler.call_later(self.tick_ms, self._tick)

    def _expire_producers(self, now: int) -> None:
        """Every ``producer_id_expiration_check_interval_ms``: each replica (leader or follower) forgets
        producer ids idle for ``producer_id_expiration_ms`` (Kafka's PeriodicProducerExpirationCheck)."""
        if now < self._next_producer_expiry_ms or self.rm is None:
            return
        cfg = self.expiry_config
        self._next_producer_expiry_ms = now + int(cfg.get("producer_id_expiration_check_interval_ms",
                                                          DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS))
        expiration = int(cfg.get("producer_id_expiration_ms", DEFAULT_PRODUCER_ID_EXPIRATION_MS))
        for part in self.rm.partitions.values():
            part.producer_state.remove_expired_producers(now, expiration)

    def _send_heartbeat(self) -> None:
        out = Outbox()
        assert self.rm is not None
        version = self.rm.epochs_version
        if self._hb_applied is None or self._hb_applied[0] is not self.rm or self._hb_applied[1] != version:
            # rebuilt only when a replica's partition epoch may have changed (O(1) per steady heartbeat)
            applied = tuple((t, p, part.partition_epoch) for (t, p), part in self.rm.partitions.items())
            self._hb_applied = (self.rm, version, applied)
        applied = self._hb_applied[2]
        out.send(CONTROLLER, BrokerHeartbeat(self.broker_id, self.incarnation, self.want_shutdown, applied,
                                             unclean_restart=not self.last_stop_clean))
        self._send(out)

    def request_controlled_shutdown(self) -> None:
        self.want_shutdown = True
        self._send_heartbeat()

    def _check(self) -> None:
        if self.rm is not None and self.running:
            self.rm._check()
        if self.controller is not None:
            self.controller._check()
        if self.coordinator is not None and self.running:
            self.coordinator._check()
        if self.txn is not None and self.running:
            self.txn._check()


__all__ = ["Broker", "SimDisk"]
