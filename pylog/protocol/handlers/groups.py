"""The group APIs of the Kafka protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups.

Each handler translates a decoded Kafka request into the in-process messages of
:mod:`pylog.replication.group_messages` and sends them, through the listener's
transport node (:meth:`RequestContext.request`), to the broker the client
connected to: the broker answers FindCoordinator itself and hands every other
group request to its :class:`~pylog.replication.group_coordinator.GroupCoordinator`
- the same path, the same state machine, as pylog's in-process consumer. So a
kafka-python, confluent-kafka or aiokafka member and an in-process member can
be in one group, and offsets committed by one are read by the other. No group
logic lives here: only the mapping of fields and errors, and the checks Kafka
makes before its coordinator sees a request (an empty group id, an unknown
topic or an oversized metadata string in OffsetCommit).

The consumer protocol's subscription and assignment bytes (and any other
protocol type's metadata) are opaque: they pass through unchanged.

Versions: :data:`VERSIONS` (Kafka 2.8's maxima, as the rest of the listener; docs/kafka-protocol.md ("Consumer groups over the wire")).
JoinGroup v4+ makes a new dynamic member join twice (KIP-394
``MEMBER_ID_REQUIRED``), v5+ carries ``group.instance.id`` (KIP-345),
LeaveGroup v3+ removes a batch of members, OffsetFetch v2+ with null topics
returns every committed partition (and, not advertised yet, OffsetFetch v8+
batches groups and FindCoordinator v4+ batches keys).

Complexity: O(size of the request) per request, plus one in-process round
trip per group (per member for a batched LeaveGroup, per key for a batched
FindCoordinator). Durability: OffsetCommit is answered once the commit is in
``__consumer_offsets`` on its ISR (acks=all), as the coordinator does for
every client. Thread-safety: handlers run on the cluster's loop thread.
"""
from __future__ import annotations

import logging
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from pylog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    NotCoordinatorError,
)
from pylog.protocol import codec
from pylog.protocol.api import RequestContext, guarded_request, register
from pylog.replication import group_messages as gm
from pylog.replication.offsets_topic import OFFSETS_TOPIC

#: (min, max) version served per API. The maxima are Apache Kafka 2.8's, as the rest of the listener
#: (Produce 9, Fetch 12, Metadata 11: kafka-python infers a 2.8 broker from them, and a JoinGroup 8+ or
#: OffsetFetch 8+ would make it infer a later one); the minima are Kafka 4.0's (KIP-896 dropped
#: OffsetCommit v0-1 and OffsetFetch v0). They cover aiokafka 0.14 (JoinGroup 5, SyncGroup 3,
#: OffsetCommit 3, OffsetFetch 3, Heartbeat/LeaveGroup/FindCoordinator 1), librdkafka 2.x
#: (FindCoordinator 2, JoinGroup 5, SyncGroup/Heartbeat 3, LeaveGroup 1, OffsetCommit 8, OffsetFetch 7)
#: and kafka-python 3 (JoinGroup 7, SyncGroup 5, OffsetCommit 8, OffsetFetch 7, FindCoordinator 3).
#: The handlers also speak the later versions of Kafka 4.0 (FindCoordinator 4-6 with batched keys,
#: JoinGroup 8-9, LeaveGroup 5, OffsetCommit 9, OffsetFetch 8-9 with batched groups, DescribeGroups 6,
#: ListGroups 5): raising a maximum here is all it takes once the whole listener moves to that release.
VERSIONS: Dict[str, Tuple[int, int]] = {
    "FindCoordinator": (0, 3),
    "JoinGroup": (0, 7),
    "SyncGroup": (0, 5),
    "Heartbeat": (0, 4),
    "LeaveGroup": (0, 4),
    "OffsetCommit": (2, 8),
    "OffsetFetch": (1, 7),
    "DescribeGroups": (0, 5),
    "ListGroups": (0, 4),
}

