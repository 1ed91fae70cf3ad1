"""What both cluster facades share, written once against :class:`~pylog.runtime.cluster_context.ClusterContext`.

:class:`pylog.cluster.Cluster` (brokers in this process) and
:class:`pylog.shared.SharedCluster` (``pylog.open``: the brokers may run in
the owner process) differ in where the brokers and the controller run and in
how an admin call reaches them. What a caller does *with clients* is the same
on both, and lives here: ``producer()``, ``consumer()``, the consumer-group
admin calls (one :class:`~pylog.client.admin.GroupAdmin` per facade, whose
requests travel on the facade's transport like a consumer's), ``leader_of``,
``now_ms`` and the clients' metrics. A subclass provides the
:class:`ClusterContext` members (``scheduler``, ``transport``,
``metadata``), ``ensure_offsets_topic()``, ``ensure_transaction_state_topic()``, ``_ensure_open()`` and
``_request_timeout_ms``; it may refine ``_before_group_consumer``.

Complexity: each call is O(1) plus the client call it makes.
Thread-safety: every public method may be called from any thread (the
clients marshal their work onto the facade's loop); ``_clients`` is appended
to under ``_clients_lock`` and read on the loop thread.
"""
from __future__ import annotations

import abc
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from pylog.client.admin import GroupAdmin, GroupDescription, GroupListing, TransactionDescription, TransactionListing
from pylog.client.consumer import Consumer
from pylog.client.producer import Producer
from pylog.errors import UnknownTopicOrPartitionError
from pylog.metrics import Metric
from pylog.replication.offsets_topic import OFFSETS_TOPIC
from pylog.runtime.cluster_context import MetadataView
from pylog.runtime.scheduler import Scheduler
from pylog.runtime.transport.base import Transport

#: what a facade keeps to close with itself: every client it made
Client = Union[Producer, Consumer, GroupAdmin]
_F = TypeVar("_F", bound="ClusterFacade")


