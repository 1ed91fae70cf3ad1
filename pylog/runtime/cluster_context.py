"""The seam between a cluster facade and what runs against it: declared, typed, checked by mypy.

Clients (:mod:`pylog.client`: ``Producer``, ``Consumer``, ``GroupAdmin``)
and the Kafka-protocol listener (:mod:`pylog.protocol`) see a cluster only
through the interfaces below, never as ``Any``. Both facades implement them:
:class:`pylog.cluster.Cluster` (brokers in this process) and
:class:`pylog.shared.SharedCluster` (``pylog.open``: the brokers may run in
another process; its metadata is a mirror of the owner's).
``tests/unit/test_cluster_context.py`` checks both, at run time and with mypy.

* :class:`MetadataView` - the cluster metadata as the controller last
  published it, read-only: clients never see the controller's
  :class:`~pylog.replication.controller.MetadataStore` itself (its
  persistence, leases, history), only these four names.
* :class:`ClusterContext` - what an in-process client needs: the loop it
  runs on (``scheduler``), the network its requests travel on
  (``transport``) and the metadata (``metadata``).
* :class:`TopicAdmin` - the blocking topic admin calls both facades answer
  (``SharedCluster`` runs them on the owner's ``Cluster``: its RPC serves
  exactly these names).
* :class:`ServedCluster` - what the Kafka listener needs: a context and the
  topic admin calls (CreateTopics, DeleteTopics, CreatePartitions, Metadata's
  auto-creation, FindCoordinator's ``__consumer_offsets``), plus the brokers
  whose ports it opens and the broker settings it reports. Only a cluster
  whose brokers run in this process serves it (``Cluster``).

Every name here is public: a client that needs something else of the cluster
adds it here, with a docstring, and both facades implement it (mypy checks
they do wherever a facade is passed as one of these types).

Complexity: every member is O(1) except the admin calls, which block until
the cluster applied them (see :class:`pylog.cluster.Cluster`).
Thread-safety: ``scheduler`` and ``transport`` are for the loop thread
(``scheduler.run_sync`` hands a call to it); ``metadata`` is written on the
loop thread and read there by the clients; the admin calls block and may be
called from any thread except the loop thread.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple, runtime_checkable

from pylog.metrics import Metric
from pylog.replication.controller import TopicConfig
from pylog.replication.messages import PartitionState
from pylog.replication.replica_manager import ReplicaManagerConfig
from pylog.runtime.broker import Broker
from pylog.runtime.scheduler import Scheduler
from pylog.runtime.transport.base import Transport


class PartitionInfo(NamedTuple):
    """One row of :meth:`TopicAdmin.describe` (``pylog.PartitionInfo``)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: Tuple[int, ...]
    isr: Tuple[int, ...]
    high_watermark: int
    log_end_offsets: Dict[int, int]


def members(protocol: type) -> FrozenSet[str]:
    """The public names ``protocol`` declares, its protocol bases' included (``typing`` has no public
    way to list them before Python 3.13). Complexity: O(names)."""
    out: set = set()
    for cls in protocol.__mro__:
        if cls is object or cls is Protocol or cls.__module__ == "typing":
            continue
        out |= {n for n in vars(cls) if not n.startswith("_")}
    return frozenset(out)


@runtime_checkable
class MetadataView(Protocol):
    """Read-only cluster metadata (Kafka's client ``Metadata``): brokers, controller, topics, partitions.

    :class:`~pylog.replication.controller.MetadataStore` satisfies it, and so
    does a shared directory's mirror of the owner's store. A reader must not
    write through it.
    """

    @property
    def brokers(self) -> Sequence[int]:
        """The broker ids of the cluster."""

    @property
    def controller_id(self) -> Optional[int]:
        """The broker holding the controller role, or None while there is none."""

    @property
    def topics(self) -> Mapping[str, TopicConfig]:
        """Topic name -> its :class:`~pylog.replication.controller.TopicConfig` (partitions, configs)."""

    @property
    def partitions(self) -> Mapping[Tuple[str, int], PartitionState]:
        """``(topic, partition)`` -> leader, leader epoch, replicas and ISR as the controller last wrote them."""