_log = logging.getLogger(__name__)

#: Kafka's ``offset.metadata.max.bytes``: a longer OffsetCommit metadata string gets OFFSET_METADATA_TOO_LARGE
OFFSET_METADATA_MAX_BYTES = 4096
#: DescribeGroups' AuthorizedOperations when they are not computed (on the wire: Integer.MIN_VALUE)
_NO_AUTHORIZED_OPERATIONS = None  # kafka-python encodes None as Integer.MIN_VALUE
#: FindCoordinator key types: 0 group (served here), 1 transaction, 2 share (not served; see
#: :data:`COORDINATOR_LOOKUPS`)
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

_CODES = codec.ERROR_CODES
NONE = 0
OFFSET_METADATA_TOO_LARGE = _CODES.get("OFFSET_METADATA_TOO_LARGE", 12)
COORDINATOR_NOT_AVAILABLE = codec.COORDINATOR_NOT_AVAILABLE
INVALID_GROUP_ID = _CODES.get("INVALID_GROUP_ID", 24)
GROUP_ID_NOT_FOUND = _CODES.get("GROUP_ID_NOT_FOUND", 69)
UNKNOWN_TOPIC_OR_PARTITION = codec.UNKNOWN_TOPIC_OR_PARTITION
INVALID_REQUEST = codec.INVALID_REQUEST
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = codec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
#: errors about the group as a whole, not one member or partition (LeaveGroup's top-level error)
_GROUP_LEVEL = (NotCoordinatorError, CoordinatorNotAvailableError, CoordinatorLoadInProgressError)


def error_code(error: Any) -> int:
    """Kafka's code for a pylog error class (or None): codec's table, else the class's ``kafka_name``."""
    code = codec.error_code_of(error)
    if code == codec.UNKNOWN_SERVER_ERROR and error is not None:
        name = getattr(error, "kafka_name", None)
        if name in _CODES:
            return _CODES[name]
    return code


def _call(ctx: RequestContext, req: Any, msg: Any, timeout_ms: int, done: Callable[[Any], None]) -> None:
    """Send ``msg`` to this listener's broker; ``done(response)``, or ``done(None)`` on timeout
    (:func:`pylog.protocol.api.guarded_request`: a ``done`` that raises answers UNKNOWN_SERVER_ERROR)."""
    guarded_request(ctx, req, msg, done, timeout_ms=timeout_ms)


def _range(name: str) -> Tuple[int, int]:
    return VERSIONS[name]


# =================================================================== FindCoordinator
#: key type -> ``lookup(ctx, req, key, done)`` calling ``done(error_code, message, node_id)`` on the loop;
#: the group lookup is built in, a transaction coordinator may add key type 1
COORDINATOR_LOOKUPS: Dict[int, Callable[[RequestContext, Any, str, Callable[[int, Optional[str], int], None]], None]] = {}


#: topic -> the servers whose creation of that internal topic is under way (loop thread only)
_CREATING: Dict[str, "weakref.WeakSet[Any]"] = {}


def ensure_internal_topic(ctx: RequestContext, topic: str, create: Callable[[], None]) -> None:
    """Run ``create`` (the cluster's ``ensure_..._topic``) in the background, once at a time per server and
    topic, as Kafka's brokers create ``__consumer_offsets`` / ``__transaction_state`` on the first
    FindCoordinator that needs them; meanwhile clients get COORDINATOR_NOT_AVAILABLE and retry (a failed
    creation is tried again by the next one)."""
    server = ctx.server
    creating = _CREATING.setdefault(topic, weakref.WeakSet())
    if server in creating:
        return
    creating.add(server)

    def then(_: Any, error: Optional[BaseException]) -> None:
        creating.discard(server)
        if error is not None:
            _log.warning("creating %s failed: %s", topic, error)

    ctx.run_blocking(create, then)


