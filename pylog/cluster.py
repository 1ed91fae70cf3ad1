"""``pylog.Cluster``: N in-process brokers, in real time or in seeded virtual time.

>>> import tempfile, pylog.cluster
>>> c = pylog.cluster.Cluster(tempfile.mkdtemp(), brokers=3, seed=7)
>>> c.create_topic("orders", partitions=1, replication_factor=3, min_insync_replicas=2)
>>> c.producer(acks="all").send("orders", b"v").result().offset
0
>>> c.close()

* ``Cluster(path, brokers=3)`` - real time: one background loop thread runs
  every broker, the controller and the transport (DirectTransport); client
  calls from any thread are handed to it. :meth:`close` joins it.
* ``Cluster(path, brokers=3, seed=7)`` - simulation: virtual time, a
  :class:`SimulatedNetwork` with seeded latency, and a :class:`SimDisk` per
  broker whose crash loses every byte not fsynced; everything is
  single-threaded and replays exactly from ``seed``. A blocking call such as
  ``send(...).result()`` runs virtual time until it completes.

Each broker keeps its partitions in ``<path>/broker-<id>/<topic>-<partition>``.
Controller state lives in a :class:`MetadataStore` owned by the cluster
object (the ZooKeeper/KRaft quorum's role), saved to
``<path>/cluster-metadata.json`` so the directory reopens with its topics;
see docs/replication.md.

Durability: acknowledged ``acks=all`` writes are in the page cache of at least
``min_insync_replicas`` brokers; they survive any ``RF - min_insync_replicas``
broker crashes. Nothing is fsynced per write unless ``flush_messages=1`` is
passed in ``log_config``.
Thread-safety: every public method may be called from any thread.
"""
from __future__ import annotations