@runtime_checkable
class ClusterContext(Protocol):
    """What an in-process client (``Producer``, ``Consumer``, ``GroupAdmin``) reads of its cluster."""

    @property
    def scheduler(self) -> Scheduler:
        """The loop the client's callbacks and timers run on (virtual time in a simulated cluster)."""

    @property
    def transport(self) -> Transport:
        """The network the client's requests travel on to the brokers."""

    @property
    def metadata(self) -> MetadataView:
        """The cluster metadata (leaders, partitions, controller), read on the loop thread."""


@runtime_checkable
class TopicAdmin(Protocol):
    """The topic admin calls of a cluster (Kafka's Admin client, blocking). Each blocks until the
    cluster applied it; errors are :mod:`pylog.errors` classes. See :class:`pylog.Cluster`'s methods."""

    def create_topic(self, name: str, partitions: int = 1, replication_factor: Optional[int] = None,
                     min_insync_replicas: int = 1, *, unclean_leader_election: bool = False,
                     start_index: Optional[int] = None, shift: Optional[int] = None,
                     config: Optional[Dict[str, object]] = None, exist_ok: bool = False) -> None:
        """Create a topic; returns once every partition has a serving leader."""

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data; returns once the metadata no longer has it."""

    def create_partitions(self, name: str, total_count: int) -> None:
        """Grow a topic to ``total_count`` partitions; returns once they are served."""

    def alter_topic_config(self, name: str, configs: Dict[str, object]) -> None:
        """Set (value) or remove (None) per-topic configs; running replicas apply them before this returns."""

    def topic_config(self, name: str, *, kafka_names: bool = False) -> Dict[str, object]:
        """Every config of the topic with its value (overrides, else broker settings, else defaults)."""

    def list_topics(self, include_internal: bool = False) -> List[str]:
        """Topic names, sorted; internal ones (``__consumer_offsets``) only with ``include_internal``."""

    def describe(self, topic: str) -> List[PartitionInfo]:
        """Per partition: leader, leader epoch, replicas, ISR, high watermark, log end offsets."""

    def metrics(self, *, include_clients: bool = True) -> List[Metric]:
        """The cluster's samples (and, with ``include_clients``, its clients')."""

    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` if it does not exist (Kafka's brokers create it on the first
        FindCoordinator); blocks until it is served. Another creator winning the race is not an error."""

    def ensure_transaction_state_topic(self) -> None:
        """Create ``__transaction_state`` if it does not exist (Kafka's brokers create it on the first
        FindCoordinator(TRANSACTION)); blocks until it is served. Another creator winning the race is not
        an error."""


@runtime_checkable
class ServedCluster(ClusterContext, TopicAdmin, Protocol):
    """What the Kafka-protocol listener (:class:`pylog.protocol.server.KafkaServer`) serves: a
    :class:`ClusterContext` and :class:`TopicAdmin` whose brokers run in this process."""

    @property
    def brokers(self) -> Mapping[int, Broker]:
        """Broker id -> the broker running in this process (its listener's port is opened for it)."""

    @property
    def path(self) -> str:
        """The cluster's directory (the Kafka cluster id is derived from it)."""

    @property
    def config(self) -> ReplicaManagerConfig:
        """The brokers' replication settings (``replica_lag_time_max_ms``, ...), as DescribeConfigs reports them."""

    @property
    def auto_create_topics(self) -> bool:
        """Kafka's ``auto.create.topics.enable``: a Metadata request for an unknown topic creates it."""

    @property
    def num_partitions(self) -> int:
        """Kafka's ``num.partitions``: partitions of a topic created without a count."""

    @property
    def default_replication_factor(self) -> Optional[int]:
        """Kafka's ``default.replication.factor`` (None: min(3, brokers))."""

    def has_offsets_topic(self) -> bool:
        """True once ``__consumer_offsets`` exists in the metadata (O(1))."""


__all__ = ["MetadataView", "ClusterContext", "TopicAdmin", "ServedCluster", "PartitionInfo", "members"]