def ensure_offsets_topic(ctx: RequestContext) -> None:
    """``__consumer_offsets`` created in the background (:func:`ensure_internal_topic`)."""
    ensure_internal_topic(ctx, OFFSETS_TOPIC, ctx.cluster.ensure_offsets_topic)


def _lookup_group(ctx: RequestContext, req: Any, key: str, done: Callable[[int, Optional[str], int], None]) -> None:
    if not ctx.cluster.has_offsets_topic():
        ensure_offsets_topic(ctx)
        done(COORDINATOR_NOT_AVAILABLE, "the __consumer_offsets topic is being created", -1)
        return

    def answer(resp: Any) -> None:
        if resp is None:
            done(COORDINATOR_NOT_AVAILABLE, f"group {key!r}: broker {ctx.broker_id} did not answer", -1)
        elif resp.error is not None:
            done(error_code(resp.error), resp.message or None, -1)
        else:
            done(NONE, None, resp.node_id)

    _call(ctx, req, gm.FindCoordinatorRequest(key, ctx.next_corr()), 30_000, answer)


COORDINATOR_LOOKUPS[GROUP_KEY_TYPE] = _lookup_group


def _find_coordinator_fail(ctx: RequestContext, req: Any, code: int) -> None:
    keys = list(req.coordinator_keys or []) if ctx.api_version >= 4 else [req.key]
    _find_coordinator_reply(ctx, [(k, code, None, -1) for k in keys])


def _find_coordinator_reply(ctx: RequestContext, rows: List[Tuple[str, int, Optional[str], int]]) -> None:
    def addr(node: int) -> Tuple[str, int]:
        if node < 0 or node not in ctx.server.ports:
            return "", -1
        return ctx.server.address_of(node)

    if ctx.api_version >= 4:
        cls = ctx.response_class.Coordinator
        coords = []
        for key, code, message, node in rows:
            host, port = addr(node) if code == NONE else ("", -1)
            coords.append(cls(key=key, node_id=node if code == NONE else -1, host=host, port=port, error_code=code,
                              error_message=message if code != NONE else None))
        ctx.reply(ctx.response(throttle_time_ms=0, coordinators=coords))
        return
    _, code, message, node = rows[0]
    host, port = addr(node) if code == NONE else ("", -1)
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code, error_message=message if code != NONE else None,
                           node_id=node if code == NONE else -1, host=host, port=port))


@register(api_key=10, min_version=_range("FindCoordinator")[0], max_version=_range("FindCoordinator")[1],
          fail=_find_coordinator_fail)
def find_coordinator(ctx: RequestContext, req: Any) -> None:
    """FindCoordinator: the broker leading the group's ``__consumer_offsets`` partition (v4+: per key)."""
    v = ctx.api_version
    key_type = req.key_type if v >= 1 else GROUP_KEY_TYPE
    keys = list(req.coordinator_keys or []) if v >= 4 else [req.key or ""]
    rows: List[Optional[Tuple[str, int, Optional[str], int]]] = [None] * len(keys)
    left = [len(keys)]
    if not keys:
        return _find_coordinator_reply(ctx, [])
    lookup = COORDINATOR_LOOKUPS.get(key_type)

    def one(i: int, key: str) -> None:
        def done(code: int, message: Optional[str], node: int) -> None:
            rows[i] = (key, code, message, node)
            left[0] -= 1
            if left[0] == 0:
                _find_coordinator_reply(ctx, rows)  # type: ignore[arg-type]

        if lookup is None and key_type == TRANSACTION_KEY_TYPE:
            # As InitProducerId with a transactional id: refused as unauthorized until transactions exist
            done(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "pylog serves no transaction coordinator (yet)", -1)
        elif lookup is None:
            kind = "share group" if key_type == 2 else f"key type {key_type}"
            done(INVALID_REQUEST, f"pylog serves no {kind} coordinator", -1)
        else:
            lookup(ctx, req, key, done)

    for i, key in enumerate(keys):
        one(i, key)


