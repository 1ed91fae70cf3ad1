"""The consumer-group admin client: Kafka's ListGroups, DescribeGroups, OffsetFetch, DeleteGroups,
OffsetDelete and alterConsumerGroupOffsets, as blocking calls.

Reached through :class:`pylog.Cluster` (``cluster.list_groups()``, ...) and
the shared queue (:mod:`pylog.shared`), which create one :class:`GroupAdmin`
each on first use. Like the consumer, it talks to the brokers only with
messages over ``cluster.transport`` (so it works from a second process over
the shared queue's socket) and reads metadata only from ``cluster.metadata``:

* a group call looks the coordinator up (FindCoordinator to the leader of the
  group's ``__consumer_offsets`` partition, or the controller), sends the
  request there, and retries retriable answers (coordinator moved, not
  available, timeouts) after ``retry_backoff_ms`` until ``request_timeout_ms``;
* :meth:`GroupAdmin.list_groups` asks every broker and merges the answers
  once every ``__consumer_offsets`` partition is covered by its coordinator's
  answer (a partition without a serving leader past the timeout raises
  :class:`~pylog.errors.CoordinatorNotAvailableError` naming it).

Complexity: one or two request round trips per call (plus retries).
Durability: deletions and offset changes are acknowledged once they are in
``__consumer_offsets`` on the offsets partition's ISR (acks=all).
Thread-safety: every public method may be called from any thread but the
cluster's loop thread (it blocks until the answer; a simulated cluster runs
virtual time meanwhile).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypedDict

from pylog.client._node import ClientFuture, ClientNode
from pylog.client.config import check_group_instance_id
from pylog.client.types import OffsetAndMetadata
from pylog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidOffsetError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    PylogError,
    RequestTimedOutError,
    TransactionalIdNotFoundError,
    UnknownMemberIdError,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication import txn_messages as tm
from pylog.replication.messages import NO_LEADER
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC, TransactionState, partition_for_transactional_id
from pylog.runtime.cluster_context import ClusterContext

logger = logging.getLogger(__name__)

TP = Tuple[str, int]

_RETRIABLE = (NotCoordinatorError, CoordinatorNotAvailableError, CoordinatorLoadInProgressError,
              RequestTimedOutError, NotEnoughReplicasError, NotEnoughReplicasAfterAppendError)


class _CallState(TypedDict):
    unknown: bool  # an earlier attempt reached the coordinator with an unknown outcome
    last: Optional[BaseException]  # the latest retried error


class GroupListing(NamedTuple):
    """One row of :meth:`GroupAdmin.list_groups`. ``protocol_type`` is ``""`` for a group that only
    stores offsets (standalone ``assign()`` consumers, :meth:`GroupAdmin.alter_group_offsets`)."""

    group_id: str
    state: str
    protocol_type: str


class MemberDescription(NamedTuple):
    """A member of a described group; ``assignment`` is empty unless the group is Stable.
    ``group_instance_id``: a static member's ``group.instance.id`` (KIP-345), None for a dynamic one."""

    member_id: str
    client_id: str
    client_host: str
    assignment: Tuple[TP, ...]
    group_instance_id: Optional[str] = None