class ClusterFacade(abc.ABC):
    """The client half of the cluster API, shared by ``Cluster`` and ``SharedCluster`` (module docstring)."""

    scheduler: Scheduler
    transport: Transport
    #: request timeout of the facade's GroupAdmin (the cluster's ``request_timeout_ms``)
    _request_timeout_ms: int = 30_000

    def _init_clients(self) -> None:
        """Call from the subclass's ``__init__`` before any client is made."""
        self._clients: List[Client] = []
        self._clients_lock = threading.Lock()
        self._group_admin_client: Optional[GroupAdmin] = None

    # ------------------------------------------------ provided by the facade
    @property
    @abc.abstractmethod
    def metadata(self) -> MetadataView:
        """The cluster metadata the clients read (:class:`~pylog.runtime.cluster_context.MetadataView`)."""

    @abc.abstractmethod
    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` unless it exists; blocks until it is served."""

    @abc.abstractmethod
    def ensure_transaction_state_topic(self) -> None:
        """Create ``__transaction_state`` unless it exists; blocks until it is served."""

    @abc.abstractmethod
    def _ensure_open(self) -> None:
        """Raise :class:`~pylog.errors.BrokerNotAvailableError` once the facade is closed."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the clients (and, for the facade that runs them, the brokers)."""

    def _before_group_consumer(self, group_id: str, topics: Sequence[str], kwargs: Dict[str, Any]) -> None:
        """Runs before a consumer with a ``group_id`` is made: the group's offsets topic must exist."""
        self.ensure_offsets_topic()

    # --------------------------------------------------------------- clients
    def has_offsets_topic(self) -> bool:
        """True once ``__consumer_offsets`` exists in the metadata. Complexity: O(1)."""
        return OFFSETS_TOPIC in self.metadata.topics

    def _track(self, client: Client) -> None:
        with self._clients_lock:
            self._clients.append(client)

    def producer(self, acks: Any = "all", **kwargs: Any) -> Producer:
        """A :class:`~pylog.client.producer.Producer` on this cluster (see its docstring for the options);
        closed with the cluster. With a ``transactional_id``, ``__transaction_state`` and
        ``__consumer_offsets`` are created first if they do not exist (as Kafka's brokers do on the first
        FindCoordinator for a transaction or a group: ``send_offsets_to_transaction`` may name a group no
        consumer has joined yet)."""
        self._ensure_open()
        if kwargs.get("transactional_id") is not None:
            self.ensure_transaction_state_topic()
            self.ensure_offsets_topic()
        p = Producer(self, acks=acks, **kwargs)
        self._track(p)
        return p

    def consumer(self, group_id: Optional[str] = None, topics: Sequence[str] = (), **kwargs: Any) -> Consumer:
        """A :class:`~pylog.client.consumer.Consumer` (see its docstring for the options); closed with the
        cluster. With a ``group_id``, ``__consumer_offsets`` is created first if it does not exist, as
        Kafka's brokers create it on the first FindCoordinator."""
        self._ensure_open()
        if group_id is not None:
            self._before_group_consumer(group_id, topics, kwargs)
        c = Consumer(self, group_id=group_id, topics=topics, **kwargs)
        self._track(c)
        return c

    def group_admin(self) -> GroupAdmin:
        """This facade's :class:`~pylog.client.admin.GroupAdmin` (made on first use, closed with the cluster);
        the group calls below go through it."""
        self._ensure_open()
        with self._clients_lock:
            admin = self._group_admin_client
            if admin is None or admin.closed:
                admin = GroupAdmin(self, request_timeout_ms=self._request_timeout_ms)
                self._group_admin_client = admin
                self._clients.append(admin)
            return admin

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The broker id leading ``topic``-``partition`` in the metadata (-1: none). Unknown partition:
        :class:`~pylog.errors.UnknownTopicOrPartitionError`."""
        st = self.metadata.partitions.get((topic, partition)) if isinstance(topic, str) else None
        if st is None:
            raise UnknownTopicOrPartitionError(f"unknown partition {topic!r}-{partition!r}")
        return st.leader

    @property
    def now_ms(self) -> int:
        """The cluster's clock (virtual milliseconds in a simulated cluster)."""
        return self.scheduler.clock.now_ms()

    # ----------------------------------------------------------- group admin
    def list_groups(self) -> List[GroupListing]:
        """Every consumer group: ``GroupListing(group_id, state, protocol_type)``, sorted by id (Kafka's
        ListGroups sent to every broker). Groups whose offsets all expired are gone from the list."""
        return self.group_admin().list_groups()

    def describe_group(self, group_id: str) -> GroupDescription:
        """``GroupDescription(group_id, state, protocol_type, protocol, generation, leader, members)``, each
        member a ``MemberDescription(member_id, client_id, client_host, assignment, group_instance_id)`` (Kafka's
        DescribeGroups). Unknown group: :class:`~pylog.errors.GroupIdNotFoundError`."""
        return self.group_admin().describe_group(group_id)

    def list_group_offsets(self, group_id: str) -> Dict[Tuple[str, int], Any]:
        """The group's committed offsets: ``{(topic, partition): OffsetAndMetadata(offset, metadata,
        leader_epoch)}`` (empty for an unknown group)."""
        return self.group_admin().list_group_offsets(group_id)

    def delete_group(self, group_id: str) -> None:
        """Kafka's DeleteGroups: delete an empty group; tombstones for its offsets and metadata go to
        ``__consumer_offsets``, so it stays deleted after a coordinator failover. A group with members:
        :class:`~pylog.errors.NonEmptyGroupError`; unknown: :class:`~pylog.errors.GroupIdNotFoundError`."""
        self.group_admin().delete_group(group_id)

    def delete_group_offsets(self, group_id: str, partitions: Sequence[Tuple[str, int]]) -> None:
        """Kafka's OffsetDelete: drop the group's committed offsets of ``partitions``; refused with
        :class:`~pylog.errors.GroupSubscribedToTopicError` for topics its members subscribe to."""
        self.group_admin().delete_group_offsets(group_id, partitions)

    def remove_group_members(self, group_id: str, group_instance_ids: Sequence[str]) -> None:
        """Remove static members (``group_instance_id``, KIP-345) from ``group_id`` now, as Kafka's
        removeMembersFromConsumerGroup does: a static consumer's ``close`` does not leave its group.
        No member with one of the ids: :class:`~pylog.errors.UnknownMemberIdError`."""
        self.group_admin().remove_group_members(group_id, group_instance_ids)

    def alter_group_offsets(self, group_id: str, offsets: Dict[Tuple[str, int], Any]) -> None:
        """Set committed offsets (``{(topic, partition): offset}``) of an empty or new group (Kafka's
        alterConsumerGroupOffsets); a group with members: :class:`~pylog.errors.NonEmptyGroupError`.
        ``__consumer_offsets`` is created first if needed."""
        self._ensure_open()
        self.ensure_offsets_topic()
        self.group_admin().alter_group_offsets(group_id, offsets)

    # ---------------------------------------------------- transaction admin
    def describe_transactions(self, transactional_ids: Sequence[str]) -> Dict[str, TransactionDescription]:
        """Kafka's describeTransactions: ``{transactional_id: TransactionDescription(transactional_id,
        coordinator_id, state, producer_id, producer_epoch, transaction_timeout_ms, transaction_start_time_ms,
        topic_partitions)}`` from each id's coordinator. Unknown id:
        :class:`~pylog.errors.TransactionalIdNotFoundError` (see docs/transactions.md, "Admin")."""
        return self.group_admin().describe_transactions(transactional_ids)

    def list_transactions(self, state_filters: Sequence[str] = (), producer_id_filters: Sequence[int] = (),
                          duration_filter_ms: Optional[int] = None) -> List[TransactionListing]:
        """Kafka's listTransactions: ``TransactionListing(transactional_id, producer_id, state)`` of every
        transactional id its coordinator knows, sorted by id, filtered by state name, producer id and
        running time when given."""
        return self.group_admin().list_transactions(state_filters, producer_id_filters, duration_filter_ms)

    # ------------------------------------------------- for the facade's loop
    def _client_metrics(self) -> List[Metric]:
        """Every open producer's and consumer's samples (label ``client_id``)."""
        out: List[Metric] = []
        for c in list(self._clients):
            if isinstance(c, (Producer, Consumer)) and not c._node.closed:
                out.extend(c.metrics())
        return out

    def _clients_lost_broker(self, broker_ids: Sequence[Any]) -> None:
        """Loop thread: fail the clients' requests in flight to ``broker_ids`` (they stopped, or the owner left)."""
        for c in self._clients:
            for b in broker_ids:
                c._node.disconnected(b)

    def _close_client_nodes(self) -> None:
        """Loop thread: close every client's transport node (its pending requests fail)."""
        for c in self._clients:
            c._node.close_node()

    def __enter__(self: _F) -> _F:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ClusterFacade", "Client"]