# ========================================================================= JoinGroup
def _join_fail(ctx: RequestContext, req: Any, code: int, message: Optional[str] = None, member_id: str = "") -> None:
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None,
                           protocol_name=None if ctx.api_version >= 7 else "", leader="", skip_assignment=False,
                           member_id=member_id, members=[]))


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]  # Kafka shows the client's address as InetAddress.toString


@register(api_key=11, min_version=_range("JoinGroup")[0], max_version=_range("JoinGroup")[1],
          fail=lambda ctx, req, code: _join_fail(ctx, req, code))
def join_group(ctx: RequestContext, req: Any) -> None:
    """JoinGroup: answered when the rebalance completes (the coordinator holds it until then)."""
    v = ctx.api_version
    if not req.group_id:
        return _join_fail(ctx, req, INVALID_GROUP_ID, member_id=req.member_id or "")
    rebalance_ms = req.rebalance_timeout_ms if v >= 1 and req.rebalance_timeout_ms >= 0 else req.session_timeout_ms
    msg = gm.JoinGroupRequest(
        req.group_id, ctx.next_corr(), member_id=req.member_id or "", session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=rebalance_ms, protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata or b"")) for p in req.protocols), client_id=ctx.client_id or "",
        group_instance_id=req.group_instance_id if v >= 5 else None, require_known_member_id=v >= 4,
        reason=req.reason if v >= 8 else None, client_host=_client_host(ctx))
    member_cls = ctx.response_class.JoinGroupResponseMember

    def done(resp: Any) -> None:
        if resp is None:
            return _join_fail(ctx, req, COORDINATOR_NOT_AVAILABLE, member_id=req.member_id or "")
        if resp.error is not None:
            return _join_fail(ctx, req, error_code(resp.error), resp.message, resp.member_id or "")
        instances = resp.member_instance_ids or (None,) * len(resp.members)
        members = [member_cls(member_id=mid, group_instance_id=inst, metadata=meta)
                   for (mid, meta), inst in zip(resp.members, instances)]
        name = resp.protocol_name if resp.protocol_name is not None or v >= 7 else ""
        ctx.reply(ctx.response(throttle_time_ms=0, error_code=NONE, generation_id=resp.generation_id,
                               protocol_type=resp.protocol_type, protocol_name=name, leader=resp.leader,
                               skip_assignment=False, member_id=resp.member_id, members=members))

    # The coordinator answers by the rebalance deadline; the margin covers a slow offsets-topic append.
    _call(ctx, req, msg, max(rebalance_ms, req.session_timeout_ms, 0) + 60_000, done)


# ========================================================================= SyncGroup
def _sync_fail(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code, protocol_type=None, protocol_name=None,
                           assignment=b""))


@register(api_key=14, min_version=_range("SyncGroup")[0], max_version=_range("SyncGroup")[1], fail=_sync_fail)
def sync_group(ctx: RequestContext, req: Any) -> None:
    """SyncGroup: the leader's assignments in, each member's own assignment out (opaque bytes)."""
    v = ctx.api_version
    if not req.group_id:
        return _sync_fail(ctx, req, INVALID_GROUP_ID)
    msg = gm.SyncGroupRequest(
        req.group_id, ctx.next_corr(), generation_id=req.generation_id, member_id=req.member_id,
        assignments=tuple((a.member_id, bytes(a.assignment or b"")) for a in req.assignments),
        group_instance_id=req.group_instance_id if v >= 3 else None,
        protocol_type=req.protocol_type if v >= 5 else None, protocol_name=req.protocol_name if v >= 5 else None)

    def done(resp: Any) -> None:
        if resp is None:
            return _sync_fail(ctx, req, COORDINATOR_NOT_AVAILABLE)
        if resp.error is not None:
            return _sync_fail(ctx, req, error_code(resp.error))
        ctx.reply(ctx.response(throttle_time_ms=0, error_code=NONE, protocol_type=resp.protocol_type,
                               protocol_name=resp.protocol_name, assignment=resp.assignment))

    _call(ctx, req, msg, 300_000, done)  # the leader may take its time to assign; the coordinator answers