import os
import random
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from pylog.client.consumer import ConsumerConfig
from pylog.facade import ClusterFacade
from pylog.metrics import Metric, metric
from pylog.errors import (
    BrokerNotAvailableError,
    InvalidConfigurationError,
    KafkaStorageError,
    LeaderNotAvailableError,
    MetadataStorageError,
    PylogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from pylog.replication.controller import EXTRA_TOPIC_CONFIGS, Controller, MetadataStore, TopicConfig, offsets_topic_replication, \
    transaction_state_replication
from pylog.replication.topic_configs import TOPIC_FIELDS, kafka_name, normalize_topic_configs
from pylog.replication.messages import NO_LEADER, PartitionState
from pylog.replication.offsets_topic import DEFAULT_OFFSETS_PARTITIONS, OFFSETS_TOPIC
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC
from pylog.replication.partition import FOLLOWER, LEADER, Partition, records_equal_below
from pylog.replication.replica_manager import ReplicaManagerConfig
from pylog.runtime.broker import Broker, SimDisk
from pylog.runtime.cluster_context import MetadataView, PartitionInfo
from pylog.runtime.log_maintenance import run_maintenance
from pylog.runtime.scheduler import RealScheduler, Scheduler, SimScheduler
from pylog.runtime.transport.base import Transport
from pylog.runtime.transport.direct import DirectTransport
from pylog.runtime.transport.simnet import SimulatedNetwork
from pylog.storage import adopt
from pylog.storage.fileio import FileIO
from pylog.storage.log import LogConfig, validate_topic
from pylog.storage.logdir import CLUSTER_METADATA_FILE, check_not_locked

if TYPE_CHECKING:  # imported when listen=... asks for it (the listener pulls in the Kafka schemas)
    from pylog.protocol.server import KafkaServer


METADATA_FILE = CLUSTER_METADATA_FILE


class Cluster(ClusterFacade):
    """In-process Kafka-style cluster of ``brokers`` brokers under ``path``.

    Implements :class:`~pylog.runtime.cluster_context.ClusterContext` (for its
    producers and consumers) and :class:`~pylog.runtime.cluster_context.ServedCluster`
    (for its Kafka listener); the client calls come from
    :class:`~pylog.facade.ClusterFacade`.
    """

    def __init__(
        self,
        path: "str | os.PathLike[str]",
        brokers: int = 3,
        seed: Optional[int] = None,
        *,
        replica_lag_time_max_ms: Optional[int] = None,
        session_timeout_ms: Optional[int] = None,
        heartbeat_interval_ms: Optional[int] = None,
        request_timeout_ms: int = 30_000,
        min_latency_ms: int = 1,
        max_latency_ms: int = 5,
        loss: float = 0.0,
        log_config: Optional[Dict[str, object]] = None,
        offsets_retention_ms: Optional[int] = None,
        offsets_retention_check_interval_ms: Optional[int] = None,
        producer_id_expiration_ms: Optional[int] = None,
        producer_id_expiration_check_interval_ms: Optional[int] = None,
        transaction_abort_timed_out_transaction_cleanup_interval_ms: Optional[int] = None,
        transaction_max_timeout_ms: Optional[int] = None,
        listen: Optional[str] = None,
        auto_create_topics: bool = True,
        num_partitions: int = 1,
        default_replication_factor: Optional[int] = None,
        socket_request_max_bytes: int = 100 * 1024 * 1024,
        connections_max_idle_ms: int = 600_000,
        partition_factory: Optional[Callable[..., Any]] = None,
    ):
        #: Kafka's ``auto.create.topics.enable`` / ``num.partitions`` for the wire-protocol listener
        self.auto_create_topics = bool(auto_create_topics)
        self.num_partitions = num_partitions
        #: Kafka's ``default.replication.factor`` for topics Kafka clients create (None: min(3, brokers))
        self.default_replication_factor = default_replication_factor
        #: the Kafka-protocol listener (``listen="HOST:PORT"``), or None (docs/kafka-protocol.md)
        self.kafka_server: Optional[KafkaServer] = None
        # Kafka's broker configs of the same names (None: Kafka's defaults: 7 days / 10 min, 1 day / 10 min);
        # see docs/consumer-groups.md (offset expiry) and docs/producer.md (producer id expiry).
        self._expiry_config: Dict[str, int] = {k: v for k, v in (
            ("offsets_retention_ms", offsets_retention_ms),
            ("offsets_retention_check_interval_ms", offsets_retention_check_interval_ms),
            ("producer_id_expiration_ms", producer_id_expiration_ms),
            ("producer_id_expiration_check_interval_ms", producer_id_expiration_check_interval_ms)) if v is not None}
        # the transaction coordinators' (docs/transactions.md, "Hosting"): Kafka's names, pylog's keys
        self._txn_config: Dict[str, int] = {k: v for k, v in (
            ("abort_timed_out_interval_ms", transaction_abort_timed_out_transaction_cleanup_interval_ms),
            ("max_timeout_ms", transaction_max_timeout_ms)) if v is not None}
        for k, v in list(self._expiry_config.items()) + list(self._txn_config.items()):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidConfigurationError(f"{k} must be a positive int (milliseconds), got {v!r}")
        if not isinstance(brokers, int) or isinstance(brokers, bool) or brokers < 1:
            raise InvalidConfigurationError(f"brokers must be a positive int, got {brokers!r}")
        _validate_cluster_args(log_config, loss, min_latency_ms, max_latency_ms, request_timeout_ms)
        self.path = os.path.abspath(os.fspath(path))
        os.makedirs(self.path, exist_ok=True)
        self.seed = seed
        self.simulated = seed is not None
        self.scheduler: Scheduler
        if self.simulated:
            self.scheduler = SimScheduler(seed)  # type: ignore[arg-type]
            self.transport: Transport = SimulatedNetwork(self.scheduler, min_latency_ms=min_latency_ms,
                                              max_latency_ms=max_latency_ms, loss=loss)
        else:
            self.scheduler = RealScheduler()
            self.transport = DirectTransport(self.scheduler)
        self.brokers: Dict[int, Broker] = {}
        self._closed = False
        self._init_clients()
        self._request_timeout_ms = request_timeout_ms
        #: topics registered from partition folders found without cluster metadata (pylog/storage/adopt.py)
        self.adopted_topics: List[str] = []
        if listen is not None and self.simulated:
            raise InvalidConfigurationError("listen=... needs a real-time cluster (no seed)")
        if default_replication_factor is not None and not 1 <= default_replication_factor <= brokers:
            raise InvalidConfigurationError(
                f"default_replication_factor must be in 1..{brokers} (brokers), got {default_replication_factor!r}")
        if not isinstance(num_partitions, int) or isinstance(num_partitions, bool) or num_partitions < 1:
            raise InvalidConfigurationError(f"num_partitions must be a positive int, got {num_partitions!r}")
        #: test-only: builds each replica's Partition (ReplicaManagerConfig.partition_factory; the simulator's bugs)
        self._partition_factory = partition_factory
        try:
            self._init_rest(brokers, replica_lag_time_max_ms, session_timeout_ms, heartbeat_interval_ms,
                            request_timeout_ms, log_config)
            if listen is not None:
                from pylog.protocol.server import KafkaServer

                self.kafka_server = KafkaServer(self, listen, socket_request_max_bytes=socket_request_max_bytes,
                                                connections_max_idle_ms=connections_max_idle_ms)
        except BaseException:
            self._abort_init()
            raise

    def _init_rest(self, brokers: int, replica_lag_time_max_ms: Optional[int], session_timeout_ms: Optional[int],
                   heartbeat_interval_ms: Optional[int], request_timeout_ms: int,
                   log_config: Optional[Dict[str, object]]) -> None:
        """__init__ after the scheduler exists: metadata, brokers, election (any failure is undone by _abort_init)."""
        # Failure detection (README "What a crashed broker costs", docs/replication.md): a broker is
        # fenced - and its partitions fail over - when the controller has had no heartbeat from it for
        # session_timeout_ms. Kafka KRaft uses 9 s with 2 s heartbeats across a network; in process
        # there is no network, and every broker heartbeats from the same loop thread, so a live broker
        # misses heartbeats only when that whole loop stalls - which the controller discounts
        # (stall_grace). Hence 3 s / 500 ms in real time as in simulations: a crash costs about 3 s.
        lag = replica_lag_time_max_ms if replica_lag_time_max_ms is not None else (30_000 if not self.simulated else 10_000)
        session = session_timeout_ms if session_timeout_ms is not None else 3_000
        heartbeat = heartbeat_interval_ms if heartbeat_interval_ms is not None else max(1, session // 6)
        self.config = ReplicaManagerConfig(replica_lag_time_max_ms=lag, request_timeout_ms=request_timeout_ms,
                                           partition_factory=self._partition_factory)
        # A simulation's metadata file is on a SimDisk too: its writes can be made to fail
        # (``store.io.fail_write_after``, the simulator's metadata-write fault).
        meta_io: FileIO = SimDisk() if self.simulated else FileIO()
        # Partition folders but no metadata (a Log.open log directory, or lost metadata): adopt them
        # rather than start an empty cluster beside the data (see pylog/storage/adopt.py).
        adopting = adopt.adoptable(self.path, METADATA_FILE)
        if adopting:
            adopt.move_into_broker(self.path, meta_io)
        self.store = MetadataStore(list(range(brokers)), random.Random(self.scheduler.rng.getrandbits(64)),
                                   path=os.path.join(self.path, METADATA_FILE), file_io=meta_io)
        if adopting:
            self.adopted_topics = self._register_adopted(meta_io)
            adopt.remove_top_checkpoints(self.path)
        for b in range(brokers):
            check_not_locked(os.path.join(self.path, f"broker-{b}"))  # a clear error now, not per partition later
            disk: FileIO = SimDisk() if self.simulated else FileIO()
            self.brokers[b] = Broker(b, self.path, self.scheduler, self.transport, self.store, disk=disk,
                                     config=self.config, log_config=log_config, heartbeat_interval_ms=heartbeat,
                                     session_timeout_ms=session, tick_ms=50, expiry_config=self._expiry_config,
                                     stall_grace=not self.simulated, txn_config=self._txn_config)
        self.maintenance_errors: Dict[Tuple[int, Tuple[str, int]], str] = {}

        def start_brokers() -> None:
            for b in self.brokers.values():
                b.start()

        self.scheduler.run_sync(start_brokers)
        if not self.scheduler.wait_until(lambda: self.store.controller_id is not None, 10_000):
            if self.store.write_error is not None:  # nobody can claim the role: the file cannot be written
                raise MetadataStorageError(f"{self.store.path}: no controller could be elected, the cluster "
                                           f"metadata cannot be written: {self.store.write_error}")
            raise LeaderNotAvailableError("no controller elected within 10000 ms")
        if self.store.partitions:  # reopened directory: let leaders come back before returning
            self.scheduler.wait_until(lambda: self._serving(list(self.store.partitions)), 30_000)
        self.scheduler.run_sync(self._schedule_maintenance)

    def _register_adopted(self, io: FileIO) -> List[str]:
        """Step 2 of pylog/storage/adopt.py: a topic for every partition folder of broker-0 (partitions
        0..max, replication factor 1 on broker 0, leader epoch above the folder's latest); one save."""
        folders = adopt.partition_folders(os.path.join(self.path, "broker-0"))
        per_topic: Dict[str, List[int]] = {}
        for t, p in folders:
            if t != "__cluster_metadata":  # a KRaft broker's metadata log (copied from Kafka): not a topic
                per_topic.setdefault(t, []).append(p)
        for t, parts in sorted(per_topic.items()):
            n = max(parts) + 1
            compact: Dict[str, object] = {"cleanup_policy": "compact"} if t in Controller.INTERNAL_TOPICS else {}
            self.store.topics[t] = TopicConfig(t, n, 1, 1, False, compact)
            for p in range(n):
                folder = folders.get((t, p))
                epoch = adopt.latest_epoch(folder, io) + 1 if folder is not None else 0
                self.store.partitions[(t, p)] = PartitionState(t, p, (0,), 0, epoch, (0,), 0, 1)
        if per_topic:
            self.store.save()
        return sorted(per_topic)

    def _abort_init(self) -> None:
        """Undo a failed __init__: stop the brokers that started (releasing their log directories)
        and stop the scheduler (joining a real-time loop thread). Errors here are secondary to the
        one being raised, so they are swallowed."""
        self._closed = True
        if self.kafka_server is not None:
            try:
                self.kafka_server.close()
            except Exception:
                pass

        def stop_all() -> None:
            for b in self.brokers.values():
                if b.running:
                    try:
                        b.stop(clean=True)
                    except Exception:
                        try:
                            if b.rm is not None:
                                b.rm.shutdown(clean=False)  # abandon: at least release the directory's lock
                        except Exception:
                            pass

        try:
            self.scheduler.run_sync(stop_all)
        except Exception:
            pass
        finally:
            self.scheduler.close()

    # ---------------------------------------------------------- maintenance
    #: how often the cluster looks for logs due for retention / compaction (each
    #: log's own period is its topic's ``log_cleanup_interval_ms``, default 5 min)
    log_maintenance_check_ms: int = 5_000

    def _schedule_maintenance(self) -> None:
        if not self._closed:
            self.scheduler.call_later(self.log_maintenance_check_ms, self._run_maintenance)

    def _committed_offset(self, group: str, topic: str, partition: int) -> Optional[int]:
        """The group's committed offset from whichever broker's coordinator has the group loaded.

        None when no running coordinator has it (not committed, or the
        coordinator is failing over): retention then protects everything.
        """
        for b in self.brokers.values():
            co = getattr(b, "coordinator", None)
            if not b.running or co is None:
                continue
            g = co.groups.get(group)
            if g is not None and co.partition_of(group) in co.loaded:
                v = g.offsets.get((topic, partition))
                return None if v is None else v.offset
        return None

    def _run_maintenance(self) -> None:
        """Retention and compaction on every running broker's logs (runs on the loop).

        Each replica is maintained on its own, as in Kafka; compaction stops
        at the replica's high watermark. Errors are kept in
        ``maintenance_errors`` (latest per broker and partition) and never stop
        the cluster. Complexity: O(partitions) when nothing is due.
        """
        if self._closed:
            return
        now = self.scheduler.clock.now_ms()
        configs = {t: cfg.configs for t, cfg in self.store.topics.items()}
        for b in self.brokers.values():
            if not b.running or b.rm is None:
                continue
            parts = dict(b.rm.partitions)
            logs = {tp: p.log for tp, p in parts.items()}

            def upper_bound(t: str, p: int, parts: Dict[Tuple[str, int], Partition] = parts) -> Optional[int]:
                return parts[(t, p)].high_watermark

            summary = run_maintenance(logs, configs, self._committed_offset, now, upper_bound=upper_bound)
            for tp, err in summary.errors.items():
                self.maintenance_errors[(b.broker_id, tp)] = err
        self._schedule_maintenance()

    # -------------------------------------------------------------- helpers
    def _wait(self, predicate: Any, timeout_ms: int, what: str) -> None:
        if not self.scheduler.wait_until(predicate, timeout_ms):
            raise LeaderNotAvailableError(f"{what} within {timeout_ms} ms")

    def _controller(self) -> Optional[Controller]:
        cid = self.store.controller_id
        if cid is None or self.brokers[cid].controller is None:
            return None
        return self.brokers[cid].controller

    def _ensure_open(self) -> None:
        if self._closed:
            raise BrokerNotAvailableError(f"cluster at {self.path} is closed")

    @property
    def metadata(self) -> MetadataView:
        """The controller's metadata, read-only (the ``ClusterContext`` view of :attr:`store`)."""
        return self.store

    @property
    def bootstrap_servers(self) -> str:
        """``"host:port,host:port,..."`` of the brokers' Kafka listeners (``listen=...``); give it to any
        Kafka client as ``bootstrap_servers`` / ``bootstrap.servers``."""
        if self.kafka_server is None:
            raise InvalidConfigurationError("this cluster has no Kafka listener: pass listen='127.0.0.1:0'")
        return self.kafka_server.bootstrap_servers

    def advance(self, ms: int) -> None:
        """Simulated clusters: run ``ms`` virtual milliseconds. Real clusters: sleep."""
        if self.simulated:
            self.scheduler.run_for(ms)  # type: ignore[attr-defined]
        else:
            import time

            time.sleep(ms / 1000.0)

    # --------------------------------------------------------------- topics
    def create_topic(self, name: str, partitions: int = 1, replication_factor: Optional[int] = None,
                     min_insync_replicas: int = 1, *, unclean_leader_election: bool = False,
                     start_index: Optional[int] = None, shift: Optional[int] = None,
                     config: Optional[Dict[str, object]] = None, exist_ok: bool = False) -> None:
        """Create a topic; returns once every partition has a leader serving it.

        ``config``: per-topic overrides of the brokers' ``log_config`` (Kafka's topic configs, in
        snake_case or Kafka's dotted names, e.g. ``{"cleanup.policy": "compact", "retention_ms":
        60_000}``; ``min.insync.replicas`` and ``unclean.leader.election.enable`` may be given here
        too); stored with the topic in ``cluster-metadata.json``. An unknown key raises
        InvalidConfigurationError naming it. A topic of that name already there raises
        TopicAlreadyExistsError, unless ``exist_ok`` (then this returns quietly, whatever the existing
        topic's partitions and configs are).
        """
        self._ensure_open()
        if exist_ok and name in self.store.topics:
            return
        rf = replication_factor if replication_factor is not None else min(3, len(self.brokers))
        configs = normalize_topic_configs(name, config or {}, EXTRA_TOPIC_CONFIGS) if config else {}
        if "min_insync_replicas" in configs:
            min_insync_replicas = configs.pop("min_insync_replicas")  # type: ignore[assignment]
        if "unclean_leader_election" in configs:
            unclean_leader_election = bool(configs.pop("unclean_leader_election"))
        cfg = TopicConfig(name, partitions, rf, min_insync_replicas, unclean_leader_election, configs)
        self._wait(lambda: self._controller() is not None, 30_000, "no active controller")

        def run() -> None:
            cid, c = self.store.controller_id, self._controller()
            if cid is None or c is None:  # lost since the wait above: the same error as the wait's
                raise LeaderNotAvailableError("no active controller")
            self.brokers[cid].send(c.create_topic(cfg, start_index=start_index, shift=shift))

        try:
            self.scheduler.run_sync(run)
        except TopicAlreadyExistsError:
            if not (exist_ok and name in self.store.topics):
                raise
            partitions = self.store.topics[name].partitions

        self._wait(lambda: self._serving([(name, p) for p in range(partitions)]), 30_000,
                   f"topic {name!r} has no serving leader")

    # ---------------------------------------------------------- topic admin
    def _run_controller(self, call: Any) -> Any:
        """Run ``call(controller)`` on the loop and send the outbox it returns (from the controller's broker)."""
        self._wait(lambda: self._controller() is not None, 30_000, "no active controller")

        def run() -> Any:
            cid, c = self.store.controller_id, self._controller()
            if cid is None or c is None:
                raise LeaderNotAvailableError("no active controller")
            self.brokers[cid].send(call(c))

        return self.scheduler.run_sync(run)

    def list_topics(self, include_internal: bool = False) -> List[str]:
        """Names of the topics, sorted; Kafka's internal topics (``__consumer_offsets``,
        ``__transaction_state``) only with ``include_internal``. Complexity: O(topics log topics)."""
        self._ensure_open()
        names = self.scheduler.run_sync(lambda: list(self.store.topics))
        return sorted(n for n in names if include_internal or n not in Controller.INTERNAL_TOPICS)

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data (Kafka's DeleteTopics).

        It leaves the cluster metadata at once (one atomic write of ``cluster-metadata.json``);
        each running broker then renames its replica's directory ``<topic>-<p>.<uuid>-delete``
        (so ``<topic>-<p>`` is gone when this returns) and removes it after
        ``file_delete_delay_ms`` (1 s). Producers then get UnknownTopicOrPartitionError; consumers
        subscribed to it lose its partitions at their next rebalance; the groups' committed offsets
        of its partitions are deleted (tombstoned). A stopped broker's replicas are removed when it
        starts again, and a deletion cut short by a crash completes when the cluster reopens.
        Re-creating the name is refused until every replica is removed.

        Raises UnknownTopicOrPartitionError (no such topic), InvalidTopicError (an internal topic
        or a bad name). Durability: the deletion survives a crash once this returns.
        Thread-safety: any thread.
        """
        self._ensure_open()
        validate_topic(name)
        if name not in self.store.topics:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        self._run_controller(lambda c: c.delete_topic(name))

        def renamed() -> bool:
            per = self.store.deleting.get(name, {})
            return not any(self.brokers[b].running for b in per)

        self.scheduler.wait_until(renamed, self.config.request_timeout_ms)

    def create_partitions(self, name: str, total_count: int) -> None:
        """Grow topic ``name`` to ``total_count`` partitions (Kafka's CreatePartitions); returns once
        the new partitions have serving leaders. Producers' partitioners and subscribed consumers
        see them at once in this process (a group rebalances); Kafka's clients at their next
        metadata refresh. Records keep their partitions: keyed records may now hash elsewhere.

        Raises InvalidPartitionsError when ``total_count`` is not above the current count,
        UnknownTopicOrPartitionError for an unknown topic, LeaderNotAvailableError when a new
        partition has no live replica for 30 s (it exists; it gets a leader when one starts). Durability: in ``cluster-metadata.json``
        (atomic) before this returns. Thread-safety: any thread.
        """
        self._ensure_open()
        validate_topic(name)
        cfg = self.store.topics.get(name)
        before = cfg.partitions if cfg is not None else 0
        self._run_controller(lambda c: c.create_partitions(name, total_count))
        self._wait(lambda: self._serving([(name, p) for p in range(before, total_count)]), 30_000,
                   f"a new partition of topic {name!r} has no serving leader")

    def alter_topic_config(self, name: str, configs: Dict[str, object]) -> None:
        """Set topic configs (Kafka's incrementalAlterConfigs with SET; a value of None removes the
        override, Kafka's DELETE). Keys in Kafka's dotted names (``retention.ms``, ``segment.bytes``,
        ``cleanup.policy``, ``max.message.bytes``, ``min.insync.replicas``, ...) or snake_case; values
        typed or as strings. Running replicas apply them before this returns (their next append,
        roll, retention and cleaning use them). Durability: stored in ``cluster-metadata.json``.

        Raises InvalidConfigurationError naming an unknown config or a bad value,
        UnknownTopicOrPartitionError for an unknown topic. Thread-safety: any thread.
        """
        self._ensure_open()
        validate_topic(name)
        if name not in self.store.topics:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        normalized = normalize_topic_configs(name, configs, EXTRA_TOPIC_CONFIGS)
        self._run_controller(lambda c: c.alter_topic_config(name, normalized))

        def applied() -> bool:
            cfg = self.store.topics.get(name)
            if cfg is None:
                return True
            for b in self.brokers.values():
                if not b.running or b.rm is None:
                    continue
                want = LogConfig.from_kwargs(**b.rm.log_config_for(cfg.config_items()))
                for (t, _), part in b.rm.partitions.items():
                    if t == name and (part.log.config != want or part.min_insync_replicas != cfg.min_insync_replicas):
                        return False
            return True

        self.scheduler.wait_until(applied, self.config.request_timeout_ms)

    def topic_config(self, name: str, *, kafka_names: bool = False) -> Dict[str, object]:
        """Every config of topic ``name`` with its value: the topic's overrides, else the brokers'
        ``log_config``, else the default (``min_insync_replicas`` and ``unclean_leader_election``
        included). Keys in snake_case, or Kafka's dotted names with ``kafka_names``.
        Raises UnknownTopicOrPartitionError. Complexity: O(configs). Thread-safety: any thread.
        """
        self._ensure_open()
        from pylog.runtime.log_maintenance import DEFAULT_CLEANUP_INTERVAL_MS

        cfg = self.scheduler.run_sync(lambda: self.store.topics.get(name))
        if cfg is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        broker = next(iter(self.brokers.values()))
        out: Dict[str, object] = dict(LogConfig()._asdict())
        out.update(broker.log_config)
        out.update({"message_timestamp_type": "CreateTime", "file_delete_delay_ms": self.config.file_delete_delay_ms,
                    "retention_protect_groups": [], "log_cleanup_interval_ms": DEFAULT_CLEANUP_INTERVAL_MS})
        out.update(cfg.configs)
        out["min_insync_replicas"] = cfg.min_insync_replicas
        out["unclean_leader_election"] = cfg.unclean_leader_election
        assert set(out) <= set(LogConfig._fields) | EXTRA_TOPIC_CONFIGS | set(TOPIC_FIELDS), out
        if kafka_names:
            return {kafka_name(k): v for k, v in sorted(out.items())}
        return dict(sorted(out.items()))

    def _serving(self, tps: List[Tuple[str, int]]) -> bool:
        """True when each partition's leader (per the controller) serves it at the current epoch."""
        for tp in tps:
            st = self.store.partitions[tp]
            b = self.brokers.get(st.leader)
            if b is None or not b.running or b.rm is None:
                return False
            part = b.rm.partitions.get(tp)
            if part is None or part.role != LEADER or part.leader_epoch != st.leader_epoch:
                return False
        return True

    #: partitions of ``__consumer_offsets`` when a group consumer first creates it (Kafka's
    #: ``offsets.topic.num.partitions``); ``None``: 50, or 5 in a simulated cluster (fast simulations).
    offsets_topic_partitions: Optional[int] = None

    def _before_group_consumer(self, group_id: str, topics: Sequence[str], kwargs: Dict[str, Any]) -> None:
        """Before ``consumer(group_id=...)``: create ``__consumer_offsets`` if it does not exist.

        Compacted, ``offsets_topic_partitions`` partitions, replication factor min(3, brokers), min ISR 2
        with 3 or more brokers (see :func:`~pylog.replication.controller.offsets_topic_replication`), as
        Kafka's brokers create it on the first FindCoordinator. The options are checked before that: a
        bad one raises and leaves no topic behind. The call waits for the new topic's leaders except on
        a stopped broker (a crashed broker not yet fenced would hold it for the session timeout): the
        consumer's coordinator lookup retries until the group's offsets partition is served, as a Kafka
        consumer does.
        """
        if not self.has_offsets_topic():
            _validate_consumer_options(group_id, topics, kwargs)  # a bad option leaves nothing behind
            self._request_offsets_topic()
            self._wait_offsets_topic_where_possible()

    def _offsets_topic_config(self) -> TopicConfig:
        n = self.offsets_topic_partitions or (5 if self.simulated else DEFAULT_OFFSETS_PARTITIONS)
        rf, min_isr = offsets_topic_replication(len(self.brokers))
        return TopicConfig(OFFSETS_TOPIC, n, rf, min_isr, False, {"cleanup_policy": "compact"})

    def _request_offsets_topic(self) -> None:
        """Have the controller create ``__consumer_offsets`` without waiting for its leaders.

        Runs on the loop now; when there is no running controller (it just crashed and its lease has
        not expired) the request is retried every 50 ms until one exists. Complexity: O(partitions).
        """
        cfg = self._offsets_topic_config()

        def attempt() -> None:
            if self._closed or cfg.name in self.store.topics:
                return
            cid = self.store.controller_id
            b = self.brokers.get(cid) if cid is not None else None
            if b is None or not b.running or b.controller is None or not b.controller.active:
                self.scheduler.call_later(50, attempt)
                return
            b.send(b.controller.create_topic(cfg))

        self.scheduler.run_sync(attempt)

    def _wait_offsets_topic_where_possible(self, timeout_ms: int = 30_000) -> None:
        """Wait until ``__consumer_offsets`` exists and each partition is served - except those whose
        leader is a stopped broker (crashed, not fenced yet: waiting would last the session timeout).
        Without a crash this is what creating the topic waited for; returns quietly on timeout."""
        def ready() -> bool:
            cfg = self.store.topics.get(OFFSETS_TOPIC)
            if cfg is None:
                return False
            for p in range(cfg.partitions):
                st = self.store.partitions.get((OFFSETS_TOPIC, p))
                if st is None:
                    return False
                b = self.brokers.get(st.leader)
                if b is not None and not b.running:
                    continue  # a stopped leader: the coordinator lookup retries after the failover
                if not self._serving([(OFFSETS_TOPIC, p)]):
                    return False
            return True

        self.scheduler.wait_until(ready, timeout_ms)

    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` unless it exists (configured as :meth:`_offsets_topic_config`) and
        wait until it is served, as :meth:`create_topic` does. Another creator winning the race is fine.
        Complexity: O(partitions). Thread-safety: any thread but the loop thread."""
        if self.has_offsets_topic():
            return
        cfg = self._offsets_topic_config()
        try:
            self.create_topic(OFFSETS_TOPIC, partitions=cfg.partitions, replication_factor=cfg.replication_factor,
                              min_insync_replicas=cfg.min_insync_replicas, config=dict(cfg.configs))
        except Exception:
            if OFFSETS_TOPIC not in self.store.topics:  # another consumer created it meanwhile: fine
                raise

    #: partitions of ``__transaction_state`` when the first transactional producer creates it (Kafka's
    #: ``transaction.state.log.num.partitions``); ``None``: as ``__consumer_offsets`` (50, or 5 in a
    #: simulated cluster)
    transaction_state_partitions: Optional[int] = None

    def _transaction_state_topic_config(self) -> TopicConfig:
        n = self.transaction_state_partitions or (5 if self.simulated else DEFAULT_OFFSETS_PARTITIONS)
        rf, min_isr = transaction_state_replication(len(self.brokers))
        return TopicConfig(TRANSACTION_STATE_TOPIC, n, rf, min_isr, False, {"cleanup_policy": "compact"})

    def ensure_transaction_state_topic(self) -> None:
        """Create ``__transaction_state`` unless it exists and wait until it is served, as Kafka's brokers
        create it on the first FindCoordinator(TRANSACTION): compacted, ``transaction_state_partitions``
        partitions, replication factor min(3, brokers) and min ISR 2 with 3 or more brokers (as
        ``__consumer_offsets``; Kafka's ``transaction.state.log.replication.factor`` 3 and
        ``transaction.state.log.min.isr`` 2). Another creator winning the race is fine.
        Complexity: O(partitions). Thread-safety: any thread but the loop thread."""
        self._ensure_open()
        if TRANSACTION_STATE_TOPIC in self.metadata.topics:
            return
        cfg = self._transaction_state_topic_config()
        try:
            self.create_topic(TRANSACTION_STATE_TOPIC, partitions=cfg.partitions,
                              replication_factor=cfg.replication_factor,
                              min_insync_replicas=cfg.min_insync_replicas, config=dict(cfg.configs))
        except Exception:
            if TRANSACTION_STATE_TOPIC not in self.store.topics:  # another producer created it meanwhile: fine
                raise

    def describe(self, topic: str) -> List[PartitionInfo]:
        """Per partition: leader, leader_epoch, replicas, isr, high_watermark (the leader's), log_end_offsets."""

        def run() -> List[PartitionInfo]:
            cfg = self.store.topics.get(topic)
            if cfg is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
            rows = []
            for p in range(cfg.partitions):
                st = self.store.partitions[(topic, p)]
                leos: Dict[int, int] = {}
                hw = -1
                for r in st.replicas:
                    b = self.brokers[r]
                    part = b.rm.partitions.get((topic, p)) if b.running and b.rm else None
                    if part is not None:
                        leos[r] = part.log_end_offset
                        if r == st.leader:
                            hw = part.high_watermark
                rows.append(PartitionInfo(topic, p, st.leader, st.leader_epoch, st.replicas, st.isr, hw, leos))
            return rows

        return self.scheduler.run_sync(run)

    # ------------------------------------------------------------- metrics
    def metrics(self, *, include_clients: bool = True) -> List[Metric]:
        """Cluster, partition, log and (optionally) client samples as :class:`pylog.metrics.Metric`.

        * cluster: brokers running, active controller, partitions,
          under-replicated partitions (ISR smaller than the replicas, as the
          controller records it), offline partitions (no leader), partitions
          under ``min_insync_replicas``;
        * per partition (labels ``topic``, ``partition``): leader, leader
          epoch, ISR size, replicas, the leader's high watermark, and per
          replica (label ``broker``) the log end offset;
        * per broker and partition: ISR shrinks and expands this broker
          recorded as leader (since it started), and every
          :meth:`pylog.Log.metrics` sample of its replica (label ``broker``);
        * with ``include_clients``: every producer's and consumer's samples
          (label ``client_id``).

        Render with :func:`pylog.metrics.render_prometheus`.
        Complexity: O(partitions x replicas + segments). Thread-safety: any
        thread (runs on the cluster's loop).
        """

        def run() -> List[Metric]:
            out: List[Metric] = []
            running = [b for b in self.brokers.values() if b.running and b.rm is not None]
            out.append(metric("pylog_cluster_brokers_running", "gauge", "Brokers running.", len(running)))
            out.append(metric("pylog_cluster_active_controller", "gauge", "Broker id holding the controller role (-1: none).",
                              -1 if self.store.controller_id is None else self.store.controller_id))
            under = offline = under_min = 0
            for (topic, p), st in sorted(self.store.partitions.items()):
                cfg = self.store.topics.get(topic)
                labels = {"topic": topic, "partition": p}
                if len(st.isr) < len(st.replicas):
                    under += 1
                if st.leader == NO_LEADER:
                    offline += 1
                if cfg is not None and len(st.isr) < cfg.min_insync_replicas:
                    under_min += 1
                out.append(metric("pylog_partition_leader", "gauge", "Leader broker id (-1: offline).", st.leader, **labels))
                out.append(metric("pylog_partition_leader_epoch", "gauge", "Leader epoch.", st.leader_epoch, **labels))
                out.append(metric("pylog_partition_replicas", "gauge", "Assigned replicas.", len(st.replicas), **labels))
                out.append(metric("pylog_partition_isr_size", "gauge", "In-sync replicas.", len(st.isr), **labels))
                lb = self.brokers.get(st.leader)
                lp = lb.rm.partitions.get((topic, p)) if lb is not None and lb.running and lb.rm is not None else None
                if lp is not None and lp.role == LEADER:
                    out.append(metric("pylog_partition_high_watermark", "gauge", "The leader's high watermark.",
                                      lp.high_watermark, **labels))
            out.append(metric("pylog_cluster_partitions", "gauge", "Partitions.", len(self.store.partitions)))
            out.append(metric("pylog_cluster_under_replicated_partitions", "gauge",
                              "Partitions whose ISR is smaller than their replica set.", under))
            out.append(metric("pylog_cluster_offline_partitions", "gauge", "Partitions without a leader.", offline))
            out.append(metric("pylog_cluster_under_min_isr_partitions", "gauge",
                              "Partitions whose ISR is smaller than min_insync_replicas (acks=all refused).", under_min))
            for b in running:
                for (topic, p), part in sorted(b.rm.partitions.items()):  # type: ignore[union-attr]
                    labels = {"broker": b.broker_id, "topic": topic, "partition": p}
                    out.append(metric("pylog_replica_log_end_offset", "gauge", "The replica's log end offset.",
                                      part.log_end_offset, **labels))
                    out.append(metric("pylog_replica_isr_shrinks_total", "counter",
                                      "ISR shrinks this broker made as leader.", part.isr_shrinks, **labels))
                    out.append(metric("pylog_replica_isr_expands_total", "counter",
                                      "ISR expands this broker made as leader.", part.isr_expands, **labels))
                    for m in part.log.metrics():
                        out.append(m._replace(labels=(("broker", str(b.broker_id)),) + m.labels))
            if include_clients:
                out.extend(self._client_metrics())
            return out

        return self.scheduler.run_sync(run)

    # -------------------------------------------------------------- faults
    def stop_broker(self, broker_id: int, clean: bool = True, *, shutdown_timeout_ms: int = 10_000) -> None:
        """Stop a broker. ``clean``: controlled shutdown (leadership moves first), then flush and close.

        ``clean=False`` is a crash: logs are abandoned and, in a simulation,
        every byte not fsynced is lost.
        """
        self._ensure_open()
        b = self._broker(broker_id)
        if not b.running:
            return
        if clean:
            self.scheduler.run_sync(b.request_controlled_shutdown)
            self.scheduler.wait_until(lambda: b.shutdown_ok or not b.running, shutdown_timeout_ms)

        if self.kafka_server is not None:
            self.kafka_server.stop_broker(broker_id)  # its sockets close, as a dead broker's do

        def run() -> None:
            try:
                b.stop(clean=clean)
            except OSError as exc:
                raise _storage_error(exc, f"broker {broker_id}: stopping") from exc
            finally:
                self._clients_lost_broker([broker_id])
                if self.kafka_server is not None:
                    for n in self.kafka_server.nodes.values():
                        n.disconnected(broker_id)

        self.scheduler.run_sync(run)

    def start_broker(self, broker_id: int) -> None:
        self._ensure_open()
        b = self._broker(broker_id)
        self.scheduler.run_sync(b.start)
        if self.kafka_server is not None:
            self.kafka_server.start_broker(broker_id)  # the same port as before

    def inject_fault(self, api: Any, error: Any = None, count: Optional[int] = 1, broker: Optional[int] = None,
                     topic: Optional[str] = None, *, delay_ms: int = 0, drop_connection: bool = False) -> Any:
        """Make the Kafka listener answer requests of ``api`` (``"Produce"``, ``"Fetch"``, an API key...)
        with Kafka error ``error`` (``"NOT_LEADER_OR_FOLLOWER"`` or a code), serve them ``delay_ms`` late,
        or drop the connection, for the next ``count`` matching requests (None: until removed), only on
        ``broker``'s listener and for requests naming ``topic`` when given. Returns a handle with
        ``remove()`` and ``hits`` (also a context manager). Real clients see exactly Kafka's codes.
        See :mod:`pylog.protocol.faults`. Needs ``listen=...``. Thread-safety: any thread."""
        if self.kafka_server is None:
            raise InvalidConfigurationError("inject_fault needs the Kafka listener: Cluster(..., listen='127.0.0.1:0')")
        return self.kafka_server.faults.add(api, error, count, broker, topic, delay_ms, drop_connection)

    def _broker(self, broker_id: object) -> Broker:
        b = self.brokers.get(broker_id) if isinstance(broker_id, int) and not isinstance(broker_id, bool) else None
        if b is None:
            raise InvalidConfigurationError(
                f"no broker {broker_id!r} in the cluster at {self.path} (brokers {sorted(self.brokers)})")
        return b

    def partition_network(self, a: Iterable[Any], b: Optional[Iterable[Any]] = None, *, one_way: bool = False) -> None:
        """Simulated clusters: cut the links between broker groups ``a`` and ``b`` (default: all others)."""
        if not isinstance(self.transport, SimulatedNetwork):
            raise InvalidConfigurationError("partition_network needs a simulated cluster (seed=...)")
        self.transport.partition(a, b, one_way=one_way)

    def heal_network(self) -> None:
        if not isinstance(self.transport, SimulatedNetwork):
            raise InvalidConfigurationError("heal_network needs a simulated cluster (seed=...)")
        self.transport.heal()

    def elect_preferred_leader(self, topic: str, partition: int) -> None:
        def run() -> None:
            cid, c = self.store.controller_id, self._controller()
            if cid is None or c is None:
                raise LeaderNotAvailableError("no active controller")
            self.brokers[cid].send(c.elect_preferred((topic, partition)))

        self.scheduler.run_sync(run)

    # --------------------------------------------------------------- close
    def close(self) -> None:
        """Close clients, stop every broker cleanly, stop the loop thread (joined)."""
        if self._closed:
            return
        if self.kafka_server is not None:
            self.kafka_server.close()  # no new requests; pending ones are dropped with their connections

        def run() -> None:
            if self.kafka_server is not None:
                self.kafka_server.close_nodes()
            self._close_client_nodes()
            first: Optional[BaseException] = None
            for b in self.brokers.values():  # every broker stops, even if one's disk fails
                if b.running:
                    try:
                        b.stop(clean=True)
                    except OSError as exc:
                        first = first or _storage_error(exc, f"broker {b.broker_id}: closing")
            if first is not None:
                raise first

        try:
            self.scheduler.run_sync(run)
        finally:
            self._closed = True
            self.scheduler.close()
            self.store.close()  # one snapshot of the metadata, its delta log emptied

    # -------------------------------------------------------------- checks
    def _check(self, deep: bool = True) -> None:
        """Assert cluster-wide invariants (the simulation calls this after every step).

        * every component's own ``_check``;
        * the controller's leader is in its ISR, ISRs are never empty;
        * a serving leader is in its own ISR and its epoch is the controller's;
        * (``deep``) every live ISR member that is fetching from the current
          leader agrees with it on every offset below the leader's HW.
        """

        checker = getattr(self.scheduler, "_check", None)
        if checker is not None:
            checker()
        if self.kafka_server is not None:
            self.kafka_server._check()

        def run() -> None:
            self.store._check()
            for b in self.brokers.values():
                b._check()
            for tp, st in self.store.partitions.items():
                if st.leader == NO_LEADER:
                    continue
                lb = self.brokers[st.leader]
                if not lb.running or lb.rm is None:
                    continue
                lp = lb.rm.partitions.get(tp)
                if lp is None or lp.role != LEADER or lp.leader_epoch != st.leader_epoch:
                    continue
                assert lp.broker_id in lp.isr
                if not deep:
                    continue
                for r in st.isr:
                    if r == st.leader:
                        continue
                    rb = self.brokers[r]
                    if not rb.running or rb.rm is None:
                        continue
                    rp = rb.rm.partitions.get(tp)
                    if rp is None or rp.role != FOLLOWER or rp.leader_epoch != st.leader_epoch or rp.follower_state != "fetching":
                        continue
                    end = min(lp.high_watermark, rp.log_end_offset)
                    diff = records_equal_below(lp.log, rp.log, end)
                    assert diff is None, (
                        f"{tp[0]}-{tp[1]}: broker {r} differs from leader {st.leader} at offset {diff} "
                        f"(below HW {lp.high_watermark})"
                    )

        self.scheduler.run_sync(run)


def _storage_error(exc: OSError, what: str) -> OSError:
    """A disk error as a pylog error: a bare OSError becomes KafkaStorageError naming what failed."""
    if isinstance(exc, PylogError):
        return exc
    return KafkaStorageError(f"{what}: {type(exc).__name__}: {exc}")


def _validate_cluster_args(log_config: object, loss: object, min_latency_ms: object, max_latency_ms: object,
                           request_timeout_ms: object) -> None:
    """Refuse bad constructor arguments before anything is created (InvalidConfigurationError naming the key)."""
    if log_config is not None:
        if not isinstance(log_config, dict):
            raise InvalidConfigurationError(f"log_config must be a dict, not {type(log_config).__name__}")
        for k in log_config:
            if not isinstance(k, str):
                raise InvalidConfigurationError(f"log_config: keys are setting names (str), got {k!r}")
        try:
            LogConfig.from_kwargs(**log_config)
        except InvalidConfigurationError as exc:
            raise InvalidConfigurationError(f"log_config: {exc}") from None
    if not isinstance(loss, (int, float)) or isinstance(loss, bool) or not 0.0 <= loss < 1.0:
        raise InvalidConfigurationError(f"loss must be a number in [0, 1), got {loss!r}")
    for name, v in (("min_latency_ms", min_latency_ms), ("max_latency_ms", max_latency_ms),
                    ("request_timeout_ms", request_timeout_ms)):
        if not isinstance(v, int) or isinstance(v, bool) or v < (1 if name == "request_timeout_ms" else 0):
            raise InvalidConfigurationError(f"{name} must be a non-negative int, got {v!r}")
    if min_latency_ms > max_latency_ms:  # type: ignore[operator]
        raise InvalidConfigurationError(f"min_latency_ms ({min_latency_ms}) > max_latency_ms ({max_latency_ms})")


def _validate_consumer_options(group_id: Optional[str], topics: Sequence[str], kwargs: Dict[str, Any]) -> None:
    """Raise what ``Consumer(...)`` would raise for these options, with no side effect."""
    ConsumerConfig.from_options({"group_id": group_id, "topics": topics, **kwargs})
    pattern = kwargs.get("pattern")
    if isinstance(pattern, str):
        re.compile(pattern)  # subscribe() compiles it: a bad regex raises re.error there too


__all__ = ["Cluster", "PartitionInfo"]