class GroupDescription(NamedTuple):
    """:meth:`GroupAdmin.describe_group`: Kafka's ConsumerGroupDescription."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    leader: str
    members: Tuple[MemberDescription, ...]


class TransactionListing(NamedTuple):
    """One row of :meth:`GroupAdmin.list_transactions` (Kafka's TransactionListing)."""

    transactional_id: str
    producer_id: int
    state: str


class TransactionDescription(NamedTuple):
    """:meth:`GroupAdmin.describe_transactions` (Kafka's TransactionDescription, with the id):
    ``state`` is Kafka's name (``Ongoing``, ``PrepareCommit``, ...); ``transaction_start_time_ms`` is
    None when no transaction is open (Kafka's empty OptionalLong); ``topic_partitions`` sorted."""

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: Optional[int]
    topic_partitions: Tuple[TP, ...]


class GroupAdmin:
    """Blocking consumer-group admin calls over ``cluster``'s transport (see the module docstring)."""

    def __init__(self, cluster: ClusterContext, *, request_timeout_ms: int = 30_000, retry_backoff_ms: int = 100):
        self.scheduler = cluster.scheduler
        self.store = cluster.metadata
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._node: ClientNode = self.scheduler.run_sync(
            lambda: ClientNode("admin", self.scheduler, cluster.transport))

    # ------------------------------------------------------------ plumbing
    def _now(self) -> int:
        return self.scheduler.clock.now_ms()

    def _wait(self, start: Callable[[ClientFuture, int], None]) -> Any:
        """Run ``start(future, deadline)`` on the loop and block for the future's result."""
        if self._node.closed:
            raise PylogError("the group admin client is closed (its cluster was closed)")
        fut = ClientFuture(self.scheduler)
        self.scheduler.run_sync(lambda: start(fut, self._now() + self.request_timeout_ms))
        return fut.result(self.request_timeout_ms / 1000 + 5)

    def _later(self, fn: Callable[[], None]) -> None:
        self.scheduler.call_later(self.retry_backoff_ms, fn)

    def _group_call(self, group_id: str, make: Callable[[int], Any], answer: Callable[[Any, ClientFuture, bool], None],
                    missing: Callable[[ClientFuture], None], fut: ClientFuture, deadline: int) -> None:
        """FindCoordinator, then ``make(correlation_id)`` to it; ``answer(resp, fut, retried_unknown)`` gets a
        response that is not a retriable error (``retried_unknown``: an earlier attempt of this call reached the
        coordinator and its outcome is unknown). ``missing(fut)`` runs when ``__consumer_offsets`` does not exist."""
        def where() -> Tuple[bool, Any]:
            cfg = self.store.topics.get(ot.OFFSETS_TOPIC)
            if cfg is None:
                return False, None
            return True, self.store.partitions.get((ot.OFFSETS_TOPIC, ot.partition_for_group(group_id, cfg.partitions)))

        self._coordinator_call(f"group {group_id!r}", where, lambda corr: gm.FindCoordinatorRequest(group_id, corr),
                               make, answer, missing, fut, deadline)

    def _coordinator_call(self, what: str, where: Callable[[], Tuple[bool, Any]], find: Callable[[int], Any],
                          make: Callable[[int], Any], answer: Callable[[Any, ClientFuture, bool], None],
                          missing: Callable[[ClientFuture], None], fut: ClientFuture, deadline: int,
                          error_of: Optional[Callable[[Any], Tuple[Any, str]]] = None,
                          on_coordinator: Optional[Callable[[int], None]] = None) -> None:
        """:meth:`_group_call` for any coordinator: ``where()`` is ``(topic exists, partition state)`` of the
        coordinator's partition, ``find(corr)`` the FindCoordinator request to send its leader;
        ``error_of(resp)``: the answer's ``(error class or None, message)`` (default: its ``error`` and
        ``message``), a retriable one retried."""
        state: _CallState = {"unknown": False, "last": None}

        def retry(err: BaseException) -> None:
            state["last"] = err
            if fut.done() or self._node.closed:
                fut.set_exception(err)
                return
            if self._now() + self.retry_backoff_ms >= deadline:
                fut.set_exception(err)
                return
            self._later(attempt)

        def attempt() -> None:
            if fut.done():
                return
            exists, st = where()
            if not exists:
                missing(fut)
                return
            target = st.leader if st is not None and st.leader != NO_LEADER else self.store.controller_id
            if target is None:
                return retry(CoordinatorNotAvailableError(f"{what}: no broker to ask for its coordinator"))
            timeout = max(1, min(self.request_timeout_ms, deadline - self._now()))

            def found(resp: Any) -> None:
                if resp is None:
                    return retry(RequestTimedOutError(f"FindCoordinator for {what} timed out"))
                if resp.error is not None:
                    return retry(resp.error(resp.message))
                if on_coordinator is not None:
                    on_coordinator(resp.node_id)
                self._node.request(resp.node_id, make(self._node.next_corr()), timeout, done)

            def done(resp: Any) -> None:
                if resp is None:
                    state["unknown"] = True
                    return retry(RequestTimedOutError(f"request to the coordinator of {what} timed out"))
                error, message = error_of(resp) if error_of is not None else (resp.error, resp.message)
                if error is not None and issubclass(error, _RETRIABLE):
                    state["unknown"] = True  # e.g. its append to the offsets partition failed: maybe written
                    return retry(error(message))
                try:
                    answer(resp, fut, bool(state["unknown"]))
                except BaseException as exc:  # a decoding error: the caller sees it
                    fut.set_exception(exc)

            self._node.request(target, find(self._node.next_corr()), timeout, found)

        attempt()

    @staticmethod
    def _check_group(group_id: Any) -> str:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupIdError(f"group_id must be a non-empty str, got {group_id!r}")
        return group_id

    def _list_from_coordinators(self, what: str, topic: str, partition_of: Callable[[str, int], int],
                                request: Callable[[int], Any], rows_of: Callable[[Any], Any],
                                listing: Callable[..., Any]) -> List[Any]:
        """Ask every broker for the rows it coordinates (groups or transactional ids) and merge them once
        each partition of ``topic`` is covered by the answer of the broker that coordinates it; a row
        counts only from its partition's coordinator (a broker that just lost the partition may still
        list it). Sorted listings; ``[]`` when ``topic`` does not exist. Retried after
        ``retry_backoff_ms`` while a partition is uncovered; :class:`CoordinatorNotAvailableError`
        naming the partitions at the deadline. Complexity: one round trip to every broker per attempt."""
        def start(fut: ClientFuture, deadline: int) -> None:
            def attempt() -> None:
                cfg = self.store.topics.get(topic)
                if cfg is None:
                    fut.set_result([])
                    return
                wanted = set(range(cfg.partitions))
                owner: Dict[int, Any] = {}  # partition of `topic` -> the broker whose answer covers it
                rows: Dict[Any, Any] = {}
                brokers = list(self.store.brokers)
                left = {"n": len(brokers)}
                timeout = max(1, min(self.request_timeout_ms, deadline - self._now()))

                def finish() -> None:
                    got = [listing(*row) for b, rs in rows.items() for row in rs
                           if owner.get(partition_of(row[0], cfg.partitions)) == b]
                    fut.set_result(sorted(got))

                def answered(b: Any, resp: Any) -> None:
                    left["n"] -= 1
                    if fut.done():
                        return
                    if resp is not None and resp.error is None:
                        rows[b] = rows_of(resp)
                        for p in resp.partitions:
                            owner.setdefault(p, b)
                    if wanted <= set(owner):
                        finish()
                    elif left["n"] == 0:
                        missing = sorted(wanted - set(owner))
                        if self._now() + self.retry_backoff_ms >= deadline:
                            fut.set_exception(CoordinatorNotAvailableError(
                                f"{what}: no coordinator answered for {topic} partitions {missing}"))
                        else:
                            self._later(attempt)

                for b in brokers:
                    def on_answer(resp: Any, b: Any = b) -> None:
                        answered(b, resp)

                    self._node.request(b, request(self._node.next_corr()), timeout, on_answer)

            attempt()

        return self._wait(start)  # type: ignore[no-any-return]

    # ----------------------------------------------------------------- API
    def list_groups(self) -> List[GroupListing]:
        """Every group of the cluster, sorted by id: each broker answers for the groups it coordinates.

        Raises :class:`CoordinatorNotAvailableError` when some ``__consumer_offsets``
        partition had no coordinator answering within ``request_timeout_ms``.
        """
        return self._list_from_coordinators(
            "list_groups", ot.OFFSETS_TOPIC, ot.partition_for_group, gm.ListGroupsRequest,
            lambda resp: resp.groups, lambda gid, ptype, state: GroupListing(gid, state, ptype))

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, protocol, generation, leader and members (client id, host, assigned partitions, group
        instance id) of a group.

        Raises :class:`GroupIdNotFoundError` for a group that does not exist.
        """
        group_id = self._check_group(group_id)

        def answer(resp: Any, fut: ClientFuture, _: bool) -> None:
            if resp.error is not None:
                fut.set_exception(resp.error(resp.message))
                return
            consumer = resp.protocol_type == "consumer"
            members = tuple(MemberDescription(row[0], row[1], row[2],
                                              tuple(ot.decode_assignment(row[3])) if consumer else (),
                                              row[4] if len(row) > 4 else None)
                            for row in resp.members)
            fut.set_result(GroupDescription(group_id, resp.state, resp.protocol_type, resp.protocol,
                                            resp.generation_id, resp.leader, members))

        def missing(fut: ClientFuture) -> None:
            fut.set_exception(GroupIdNotFoundError(f"group {group_id!r} does not exist (no {ot.OFFSETS_TOPIC} yet)"))

        return self._wait(lambda fut, dl: self._group_call(
            group_id, lambda corr: gm.DescribeGroupsRequest(group_id, corr), answer, missing, fut, dl))

    def list_group_offsets(self, group_id: str) -> Dict[TP, OffsetAndMetadata]:
        """The group's committed offsets, per partition (empty for an unknown group, as Kafka)."""
        group_id = self._check_group(group_id)

        def answer(resp: Any, fut: ClientFuture, _: bool) -> None:
            if resp.error is not None:
                fut.set_exception(resp.error(resp.message))
                return
            fut.set_result({(t, p): OffsetAndMetadata(o, m, e) for t, p, o, e, m in resp.offsets if o >= 0})

        return self._wait(lambda fut, dl: self._group_call(
            group_id, lambda corr: gm.OffsetFetchRequest(group_id, corr, partitions=None), answer,
            lambda fut: fut.set_result({}), fut, dl))

    def delete_group(self, group_id: str) -> None:
        """Kafka's DeleteGroups: delete an empty group (its offsets and metadata get tombstones).

        Raises :class:`NonEmptyGroupError` when it has members, :class:`GroupIdNotFoundError` when it does
        not exist. A retry after an attempt whose outcome was unknown counts "not found" as done.
        """
        group_id = self._check_group(group_id)

        def answer(resp: Any, fut: ClientFuture, unknown: bool) -> None:
            if resp.error is None or (resp.error is GroupIdNotFoundError and unknown):
                fut.set_result(None)
            else:
                fut.set_exception(resp.error(resp.message))

        def missing(fut: ClientFuture) -> None:
            fut.set_exception(GroupIdNotFoundError(f"group {group_id!r} does not exist (no {ot.OFFSETS_TOPIC} yet)"))

        self._wait(lambda fut, dl: self._group_call(
            group_id, lambda corr: gm.DeleteGroupsRequest(group_id, corr), answer, missing, fut, dl))

    def delete_group_offsets(self, group_id: str, partitions: Sequence[TP]) -> None:
        """Kafka's OffsetDelete: drop the group's committed offsets of ``partitions``.

        Refused with :class:`~pylog.errors.GroupSubscribedToTopicError` (naming the first such partition)
        for partitions of topics a member of the group subscribes to; the other partitions are deleted.
        A non-consumer group with members: :class:`NonEmptyGroupError`.
        """
        group_id = self._check_group(group_id)
        tps = tuple(sorted({(str(t), int(p)) for t, p in partitions}))

        def answer(resp: Any, fut: ClientFuture, _: bool) -> None:
            if resp.error is not None:
                fut.set_exception(resp.error(resp.message))
                return
            for _t, _p, error, message in resp.partition_errors:
                if error is not None:
                    fut.set_exception(error(message))
                    return
            fut.set_result(None)

        def missing(fut: ClientFuture) -> None:
            fut.set_exception(GroupIdNotFoundError(f"group {group_id!r} does not exist (no {ot.OFFSETS_TOPIC} yet)"))

        self._wait(lambda fut, dl: self._group_call(
            group_id, lambda corr: gm.OffsetDeleteRequest(group_id, corr, partitions=tps), answer, missing, fut, dl))

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TP, Any]) -> None:
        """Set committed offsets of an empty (or new) group: Kafka's alterConsumerGroupOffsets, an
        OffsetCommit without member or generation. ``offsets`` values: int or :class:`OffsetAndMetadata`.

        Raises :class:`NonEmptyGroupError` when the group has members (Kafka answers UNKNOWN_MEMBER_ID).
        The caller must make sure ``__consumer_offsets`` exists (the cluster's method does).
        """
        group_id = self._check_group(group_id)
        rows = []
        for (t, p), v in sorted(offsets.items()):
            off, meta, epoch = (v.offset, v.metadata, v.leader_epoch) if isinstance(v, OffsetAndMetadata) else (int(v), "", -1)
            if off < 0:
                raise InvalidOffsetError(f"group {group_id!r}: offset {off} for {t}-{p} is negative")
            rows.append((str(t), int(p), off, epoch, meta))
        if not rows:
            return

        def answer(resp: Any, fut: ClientFuture, _: bool) -> None:
            if resp.error is None:
                fut.set_result(None)
            elif resp.error is UnknownMemberIdError:
                fut.set_exception(NonEmptyGroupError(
                    f"group {group_id!r} has active members: its offsets can only be altered while it is empty "
                    f"({resp.message})"))
            else:
                fut.set_exception(resp.error(resp.message))

        def missing(fut: ClientFuture) -> None:
            fut.set_exception(CoordinatorNotAvailableError(f"group {group_id!r}: {ot.OFFSETS_TOPIC} does not exist"))

        self._wait(lambda fut, dl: self._group_call(
            group_id, lambda corr: gm.OffsetCommitRequest(group_id, corr, offsets=tuple(rows)), answer, missing,
            fut, dl))

    def remove_group_members(self, group_id: str, group_instance_ids: Sequence[str]) -> None:
        """Remove static members (KIP-345) by their ``group_instance_id``: Kafka's
        removeMembersFromConsumerGroup, a LeaveGroup naming the instance id without a member id.

        A static consumer's ``close`` does not leave its group; this is how an operator takes a member
        that will not come back out at once (the group rebalances) instead of waiting for its session
        timeout. Raises :class:`UnknownMemberIdError` naming the group and the instance id when no member
        holds it (ids before it in the list are removed). A retry after an attempt whose outcome is
        unknown counts "unknown" as done.
        """
        group_id = self._check_group(group_id)
        ids = [group_instance_ids] if isinstance(group_instance_ids, str) else list(group_instance_ids)
        for iid in ids:
            check_group_instance_id(iid, group_id)
        for iid in ids:
            def answer(resp: Any, fut: ClientFuture, unknown: bool) -> None:
                if resp.error is None or (resp.error is UnknownMemberIdError and unknown):
                    fut.set_result(None)
                else:
                    fut.set_exception(resp.error(resp.message))

            def missing(fut: ClientFuture, iid: str = iid) -> None:
                fut.set_exception(UnknownMemberIdError(
                    f"group {group_id!r} has no member with group instance id {iid!r} (no {ot.OFFSETS_TOPIC} yet)"))

            def start(fut: ClientFuture, dl: int, iid: str = iid,
                      answer: Callable[[Any, ClientFuture, bool], None] = answer,
                      missing: Callable[[ClientFuture], None] = missing) -> None:
                self._group_call(group_id, lambda corr: gm.LeaveGroupRequest(group_id, corr, group_instance_id=iid),
                                 answer, missing, fut, dl)

            self._wait(start)

    # -------------------------------------------------------- transactions
    def describe_transactions(self, transactional_ids: Sequence[str]) -> Dict[str, "TransactionDescription"]:
        """Kafka's ``Admin.describeTransactions``: per transactional id, its coordinator's state
        (:class:`TransactionDescription`: coordinator, state, producer id/epoch, timeout, start time,
        partitions). Each id is asked of its coordinator (FindCoordinator(TRANSACTION)), retried while
        the coordinator moves or loads, until ``request_timeout_ms``.

        Raises :class:`~pylog.errors.TransactionalIdNotFoundError` naming the first id its coordinator
        does not know (no ``__transaction_state`` yet: none is known),
        :class:`~pylog.errors.InvalidRequestError` for an empty id. Complexity: two round trips per id.
        """
        ids = [transactional_ids] if isinstance(transactional_ids, str) else list(transactional_ids)
        for tid in ids:
            if not isinstance(tid, str) or not tid:
                raise InvalidRequestError(f"transactional ids must be non-empty strings, got {tid!r}")
        out: Dict[str, TransactionDescription] = {}
        for tid in dict.fromkeys(ids):
            def start(fut: ClientFuture, dl: int, tid: str = tid) -> None:
                self._describe_transaction(tid, fut, dl)

            out[tid] = self._wait(start)
        return out

    def _describe_transaction(self, tid: str, fut: ClientFuture, deadline: int) -> None:
        coordinator = {"node": -1}

        def where() -> Tuple[bool, Any]:
            cfg = self.store.topics.get(TRANSACTION_STATE_TOPIC)
            if cfg is None:
                return False, None
            return True, self.store.partitions.get(
                (TRANSACTION_STATE_TOPIC, partition_for_transactional_id(tid, cfg.partitions)))

        def row_of(resp: Any) -> Any:
            rows = [r for r in resp.transactions if r.transactional_id == tid]
            return rows[0] if rows else None

        def error_of(resp: Any) -> Tuple[Any, str]:
            row = row_of(resp)
            if row is None:
                return CoordinatorNotAvailableError, f"the coordinator of transactional id {tid!r} did not describe it"
            return row.error, row.message

        def answer(resp: Any, fut: ClientFuture, _: bool) -> None:
            row = row_of(resp)
            if row.error is not None:
                fut.set_exception(row.error(row.message))
                return
            start = row.transaction_start_time_ms
            fut.set_result(TransactionDescription(
                tid, coordinator["node"], row.state, row.producer_id, row.producer_epoch, row.transaction_timeout_ms,
                None if start < 0 else start, tuple((str(t), int(p)) for t, p in row.partitions)))

        def missing(fut: ClientFuture) -> None:
            fut.set_exception(TransactionalIdNotFoundError(
                f"transactional id {tid!r} is not known: {TRANSACTION_STATE_TOPIC} does not exist"))

        def found(node: int) -> None:
            coordinator["node"] = node

        self._coordinator_call(f"transactional id {tid!r}", where,
                               lambda corr: tm.FindTransactionCoordinatorRequest(tid, corr),
                               lambda corr: tm.DescribeTransactionsRequest((tid,), corr), answer, missing, fut,
                               deadline, error_of=error_of, on_coordinator=found)

    def list_transactions(self, state_filters: Sequence[str] = (), producer_id_filters: Sequence[int] = (),
                          duration_filter_ms: Optional[int] = None) -> List["TransactionListing"]:
        """Kafka's ``Admin.listTransactions``: every transactional id of the cluster known to its
        coordinator, as :class:`TransactionListing` ``(transactional_id, producer_id, state)``, sorted by
        id; only those in ``state_filters`` (Kafka's state names: ``Empty``, ``Ongoing``,
        ``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``), of
        ``producer_id_filters`` and open longer than ``duration_filter_ms`` when given (KIP-994). Every
        broker is asked; the answers are merged once each ``__transaction_state`` partition is covered
        by its coordinator's answer.

        Raises :class:`~pylog.errors.InvalidRequestError` for a state filter that names no state,
        :class:`CoordinatorNotAvailableError` naming the partitions no coordinator answered for within
        ``request_timeout_ms``. Complexity: one round trip to every broker (plus retries).
        """
        states = (state_filters,) if isinstance(state_filters, str) else tuple(state_filters)
        known = {st.kafka_name for st in TransactionState}
        bad = [x for x in states if x not in known]
        if bad:
            raise InvalidRequestError(f"unknown transaction state filter {bad[0]!r}; states: {', '.join(sorted(known))}")
        pids = tuple(int(p) for p in producer_id_filters)
        duration = -1 if duration_filter_ms is None else int(duration_filter_ms)

        return self._list_from_coordinators(
            "list_transactions", TRANSACTION_STATE_TOPIC, partition_for_transactional_id,
            lambda corr: tm.ListTransactionsRequest(corr, states, pids, duration),
            lambda resp: resp.transactions, TransactionListing)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran or the cluster closed this client."""
        return self._node.closed

    def close(self) -> None:
        self.scheduler.run_sync(self._node.close_node)



__all__ = ["GroupAdmin", "GroupListing", "GroupDescription", "MemberDescription", "OffsetAndMetadata",
           "TransactionDescription", "TransactionListing"]