# ========================================================================= Heartbeat
def _heartbeat_fail(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code))


@register(api_key=12, min_version=_range("Heartbeat")[0], max_version=_range("Heartbeat")[1], fail=_heartbeat_fail)
def heartbeat(ctx: RequestContext, req: Any) -> None:
    if not req.group_id:
        return _heartbeat_fail(ctx, req, INVALID_GROUP_ID)
    msg = gm.HeartbeatRequest(req.group_id, ctx.next_corr(), generation_id=req.generation_id,
                              member_id=req.member_id,
                              group_instance_id=req.group_instance_id if ctx.api_version >= 3 else None)
    _call(ctx, req, msg, 30_000, lambda resp: _heartbeat_fail(
        ctx, req, COORDINATOR_NOT_AVAILABLE if resp is None else error_code(resp.error)))


# ======================================================================== LeaveGroup
def _leave_members(ctx: RequestContext, req: Any) -> List[Tuple[str, Optional[str]]]:
    if ctx.api_version >= 3:
        return [(m.member_id or "", m.group_instance_id) for m in (req.members or [])]
    return [(req.member_id or "", None)]


def _leave_reply(ctx: RequestContext, req: Any, top: int, rows: List[Tuple[str, Optional[str], int]]) -> None:
    if ctx.api_version <= 2:
        # Kafka's LeaveGroupResponse for v0-2: the top-level error, else the member's
        code = top if top != NONE else next((c for _, _, c in rows if c != NONE), NONE)
        ctx.reply(ctx.response(throttle_time_ms=0, error_code=code))
        return
    cls = ctx.response_class.MemberResponse
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=top, members=[
        cls(member_id=mid, group_instance_id=inst, error_code=c) for mid, inst, c in rows]))


def _leave_fail(ctx: RequestContext, req: Any, code: int) -> None:
    _leave_reply(ctx, req, code, [])


@register(api_key=13, min_version=_range("LeaveGroup")[0], max_version=_range("LeaveGroup")[1], fail=_leave_fail)
def leave_group(ctx: RequestContext, req: Any) -> None:
    """LeaveGroup: one member (v0-2) or a batch (v3+, by member id or group instance id), each removed by
    the coordinator as a LeaveGroup of its own; an error about the group itself is the top-level error."""
    if not req.group_id:
        return _leave_fail(ctx, req, INVALID_GROUP_ID)
    members = _leave_members(ctx, req)
    if not members:
        return _leave_reply(ctx, req, NONE, [])
    results: List[Optional[Tuple[str, Optional[str], int, Any]]] = [None] * len(members)
    left = [len(members)]

    def finish() -> None:
        top = next((error_code(e) for _, _, _, e in results if e in _GROUP_LEVEL), NONE)  # type: ignore[misc]
        _leave_reply(ctx, req, top, [(mid, inst, c) for mid, inst, c, _ in results])  # type: ignore[misc]

    def one(i: int, member_id: str, instance: Optional[str]) -> None:
        def done(resp: Any) -> None:
            err = CoordinatorNotAvailableError if resp is None else resp.error
            results[i] = (member_id, instance, error_code(err), err)
            left[0] -= 1
            if left[0] == 0:
                finish()

        _call(ctx, req, gm.LeaveGroupRequest(req.group_id, ctx.next_corr(), member_id=member_id,
                                        group_instance_id=instance), 30_000, done)

    for i, (mid, inst) in enumerate(members):
        one(i, mid, inst)


# ====================================================================== OffsetCommit
def _commit_reply(ctx: RequestContext, rows: List[Tuple[str, int, int]]) -> None:
    tcls = ctx.response_class.OffsetCommitResponseTopic
    pcls = tcls.OffsetCommitResponsePartition
    by_topic: Dict[str, List[Any]] = {}
    for t, p, code in rows:
        by_topic.setdefault(t, []).append(pcls(partition_index=p, error_code=code))
    ctx.reply(ctx.response(throttle_time_ms=0, topics=[tcls(name=t, partitions=ps) for t, ps in by_topic.items()]))


def _commit_fail(ctx: RequestContext, req: Any, code: int) -> None:
    _commit_reply(ctx, [(t.name, p.partition_index, code) for t in req.topics for p in t.partitions])


def _partition_count(ctx: RequestContext, topic: str) -> int:
    cfg = ctx.cluster.metadata.topics.get(topic)
    return 0 if cfg is None else cfg.partitions


@register(api_key=8, min_version=_range("OffsetCommit")[0], max_version=_range("OffsetCommit")[1], fail=_commit_fail)
def offset_commit(ctx: RequestContext, req: Any) -> None:
    """OffsetCommit: offsets with their leader epoch and metadata string (stored and fetched back as
    given; null is stored as ""). Unknown partitions and metadata over
    :data:`OFFSET_METADATA_MAX_BYTES` get their own error, as in Kafka; the rest is one commit."""
    v = ctx.api_version
    if not req.group_id:
        return _commit_fail(ctx, req, INVALID_GROUP_ID)
    rows: List[Tuple[str, int, int]] = []
    offsets: List[Tuple[str, int, int, int, str]] = []
    for t in req.topics:
        count = _partition_count(ctx, t.name)
        for p in t.partitions:
            meta = p.committed_metadata or ""
            if not 0 <= p.partition_index < count:
                rows.append((t.name, p.partition_index, UNKNOWN_TOPIC_OR_PARTITION))
            elif len(meta.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES:
                rows.append((t.name, p.partition_index, OFFSET_METADATA_TOO_LARGE))
            else:
                epoch = p.committed_leader_epoch if v >= 6 else -1
                offsets.append((t.name, p.partition_index, p.committed_offset, -1 if epoch is None else epoch, meta))
    if not offsets:
        return _commit_reply(ctx, rows)
    msg = gm.OffsetCommitRequest(req.group_id, ctx.next_corr(), generation_id=req.generation_id_or_member_epoch,
                                 member_id=req.member_id or "", offsets=tuple(offsets),
                                 group_instance_id=req.group_instance_id if v >= 7 else None)

    def done(resp: Any) -> None:
        code = COORDINATOR_NOT_AVAILABLE if resp is None else error_code(resp.error)
        _commit_reply(ctx, rows + [(t, p, code) for t, p, _, _, _ in offsets])

    _call(ctx, req, msg, 60_000, done)


# ======================================================================= OffsetFetch
_Rows = List[Tuple[str, int, int, int, Optional[str], int]]  # topic, partition, offset, epoch, metadata, error


def _fetch_topics(ctx: RequestContext, rows: _Rows, batched: bool) -> List[Any]:
    if batched:
        tcls = ctx.response_class.OffsetFetchResponseGroup.OffsetFetchResponseTopics
        pcls = tcls.OffsetFetchResponsePartitions
    else:
        tcls = ctx.response_class.OffsetFetchResponseTopic
        pcls = tcls.OffsetFetchResponsePartition
    by_topic: Dict[str, List[Any]] = {}
    for t, p, off, epoch, meta, code in rows:
        by_topic.setdefault(t, []).append(pcls(partition_index=p, committed_offset=off, committed_leader_epoch=epoch,
                                               metadata=meta, error_code=code))
    return [tcls(name=t, partitions=ps) for t, ps in by_topic.items()]


def _fetch_groups(ctx: RequestContext, req: Any) -> List[Tuple[str, Optional[List[Tuple[str, int]]]]]:
    """(group id, partitions or None for all) per group asked."""
    def parts(topics: Any) -> Optional[List[Tuple[str, int]]]:
        if topics is None:
            return None
        return [(t.name, p) for t in topics for p in t.partition_indexes]

    if ctx.api_version >= 8:
        return [(g.group_id, parts(g.topics)) for g in (req.groups or [])]
    return [(req.group_id, parts(req.topics))]


def _fetch_reply(ctx: RequestContext, results: List[Tuple[str, _Rows, int]]) -> None:
    if ctx.api_version >= 8:
        gcls = ctx.response_class.OffsetFetchResponseGroup
        ctx.reply(ctx.response(throttle_time_ms=0, groups=[
            gcls(group_id=g, topics=_fetch_topics(ctx, rows, True), error_code=code) for g, rows, code in results]))
        return
    _, rows, code = results[0]
    if ctx.api_version < 2 and code != NONE:
        rows = [(t, p, -1, -1, "", code) for t, p, *_ in rows]  # v0-1 have no top-level error: per partition
    ctx.reply(ctx.response(throttle_time_ms=0, topics=_fetch_topics(ctx, rows, False), error_code=code))


def _fetch_fail(ctx: RequestContext, req: Any, code: int) -> None:
    _fetch_reply(ctx, [(g, [(t, p, -1, -1, "", NONE) for t, p in (parts or [])], code)
                       for g, parts in _fetch_groups(ctx, req)])


@register(api_key=9, min_version=_range("OffsetFetch")[0], max_version=_range("OffsetFetch")[1], fail=_fetch_fail)
def offset_fetch(ctx: RequestContext, req: Any) -> None:
    """OffsetFetch: committed offsets (-1 where none), their leader epoch and metadata; null topics
    (v2+) means every partition the group has an offset for; v8+ asks for several groups."""
    groups = _fetch_groups(ctx, req)
    if not groups:
        return _fetch_reply(ctx, [])
    results: List[Optional[Tuple[str, _Rows, int]]] = [None] * len(groups)
    left = [len(groups)]
    # KIP-447 (v7+): a read_committed consumer asks for stable offsets only; a partition whose
    # transactional offset waits for its marker gets UNSTABLE_OFFSET_COMMIT (retriable) instead
    stable = bool(req.require_stable) if ctx.api_version >= 7 else False

    def one(i: int, group: str, parts: Optional[List[Tuple[str, int]]]) -> None:
        def done(resp: Any) -> None:
            if resp is None or resp.error is not None:
                code = COORDINATOR_NOT_AVAILABLE if resp is None else error_code(resp.error)
                results[i] = (group, [(t, p, -1, -1, "", NONE) for t, p in (parts or [])], code)
            else:
                errs = {(t, p): error_code(e) for t, p, e in resp.partition_errors}
                rows = [(t, p, off, epoch, meta, errs.pop((t, p), NONE)) for t, p, off, epoch, meta in resp.offsets]
                rows += [(t, p, -1, -1, "", code) for (t, p), code in errs.items()]
                results[i] = (group, rows, NONE)
            left[0] -= 1
            if left[0] == 0:
                _fetch_reply(ctx, results)  # type: ignore[arg-type]

        _call(ctx, req, gm.OffsetFetchRequest(group, ctx.next_corr(), partitions=None if parts is None else tuple(parts),
                                              require_stable=stable), 30_000, done)

    for i, (group, parts) in enumerate(groups):
        one(i, group, parts)


# ==================================================================== DescribeGroups
def _describe_fail(ctx: RequestContext, req: Any, code: int) -> None:
    cls = ctx.response_class.DescribedGroup
    ctx.reply(ctx.response(throttle_time_ms=0, groups=[
        cls(error_code=code, error_message=None, group_id=g, group_state="", protocol_type="", protocol_data="",
            members=[], authorized_operations=_NO_AUTHORIZED_OPERATIONS) for g in req.groups]))


@register(api_key=15, min_version=_range("DescribeGroups")[0], max_version=_range("DescribeGroups")[1],
          fail=_describe_fail)
def describe_groups(ctx: RequestContext, req: Any) -> None:
    """DescribeGroups: state, protocol, members (with subscription and assignment bytes while Stable).
    An unknown group is ``Dead`` with no error before v6, GROUP_ID_NOT_FOUND from v6 (as Kafka 4.0)."""
    v = ctx.api_version
    gcls = ctx.response_class.DescribedGroup
    mcls = gcls.DescribedGroupMember
    names = list(req.groups or [])
    if not names:
        return ctx.reply(ctx.response(throttle_time_ms=0, groups=[]))
    out: List[Any] = [None] * len(names)
    left = [len(names)]

    def one(i: int, group: str) -> None:
        def done(resp: Any) -> None:
            err = CoordinatorNotAvailableError if resp is None else resp.error
            if err is GroupIdNotFoundError or (err is None and resp.state == "Dead"):
                code = GROUP_ID_NOT_FOUND if v >= 6 else NONE
                out[i] = gcls(error_code=code, error_message=f"Group {group} not found." if code else None,
                              group_id=group, group_state="Dead", protocol_type="", protocol_data="", members=[],
                              authorized_operations=_NO_AUTHORIZED_OPERATIONS)
            elif err is not None:
                out[i] = gcls(error_code=error_code(err), error_message=None if resp is None else resp.message,
                              group_id=group, group_state="", protocol_type="", protocol_data="", members=[],
                              authorized_operations=_NO_AUTHORIZED_OPERATIONS)
            else:
                metas = resp.member_metadata or (b"",) * len(resp.members)
                members = [mcls(member_id=mid, group_instance_id=inst, client_id=cid, client_host=host,
                                member_metadata=meta, member_assignment=assignment)
                           for (mid, cid, host, assignment, inst), meta in zip(resp.members, metas)]
                out[i] = gcls(error_code=NONE, error_message=None, group_id=group, group_state=resp.state,
                              protocol_type=resp.protocol_type,
                              protocol_data=resp.protocol if resp.state == "Stable" else "",
                              members=members, authorized_operations=_NO_AUTHORIZED_OPERATIONS)
            left[0] -= 1
            if left[0] == 0:
                ctx.reply(ctx.response(throttle_time_ms=0, groups=out))

        _call(ctx, req, gm.DescribeGroupsRequest(group, ctx.next_corr()), 30_000, done)

    for i, group in enumerate(names):
        one(i, group)


# ======================================================================== ListGroups
def _list_fail(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(ctx.response(throttle_time_ms=0, error_code=code, groups=[]))


@register(api_key=16, min_version=_range("ListGroups")[0], max_version=_range("ListGroups")[1], fail=_list_fail)
def list_groups(ctx: RequestContext, req: Any) -> None:
    """ListGroups: the groups this broker coordinates (clients ask every broker), filtered by state
    (v4+) and type (v5+; every pylog group is a ``classic`` group)."""
    v = ctx.api_version
    states = {s.lower() for s in (req.states_filter or [])} if v >= 4 else set()
    types = {t.lower() for t in (req.types_filter or [])} if v >= 5 else set()
    cls = ctx.response_class.ListedGroup

    def done(resp: Any) -> None:
        if resp is None or resp.error is not None:
            return _list_fail(ctx, req, COORDINATOR_NOT_AVAILABLE if resp is None else error_code(resp.error))
        rows = [cls(group_id=g, protocol_type=ptype, group_state=state, group_type="classic")
                for g, ptype, state in resp.groups
                if (not states or state.lower() in states) and (not types or "classic" in types)]
        ctx.reply(ctx.response(throttle_time_ms=0, error_code=NONE, groups=rows))

    _call(ctx, req, gm.ListGroupsRequest(ctx.next_corr()), 30_000, done)


__all__ = ["VERSIONS", "COORDINATOR_LOOKUPS", "OFFSET_METADATA_MAX_BYTES", "error_code", "ensure_offsets_topic", "ensure_internal_topic"]
