"""The controller: topic creation, partition states, elections, broker liveness, ISR changes.

Where controller state lives: in a :class:`MetadataStore`, which stands in
for Kafka's ZooKeeper ensemble (or KRaft metadata quorum). It is *not* on any
broker's disk and no broker crash touches it, so when the active controller's
broker stops, the next broker to claim the controller role (bumping
``controller_epoch``) reads the same topics, assignments, leaders, leader
epochs, ISRs and partition epochs, and carries on. Only soft state - broker
heartbeat times and who is shutting down - lives in the :class:`Controller`
object, and it is rebuilt (every broker gets a fresh session) on failover.

Changes are stored before they are applied: every store mutator writes
``cluster-metadata.json`` first and changes memory only once the write is
durable; a write that fails raises :class:`MetadataStorageError` and applies
nothing. A controller whose store fails stops acting and resigns (a KRaft
controller that lost its quorum): no LeaderAndIsr for an unstored change is
ever sent, an AlterPartition whose change was not stored gets no answer (the
leader keeps the proposal pending, with the old ISR in its maximal ISR, so
the HW does not pass a replica the file still has in the ISR), and once the
store accepts writes again a broker claims the role with a new controller
epoch and announces the full state.

Fencing: every store write carries the writer's ``controller_epoch`` and is
refused (:class:`StaleControllerEpochError`) from a deposed controller;
brokers ignore LeaderAndIsr from an older controller epoch; AlterPartition
from a stale leader epoch or partition epoch is refused.

Partition state machine (Kafka's PartitionStateMachine): NonExistent -> New
(assigned) -> Online (has a leader) <-> Offline (no live leader).

Leader selectors (research §3.12, assignment order decides):

* offline: first replica that is live and in the ISR; else the first live ELR
  member (KIP-966, ISR reset to it); else, only with ``unclean_leader_election``,
  the first live replica (ISR reset to it). A broker that restarted uncleanly
  while it was the last ISR member gives way to the ELR;
* preferred: the first replica, if live and in the ISR;
* controlled shutdown: first live ISR replica not shutting down;
* reassignment: first replica of the new assignment that is live and in the ISR.

Sans-I/O: methods take ``now_ms`` and return an :class:`Outbox`.
Complexity: O(partitions) per broker event. Thread-safety: none.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

from pylog.errors import (
    CorruptCheckpointError,
    FencedLeaderEpochError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    MetadataStorageError,
    PylogError,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from pylog.replication.assignment import assign_replicas
from pylog.replication.offsets_topic import OFFSETS_TOPIC
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC
from pylog.replication.messages import (
    NO_LEADER,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeat,
    HeartbeatResponse,
    LeaderAndIsrRequest,
    Outbox,
    PartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    TopicsDeleted,
)
from pylog.storage.fileio import FileIO
from pylog.storage.log import LogConfig, validate_topic

_log = logging.getLogger(__name__)

TP = Tuple[str, int]
NON_EXISTENT, NEW, ONLINE, OFFLINE = "NonExistent", "New", "Online", "Offline"

#: producer ids granted to a broker at a time (KIP-730 hands out blocks of 1000; ours are pushed
#: once per broker incarnation and controller with LeaderAndIsr, so they are larger; a broker with
#: none or few left asks for the next one with AllocateProducerIds, :meth:`Controller.handle`)
PRODUCER_ID_BLOCK_SIZE = 1 << 20
#: a new topic with more partitions than this gets one LeaderAndIsr per broker carrying all its
#: replicas (Kafka's batching; one directory sync per broker); smaller topics keep one request per
#: partition and replica, the message sequence the seeded simulations' recorded histories were
#: made with (e.g. the exact move counts in tests/sim/test_groups_sticky.py; the 50-partition
#: offsets topic is below it). docs/replication.md, "Many partitions".
LEADER_AND_ISR_BATCH_MIN_PARTITIONS = 64

#: Kafka topic configs (snake_case) a topic may set besides the :class:`LogConfig` fields; they are
#: stored and passed to the log once the storage layer knows them.
EXTRA_TOPIC_CONFIGS = frozenset({
    "cleanup_policy", "delete_retention_ms", "min_compaction_lag_ms", "max_compaction_lag_ms",
    "min_cleanable_dirty_ratio", "message_timestamp_type", "file_delete_delay_ms",
    # read by pylog.runtime.log_maintenance (the cluster's periodic retention/compaction)
    "retention_protect_groups", "log_cleanup_interval_ms",
})


@dataclass(frozen=True)
class TopicConfig:
    """A topic as the controller stores it. ``configs``: per-topic overrides of the brokers'
    :class:`LogConfig` (``{"cleanup_policy": "compact", "retention_ms": 60_000, ...}``)."""

    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    configs: Dict[str, object] = field(default_factory=dict)

    def config_items(self) -> Tuple[Tuple[str, object], ...]:
        return tuple(sorted(self.configs.items()))


def offsets_topic_replication(brokers: int) -> Tuple[int, int]:
    """``(replication_factor, min_insync_replicas)`` of ``__consumer_offsets`` in a cluster of ``brokers``.

    Kafka's ``offsets.topic.replication.factor`` is 3; with 3 or more brokers pylog also gives the
    topic min ISR 2 (Kafka's recommended production setting), so the HW of a group's offsets
    partition stops while only one replica is in sync and the replicas that left keep every
    committed offset (KIP-966's ELR): a lone leader that crashes and loses its unflushed tail
    can no longer take committed offsets with it (issue 14, item 3). With 1 or 2 brokers: RF =
    brokers and min ISR 1 (a second replica that must always be up would stop every commit).
    """
    rf = min(3, brokers)
    return rf, (2 if rf >= 3 else 1)


def transaction_state_replication(brokers: int) -> Tuple[int, int]:
    """``(replication_factor, min_insync_replicas)`` of ``__transaction_state`` in a cluster of ``brokers``:
    Kafka's ``transaction.state.log.replication.factor`` 3 and ``transaction.state.log.min.isr`` 2,
    capped by the brokers as :func:`offsets_topic_replication` (RF = brokers and min ISR 1 with 1 or 2
    brokers). A transaction's PrepareCommit acknowledged by one replica that then crashes would be
    lost with it, and the new coordinator would leave the transaction open until its timeout aborts
    it: the commit the producer was told of would not happen."""
    return offsets_topic_replication(brokers)


#: the internal topics whose replication the controller enforces at creation -> the rule
_INTERNAL_REPLICATION = {OFFSETS_TOPIC: (offsets_topic_replication, "committed offsets"),
                         TRANSACTION_STATE_TOPIC: (transaction_state_replication, "transaction states")}


def validate_topic_configs(name: str, configs: Dict[str, object]) -> None:
    """Refuse a key that is neither a :class:`LogConfig` field nor a known Kafka topic config."""
    if not isinstance(configs, dict):
        raise InvalidConfigurationError(f"topic {name!r}: config must be a dict, not {type(configs).__name__}")
    known = set(LogConfig._fields) | EXTRA_TOPIC_CONFIGS
    unknown = sorted(k for k in configs if k not in known)
    if unknown:
        raise InvalidConfigurationError(
            f"topic {name!r}: unknown config {', '.join(map(repr, unknown))}; known: {', '.join(sorted(known))}"
        )
    # Values of LogConfig fields are checked now (a bad value must not reach a broker's Log.open).
    LogConfig.from_kwargs(**{k: v for k, v in configs.items() if k in LogConfig._fields})


#: the largest epoch, incarnation or count the metadata file may hold (Kafka's int32 fields)
_I32_MAX = (1 << 31) - 1
_TOPIC_FIELDS = {"name", "partitions", "replication_factor", "min_insync_replicas", "unclean_leader_election"}
_PARTITION_FIELDS = {"topic", "partition", "replicas", "leader", "leader_epoch", "isr", "partition_epoch",
                     "min_insync_replicas"}
_TOP_FIELDS = {"version", "brokers", "controller_epoch", "topics", "partitions", "broker_incarnations"}
_DELTA_FIELDS = {"controller_epoch", "next_producer_id", "remove_topics", "topics", "partitions",
                 "broker_incarnations", "deleting"}


class LoadedMetadata(NamedTuple):
    """What :func:`load_metadata` read."""

    controller_epoch: int
    topics: Dict[str, "TopicConfig"]
    partitions: Dict[TP, PartitionState]
    broker_incarnations: Dict[int, int]
    next_producer_id: int
    deleting: Dict[str, Dict[int, List[int]]]


def metadata_log_path(path: str) -> str:
    """The delta log beside the snapshot ``path`` (``cluster-metadata.json`` -> ``cluster-metadata.log``)."""
    return (path[:-5] if path.endswith(".json") else path) + ".log"


def _record_line(delta: Dict[str, object]) -> bytes:
    """One delta-log record: ``<crc32 of the JSON, 8 hex digits> <JSON>\n``."""
    body = json.dumps(delta, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return b"%08x " % zlib.crc32(body) + body + b"\n"


def _read_log_records(raw: bytes, path: str) -> Tuple[List[Dict[str, object]], int]:
    """The records of a delta log and the length of its valid prefix.

    A last record that is incomplete (no newline) or fails its CRC or JSON is a torn tail left by a
    crash during an append: ignored (the store truncates it before its next append). An invalid
    record followed by a valid one is damage, not a torn write: :class:`CorruptCheckpointError`."""
    records: List[Dict[str, object]] = []
    pos = 0
    bad_at: Optional[int] = None
    while pos < len(raw):
        nl = raw.find(b"\n", pos)
        line = raw[pos:] if nl < 0 else raw[pos:nl]
        ok = nl >= 0 and len(line) > 9 and line[8:9] == b" "
        rec: object = None
        if ok:
            try:
                ok = int(line[:8], 16) == zlib.crc32(line[9:])
                if ok:
                    rec = json.loads(line[9:].decode("utf-8"))
                    ok = isinstance(rec, dict)
            except (ValueError, UnicodeDecodeError, RecursionError):
                ok = False
        if not ok:
            if bad_at is None:
                bad_at = pos
        elif bad_at is not None:
            raise CorruptCheckpointError(
                f"cluster metadata log record at byte {bad_at} is damaged but records follow it", path=path)
        else:
            records.append(rec)  # type: ignore[arg-type]
        if nl < 0:
            break
        pos = nl + 1
    return records, (len(raw) if bad_at is None else bad_at)


def _apply_delta(topics: Dict[str, Dict[str, object]], parts: Dict[Tuple[object, object], Dict[str, object]],
                 top: Dict[str, object], delta: Dict[str, object], where: str, path: str) -> None:
    """Apply one delta record to the raw (JSON-shaped) state; only the record's shape is checked here,
    the merged state is checked field by field afterwards (:func:`_check_metadata`)."""
    def bad(why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"cluster metadata log {where}: {why}", path=path)

    extra = sorted(set(delta) - _DELTA_FIELDS)
    if extra:
        raise bad(f"unknown field {extra[0]!r:.40}")
    for key in ("controller_epoch", "next_producer_id"):
        if key in delta:
            top[key] = delta[key]
    def items(key: str) -> List[Any]:
        v = delta.get(key, [])
        return v if isinstance(v, list) else [None]  # a non-list fails the element check below

    for name in items("remove_topics"):
        if not isinstance(name, str):
            raise bad("remove_topics must be a list of topic names")
        topics.pop(name, None)
        for k in [k for k in parts if k[0] == name]:
            del parts[k]
    for t in items("topics"):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise bad("topics must be a list of topic objects with a name")
        topics[t["name"]] = t
    for st in items("partitions"):
        if not isinstance(st, dict) or "topic" not in st or "partition" not in st:
            raise bad("partitions must be a list of partition objects with topic and partition")
        try:
            parts[(st["topic"], st["partition"])] = st
        except TypeError:
            raise bad("a partition's topic and partition must be a string and an integer") from None
    for key in ("broker_incarnations", "deleting"):
        if key in delta:
            upd = delta[key]
            if not isinstance(upd, dict):
                raise bad(f"{key} must be an object")
            cur = top.get(key)
            merged = dict(cur) if isinstance(cur, dict) else {}
            for k, v in upd.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            top[key] = merged


def read_metadata_json(path: str, file_io: Optional[FileIO] = None) -> Dict[str, Any]:
    """The cluster metadata as one JSON object, the snapshot's format: the snapshot with the delta
    log's records replayed (torn tail ignored), *not* checked field by field - for readers that
    show it (``pylog describe`` on a live or closed cluster directory). Raises OSError, ValueError
    (not JSON) or :class:`CorruptCheckpointError` (a damaged log). Thread-safety: pure function."""
    io = file_io or FileIO()
    data = json.loads(io.read_file(path).decode("utf-8"))
    log_path = metadata_log_path(path)
    records, _ = _read_log_records(io.read_file(log_path) if io.exists(log_path) else b"", log_path)
    if records and isinstance(data, dict):
        topics = {t["name"]: t for t in data.get("topics", [])}
        parts = {(st["topic"], st["partition"]): st for st in data.get("partitions", [])}
        for i, rec in enumerate(records):
            _apply_delta(topics, parts, data, rec, f"record {i}", log_path)
        data["topics"] = list(topics.values())
        data["partitions"] = list(parts.values())
    return data  # type: ignore[no-any-return]


def load_metadata(path: str, brokers: Sequence[int], file_io: Optional[FileIO] = None) -> LoadedMetadata:
    """Read and check the cluster metadata field by field: the snapshot ``path``
    (``cluster-metadata.json``) and the changes appended to its delta log since
    (:func:`metadata_log_path`, torn tail ignored); returns the parsed state.

    Every field is checked for
    its type and range and against the others (a partition's topic exists, its number is below
    the topic's count, every partition of every topic is there once, replicas are distinct
    brokers of this cluster, the ISR is a non-empty subset of them, the leader is -1 or in the
    ISR, the ELR is outside the ISR, epochs and incarnations are int32s >= 0), so whatever is
    loaded satisfies the controller's invariants. Unknown keys are refused (the file has one
    version). Optional: a topic's ``configs``, a partition's ``elr``, ``next_producer_id``
    (files of earlier versions lack them).

    Raises :class:`CorruptCheckpointError` naming the file and the field for damage (bytes
    that are not UTF-8 JSON, a missing, extra or ill-typed field, a value out of range);
    :class:`InvalidConfigurationError` when the file is intact but belongs to a cluster with
    other brokers; :class:`KafkaStorageError` when the file cannot be read.
    Complexity: O(size of the files). Thread-safety: pure function (reads two files through ``file_io``).
    """
    return _read_metadata(path, brokers, file_io or FileIO())[0]


def _read_metadata(path: str, brokers: Sequence[int], io: FileIO) -> Tuple[LoadedMetadata, int]:
    """:func:`load_metadata`, plus the length of the delta log's valid prefix."""
    try:
        raw = io.read_file(path)
    except OSError as exc:
        raise KafkaStorageError(f"{path}: cannot read the cluster metadata: {exc}") from exc
    log_path = metadata_log_path(path)
    try:
        log_raw = io.read_file(log_path) if io.exists(log_path) else b""
    except OSError as exc:
        raise KafkaStorageError(f"{log_path}: cannot read the cluster metadata log: {exc}") from exc
    data = _parse_metadata(raw, path)
    loaded = _check_metadata(data, path, brokers)
    records, valid = _read_log_records(log_raw, log_path)
    if records:
        # Replay onto the checked snapshot (its shape is known good now), then check the result
        # field by field again: whatever is loaded satisfies the controller's invariants.
        topics = {t["name"]: t for t in data["topics"]}  # type: ignore[attr-defined]
        parts = {(st["topic"], st["partition"]): st for st in data["partitions"]}  # type: ignore[attr-defined]
        for i, rec in enumerate(records):
            _apply_delta(topics, parts, data, rec, f"record {i}", log_path)
        data["topics"] = list(topics.values())
        data["partitions"] = list(parts.values())
        loaded = _check_metadata(data, log_path, brokers)
    return loaded, valid


def _parse_metadata(raw: bytes, path: str) -> Dict[str, object]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"cluster metadata is not UTF-8 text: {exc}", path=path) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CorruptCheckpointError(f"cluster metadata is not JSON: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise CorruptCheckpointError(f"cluster metadata field (top level): must be an object, got "
                                     f"{type(data).__name__}", path=path)
    return data


def _check_metadata(data: Dict[str, object], path: str, brokers: Sequence[int]) -> LoadedMetadata:
    """The field-by-field check of the parsed metadata (see :func:`load_metadata`)."""
    def bad(field: str, why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"cluster metadata field {field}: {why}", path=path)

    def need_dict(v: object, field: str, required: Set[str], optional: Set[str] = frozenset()) -> Dict[str, object]:  # type: ignore[assignment]
        if not isinstance(v, dict):
            raise bad(field, f"must be an object, got {type(v).__name__}")
        missing = sorted(required - set(v))
        if missing:
            raise bad(f"{field}.{missing[0]}", "missing")
        extra = sorted(str(k) for k in set(v) - required - optional)
        if extra:
            raise bad(f"{field}.{extra[0]}", "unknown field")
        return v

    def need_int(v: object, field: str, lo: int = 0, hi: int = _I32_MAX) -> int:
        if not isinstance(v, int) or isinstance(v, bool):
            raise bad(field, f"must be an integer, got {type(v).__name__} {v!r:.40}")
        if not lo <= v <= hi:
            raise bad(field, f"must be in [{lo}, {hi}], got {v}")
        return v

    def need_list(v: object, field: str) -> List[Any]:
        if not isinstance(v, list):
            raise bad(field, f"must be a list, got {type(v).__name__}")
        return v

    def need_ids(v: object, field: str, allowed: Sequence[int], nonempty: bool = True) -> Tuple[int, ...]:
        ids = tuple(need_int(x, f"{field}[{i}]", -1) for i, x in enumerate(need_list(v, field)))
        if nonempty and not ids:
            raise bad(field, "must not be empty")
        if len(set(ids)) != len(ids):
            raise bad(field, f"has a broker twice: {list(ids)}")
        outside = [x for x in ids if x not in allowed]
        if outside:
            raise bad(field, f"broker {outside[0]} is not one of {list(allowed)}")
        return ids

    top = need_dict(data, "(top level)", _TOP_FIELDS, {"next_producer_id", "deleting"})
    if type(top["version"]) is not int or top["version"] != 1:
        raise bad("version", f"unsupported version {top['version']!r:.40} (expected 1)")
    file_brokers = tuple(need_int(b, f"brokers[{i}]") for i, b in enumerate(need_list(top["brokers"], "brokers")))
    if file_brokers != tuple(brokers):
        raise InvalidConfigurationError(
            f"{path}: the cluster was created with brokers {list(file_brokers)}, not {list(brokers)}")
    controller_epoch = need_int(top["controller_epoch"], "controller_epoch")

    topics: Dict[str, TopicConfig] = {}
    for i, t in enumerate(need_list(top["topics"], "topics")):
        where = f"topics[{i}]"
        t = need_dict(t, where, _TOPIC_FIELDS, {"configs"})
        name = t["name"]
        if not isinstance(name, str):
            raise bad(f"{where}.name", f"must be a string, got {type(name).__name__}")
        try:
            validate_topic(name)
        except InvalidTopicError as exc:
            raise bad(f"{where}.name", str(exc)) from None
        if name in topics:
            raise bad(f"{where}.name", f"topic {name!r} appears twice")
        parts = need_int(t["partitions"], f"{where}.partitions", 1)
        rf = need_int(t["replication_factor"], f"{where}.replication_factor", 1, len(brokers))
        min_isr = need_int(t["min_insync_replicas"], f"{where}.min_insync_replicas", 1, rf)
        unclean = t["unclean_leader_election"]
        if not isinstance(unclean, bool):
            raise bad(f"{where}.unclean_leader_election", f"must be true or false, got {unclean!r:.40}")
        configs = t.get("configs", {})
        if not isinstance(configs, dict):
            raise bad(f"{where}.configs", f"must be an object, got {type(configs).__name__}")
        try:
            validate_topic_configs(name, configs)
        except (InvalidConfigurationError, TypeError) as exc:
            raise bad(f"{where}.configs", str(exc)) from None
        topics[name] = TopicConfig(name, parts, rf, min_isr, unclean, dict(configs))

    partitions: Dict[TP, PartitionState] = {}
    for i, raw_st in enumerate(need_list(top["partitions"], "partitions")):
        where = f"partitions[{i}]"
        st = need_dict(raw_st, where, _PARTITION_FIELDS, {"elr"})
        topic = st["topic"]
        if not isinstance(topic, str) or topic not in topics:
            raise bad(f"{where}.topic", f"{topic!r:.60} is not a topic of this file")
        p = need_int(st["partition"], f"{where}.partition", 0, topics[topic].partitions - 1)
        if (topic, p) in partitions:
            raise bad(f"{where}.partition", f"{topic}-{p} appears twice")
        replicas = need_ids(st["replicas"], f"{where}.replicas", brokers)
        isr = need_ids(st["isr"], f"{where}.isr", replicas)
        leader = need_int(st["leader"], f"{where}.leader", NO_LEADER)
        if leader != NO_LEADER and leader not in isr:
            raise bad(f"{where}.leader", f"leader {leader} is not in the ISR {list(isr)}")
        elr = need_ids(st.get("elr", []), f"{where}.elr", replicas, nonempty=False)
        if set(elr) & set(isr):
            raise bad(f"{where}.elr", f"ELR {list(elr)} overlaps the ISR {list(isr)}")
        partitions[(topic, p)] = PartitionState(
            topic, p, replicas, leader, need_int(st["leader_epoch"], f"{where}.leader_epoch"), isr,
            need_int(st["partition_epoch"], f"{where}.partition_epoch"),
            need_int(st["min_insync_replicas"], f"{where}.min_insync_replicas", 1, len(replicas)), elr)
    for name, cfg in topics.items():
        for p in range(cfg.partitions):
            if (name, p) not in partitions:
                raise bad("partitions", f"{name}-{p} is missing (topic {name!r} has {cfg.partitions} partitions)")

    incs = top["broker_incarnations"]
    if not isinstance(incs, dict):
        raise bad("broker_incarnations", f"must be an object, got {type(incs).__name__}")
    incarnations: Dict[int, int] = {}
    for k, v in incs.items():
        if not (k.isascii() and k.isdigit() and str(int(k)) == k) or int(k) not in brokers:
            raise bad(f"broker_incarnations.{k:.20}", f"{k!r:.40} is not a broker id of {list(brokers)}")
        incarnations[int(k)] = need_int(v, f"broker_incarnations.{k}")
    next_pid = need_int(top.get("next_producer_id", 0), "next_producer_id", 0, (1 << 62))
    raw_del = top.get("deleting", {})
    if not isinstance(raw_del, dict):
        raise bad("deleting", f"must be an object, got {type(raw_del).__name__}")
    deleting: Dict[str, Dict[int, List[int]]] = {}
    for name, per in raw_del.items():
        if name in topics:
            raise bad(f"deleting.{name:.60}", "a topic being deleted is also a live topic")
        if not isinstance(per, dict):
            raise bad(f"deleting.{name:.60}", f"must be an object, got {type(per).__name__}")
        pending: Dict[int, List[int]] = {}
        for k, ps in per.items():
            if not (k.isascii() and k.isdigit() and str(int(k)) == k) or int(k) not in brokers:
                raise bad(f"deleting.{name:.60}.{k:.20}", f"{k!r:.40} is not a broker id of {list(brokers)}")
            pending[int(k)] = [need_int(x, f"deleting.{name:.60}.{k}[{i}]")
                               for i, x in enumerate(need_list(ps, f"deleting.{name:.60}.{k}"))]
        deleting[name] = pending
    return LoadedMetadata(controller_epoch, topics, partitions, incarnations, next_pid, deleting)


class MetadataStore:
    """The durable controller state (ZooKeeper's role): controller epoch, topics, partition states.

    With ``path``, every change is written there as JSON (atomically, through
    ``file_io``) *before* it is applied in memory, and reloaded by the next
    ``MetadataStore`` on the same path, so a cluster directory reopens with
    its topics, leader epochs and ISRs. The reloaded store has no controller
    (every session ended with the process that held it). The file is checked
    field by field on load (:func:`load_metadata`): a damaged file raises
    :class:`CorruptCheckpointError` naming the file and the field.

    A write that cannot be stored raises :class:`MetadataStorageError` and
    changes nothing in memory (as a KRaft record counts only once committed):
    no broker is ever told of, and no leader acts on, a change the file does
    not have. The first failure of a run of failures is logged as an error,
    the recovery once. ``write_error`` holds the last failure (None: the store
    works).

    Persistence is incremental, as KRaft's metadata log and its snapshots: the file
    ``path`` is a snapshot (the whole state, replaced atomically), and each change
    is one record appended to the delta log beside it (:func:`metadata_log_path`:
    ``<crc32> <JSON>`` per line, fsynced before the mutator returns). When the log
    outgrows the snapshot (and :data:`COMPACT_MIN_BYTES`), and on :meth:`close`, the
    state is written as a new snapshot and the log emptied. Every byte goes through
    ``file_io`` (a :class:`~pylog.storage.fileio.FileIO`; a plain one when None), so
    the fault harnesses see and can fail every operation.

    Durability: a change is durable (survives a process crash and power loss) when
    its mutator returns: the record is appended and fsynced (the log's directory
    entry fsynced when the log is created). A crash during an append leaves a torn
    last record, which the next load ignores (that change never returned). A crash
    during compaction leaves the new snapshot with the old log, or the old snapshot
    with it: records are absolute (set a state, remove a topic), so replaying a log
    over a snapshot that already holds it gives the same state. A failed append is
    truncated away (if even that fails, the next change rewrites the snapshot and
    empties the log), so a change that raised is not loaded later.
    Complexity: O(size of the change) per write; a compaction O(size of the state),
    at most once per appended snapshot's worth of log bytes (amortised O(1) per byte).
    Thread-safety: none; the runtime calls it from its one loop thread.
    """

    #: the log is compacted into a new snapshot once it is larger than the snapshot and this
    COMPACT_MIN_BYTES = 1 << 20

    def __init__(self, brokers: Sequence[int], rng: random.Random, *, path: Optional[str] = None,
                 file_io: Optional[object] = None):
        self.path = path
        self.io: FileIO = file_io if file_io is not None else FileIO()  # type: ignore[assignment]
        self.brokers = tuple(brokers)
        self.rng = rng
        self.controller_id: Optional[int] = None
        self.controller_epoch = 0
        self.controller_incarnation = 0
        self.lease_ms = 0
        self.topics: Dict[str, TopicConfig] = {}
        self.partitions: Dict[TP, PartitionState] = {}
        self.unclean_elections = 0
        #: broker id -> incarnation of its current registration (Kafka's broker epoch); durable, so a
        #: new controller still recognises a broker that restarted.
        self.broker_incarnations: Dict[int, int] = {}
        self.history: List[Tuple[int, PartitionState]] = []  # (controller epoch, state) of every write
        #: the next producer id to hand out; durable, so ids never repeat across restarts
        self.next_producer_id = 0
        #: deleted topics whose replicas some broker has not removed from its disk yet:
        #: ``{topic: {broker: [partition, ...]}}``; durable, so a deletion interrupted by a crash
        #: completes after the restart (see :meth:`Controller.delete_topic`)
        self.deleting: Dict[str, Dict[int, List[int]]] = {}
        #: why the last write failed (None: the last write worked, or none was tried)
        self.write_error: Optional[str] = None
        #: writes that failed (each left the state unchanged)
        self.write_failures = 0
        self.log_path = metadata_log_path(path) if path is not None else None
        #: delta log: its descriptor (opened at the first append), valid length, the snapshot's size
        self._log_fd: Optional[int] = None
        self._log_size = 0
        self._snapshot_size = 0
        #: the next change must rewrite the snapshot (none yet, or the log's tail could not be cleaned)
        self._need_snapshot = True
        #: compactions (snapshots written after the first), for tests and the docs' figures
        self.compactions = 0
        #: bumped by every change (a cache key: the controller's heartbeat check)
        self.version = 0
        if path is not None and self.io.exists(path):
            self._load()

    # persistence
    def _load(self) -> None:
        assert self.path is not None
        data, self._log_size = _read_metadata(self.path, self.brokers, self.io)
        self._snapshot_size = max(1, len(self.io.read_file(self.path)))
        self._need_snapshot = False
        self.controller_epoch = data.controller_epoch
        self.topics = data.topics
        self.partitions = data.partitions
        self.broker_incarnations = data.broker_incarnations
        self.next_producer_id = data.next_producer_id
        self.deleting = data.deleting

    def _blob(self, *, controller_epoch: Optional[int] = None, topics: Optional[Dict[str, TopicConfig]] = None,
              partitions: Optional[Dict[TP, PartitionState]] = None,
              broker_incarnations: Optional[Dict[int, int]] = None, next_producer_id: Optional[int] = None,
              deleting: Optional[Dict[str, Dict[int, List[int]]]] = None) -> bytes:
        """The file's bytes for the current state with the given parts replaced."""
        data = {
            "version": 1,
            "brokers": list(self.brokers),
            "controller_epoch": self.controller_epoch if controller_epoch is None else controller_epoch,
            "topics": [asdict(t) for t in (self.topics if topics is None else topics).values()],
            "partitions": [asdict(st) for st in (self.partitions if partitions is None else partitions).values()],
            "broker_incarnations": {str(k): v for k, v in (
                self.broker_incarnations if broker_incarnations is None else broker_incarnations).items()},
            "next_producer_id": self.next_producer_id if next_producer_id is None else next_producer_id,
            "deleting": {t: {str(b): ps for b, ps in per.items()}
                         for t, per in (self.deleting if deleting is None else deleting).items()},
        }
        return json.dumps(data, sort_keys=True).encode("utf-8")

    def _blob_with(self, delta: Dict[str, object]) -> bytes:
        """The snapshot bytes of the current state with ``delta`` applied (O(state))."""
        data = json.loads(self._blob())
        topics = {t["name"]: t for t in data["topics"]}
        parts = {(st["topic"], st["partition"]): st for st in data["partitions"]}
        _apply_delta(topics, parts, data, delta, "(new change)", self.path or "")
        data["topics"] = list(topics.values())
        data["partitions"] = list(parts.values())
        return json.dumps(data, sort_keys=True).encode("utf-8")

    def _append(self, line: bytes) -> None:
        """Append one record to the delta log and fsync it; on failure cut it off again."""
        assert self.log_path is not None
        io = self.io
        if self._log_fd is None:
            created = not io.exists(self.log_path)
            fd = io.open(self.log_path)
            try:
                if io.size(fd) > self._log_size:
                    io.truncate(fd, self._log_size)  # a torn tail found by the load
                if created:
                    io.fsync_dir(os.path.dirname(self.log_path) or ".")
            except BaseException:
                io.close(fd)
                raise
            self._log_fd = fd
        fd = self._log_fd
        try:
            io.pwrite(fd, line, self._log_size)
            io.fsync(fd)
        except BaseException:
            try:
                io.truncate(fd, self._log_size)
            except OSError:
                self._need_snapshot = True  # the next change replaces the log entirely
            raise
        self._log_size += len(line)

    def _write_snapshot(self, blob: bytes) -> None:
        """Replace the snapshot by ``blob`` and empty the log (a crash in between replays the old log
        over the new snapshot: the same state, records being absolute)."""
        assert self.path is not None and self.log_path is not None
        self.io.write_file_atomic(self.path, blob)
        self._snapshot_size = max(1, len(blob))
        if self._log_fd is not None:
            self.io.truncate(self._log_fd, 0)
            self.io.fsync(self._log_fd)
        elif self.io.exists(self.log_path):
            fd = self.io.open(self.log_path)
            try:
                self.io.truncate(fd, 0)
                self.io.fsync(fd)
            finally:
                self.io.close(fd)
        self._log_size = 0
        self._need_snapshot = False

    def _store(self, what: str, _snapshot: bool = False, **delta: object) -> None:
        """Durably store one change (a delta record: see :func:`_apply_delta`), or raise
        MetadataStorageError (nothing applied)."""
        self.version += 1  # (also for a failed write: readers only recompute)
        if self.path is None:
            return
        try:
            if self._need_snapshot or _snapshot:
                self._write_snapshot(self._blob_with(delta))
            else:
                self._append(_record_line(delta))
        except (OSError, PylogError) as exc:
            self.write_failures += 1
            first = self.write_error is None
            self.write_error = f"{type(exc).__name__}: {exc}"
            if first:
                _log.error("%s: cannot store %s (%s); the change is not applied and the controller stops "
                           "acting until the file can be written", self.path, what, self.write_error)
            raise MetadataStorageError(
                f"{self.path}: cannot store {what}: {self.write_error}; the change was not applied") from exc
        if self.write_error is not None:
            _log.warning("%s: metadata writes work again (%d failed)", self.path, self.write_failures)
            self.write_error = None

    def save(self) -> None:
        """Write the current state (raises MetadataStorageError if it cannot be stored)."""
        self._store("the metadata", _snapshot=True)

    def _maybe_compact(self) -> None:
        """After a change was applied: write a new snapshot when the log outgrew it. A failure is
        logged and retried with a later change (the change itself is durable in the log)."""
        if self._log_size <= max(self.COMPACT_MIN_BYTES, self._snapshot_size) or self.path is None:
            return
        try:
            self._write_snapshot(self._blob())
            self.compactions += 1
        except (OSError, PylogError) as exc:
            _log.warning("%s: compacting the metadata log failed (retried later): %s", self.path, exc)

    def close(self) -> None:
        """Compact (one snapshot, empty log, when the log has records) and release the log's
        descriptor. A failure is logged: the log still holds every change. Idempotent."""
        if self.path is not None and self._log_size > 0:
            try:
                self._write_snapshot(self._blob())
                self.compactions += 1
            except (OSError, PylogError) as exc:
                _log.warning("%s: compacting the metadata log at close failed: %s", self.path, exc)
        if self._log_fd is not None:
            try:
                self.io.close(self._log_fd)
            except OSError:
                pass
            self._log_fd = None
        if self.log_path is not None and self._log_size == 0 and not self._need_snapshot:
            try:  # a closed cluster directory holds the snapshot alone (an empty log says nothing)
                if self.io.exists(self.log_path):
                    self.io.unlink(self.log_path)
            except OSError:
                pass

    def register(self, broker_id: int, incarnation: int) -> None:
        if self.broker_incarnations.get(broker_id) != incarnation:
            self._store(f"broker {broker_id}'s registration (incarnation {incarnation})",
                        broker_incarnations={str(broker_id): incarnation})
            self.broker_incarnations[broker_id] = incarnation  # in place: controllers hold this dict
            self._maybe_compact()

    def allocate_producer_ids(self, count: int, controller_epoch: Optional[int] = None) -> Tuple[int, int]:
        """Reserve ``count`` producer ids; returns ``(first, count)``. Stored before it returns, so a
        block is never handed out twice, across controller failovers and restarts too (Kafka's
        ProducerIdsRecord). ``controller_epoch``: the caller's; a deposed controller is refused
        (StaleControllerEpochError)."""
        if controller_epoch is not None:
            self._check_epoch(controller_epoch, f"a block of {count} producer ids")
        first = self.next_producer_id
        self._store(f"a block of {count} producer ids", next_producer_id=first + count)
        self.next_producer_id = first + count
        self._maybe_compact()
        return first, count

    def create_topic(self, controller_epoch: int, cfg: "TopicConfig", states: Sequence[PartitionState]) -> None:
        """Store a new topic and its partitions in one write (all or nothing)."""
        self._check_epoch(controller_epoch, f"creation of topic {cfg.name!r}")
        self._store(f"topic {cfg.name!r} with {len(states)} partitions", topics=[asdict(cfg)],
                    partitions=[asdict(st) for st in states])
        self.topics[cfg.name] = cfg
        self.partitions.update(((st.topic, st.partition), st) for st in states)
        self.history.extend((controller_epoch, st) for st in states)
        self._maybe_compact()

    # topic admin (each change is one atomic write, stored before it is applied)
    def remove_topic(self, name: str, pending: Dict[int, List[int]]) -> None:
        """Drop topic ``name`` and its partitions; its replicas in ``pending`` (broker -> partitions)
        are to be removed from disk. One write: after a crash the topic is either whole or gone.
        Raises MetadataStorageError (nothing changed) when it cannot be stored."""
        pending = {b: sorted(ps) for b, ps in pending.items() if ps}
        deleting = dict(self.deleting)
        if pending:
            deleting[name] = pending
        if pending:
            self._store(f"the deletion of topic {name!r}", remove_topics=[name],
                        deleting={name: {str(b): ps for b, ps in pending.items()}})
        else:
            self._store(f"the deletion of topic {name!r}", remove_topics=[name])
        self.topics.pop(name, None)
        for tp in [tp for tp in self.partitions if tp[0] == name]:
            del self.partitions[tp]
        self.deleting = deleting
        self._maybe_compact()

    def replica_deleted(self, name: str, broker: int, partition: int) -> bool:
        """Broker ``broker`` removed its replica of ``name``-``partition``; True if that was pending."""
        per = self.deleting.get(name)
        if per is None or partition not in per.get(broker, ()):
            return False
        new_per = {b: list(ps) for b, ps in per.items()}
        new_per[broker] = [p for p in new_per[broker] if p != partition]
        if not new_per[broker]:
            del new_per[broker]
        deleting = dict(self.deleting)
        if new_per:
            deleting[name] = new_per
        else:
            del deleting[name]
        self._store(f"broker {broker}'s removal of {name}-{partition}",
                    deleting={name: {str(b): ps for b, ps in new_per.items()} if new_per else None})
        self.deleting = deleting
        self._maybe_compact()
        return True

    def extend_topic(self, cfg: "TopicConfig", states: Sequence[PartitionState]) -> None:
        """Replace the topic's record by ``cfg`` and add the new partitions' ``states`` (one write)."""
        for st in states:
            assert (st.topic, st.partition) not in self.partitions, st
        self._store(f"{len(states)} new partitions of topic {cfg.name!r}", topics=[asdict(cfg)],
                    partitions=[asdict(st) for st in states])
        self.topics[cfg.name] = cfg
        for st in states:
            self.partitions[(st.topic, st.partition)] = st
            self.history.append((self.controller_epoch, st))
        self._maybe_compact()

    def replace_topic(self, cfg: "TopicConfig") -> None:
        """Replace the topic's record (configs) by ``cfg``."""
        assert cfg.name in self.topics, cfg.name
        self._store(f"the configs of topic {cfg.name!r}", topics=[asdict(cfg)])
        self.topics[cfg.name] = cfg
        self._maybe_compact()

    # controller election (the /controller znode)
    def try_claim(self, broker_id: int, now_ms: int, session_timeout_ms: int, incarnation: int = 0) -> bool:
        """Become controller if there is none or its lease expired; True if ``broker_id`` is now controller.

        The lease belongs to one incarnation (a ZooKeeper session): a broker that
        restarted cannot renew its predecessor's lease, it waits for it to expire.
        A claim bumps the stored controller epoch; while the store cannot be written
        nobody can claim (False).
        """
        if self.controller_id == broker_id and self.controller_incarnation == incarnation:
            self.lease_ms = now_ms
            return True
        if self.controller_id is None or now_ms - self.lease_ms > session_timeout_ms:
            try:
                self._store(f"controller epoch {self.controller_epoch + 1} (broker {broker_id})",
                            controller_epoch=self.controller_epoch + 1)
            except MetadataStorageError:
                return False
            self.controller_id = broker_id
            self.controller_incarnation = incarnation
            self.controller_epoch += 1
            self.lease_ms = now_ms
            self._maybe_compact()
            return True
        return False

    def resign(self, broker_id: int) -> None:
        if self.controller_id == broker_id:
            self.controller_id = None

    def _check_epoch(self, controller_epoch: int, what: str) -> None:
        if controller_epoch != self.controller_epoch:
            raise StaleControllerEpochError(
                f"controller epoch {controller_epoch} is stale (current {self.controller_epoch}); {what} refused"
            )

    def write(self, controller_epoch: int, st: PartitionState) -> None:
        """Store ``st``, then apply it (a failed store raises MetadataStorageError and applies nothing)."""
        self._check_epoch(controller_epoch, f"write of {st.topic}-{st.partition}")
        old = self.partitions.get((st.topic, st.partition))
        if old is not None:
            assert st.leader_epoch >= old.leader_epoch and st.partition_epoch > old.partition_epoch, (old, st)
        assert st.isr, f"{st.topic}-{st.partition}: an ISR is never empty"
        self._store(f"{st.topic}-{st.partition} (leader {st.leader}, leader epoch {st.leader_epoch}, "
                    f"ISR {list(st.isr)}, partition epoch {st.partition_epoch})", partitions=[asdict(st)])
        self.partitions[(st.topic, st.partition)] = st
        self.history.append((controller_epoch, st))
        self._maybe_compact()

    def state_of(self, tp: TP) -> str:
        st = self.partitions.get(tp)
        if st is None:
            return NON_EXISTENT
        return ONLINE if st.leader != NO_LEADER else OFFLINE

    def _check(self) -> None:
        for tp, st in self.partitions.items():
            assert st.isr and set(st.isr) <= set(st.replicas), st
            assert st.leader == NO_LEADER or st.leader in st.isr, f"leader not in ISR: {st}"
            assert not set(st.elr) & set(st.isr) and set(st.elr) <= set(st.replicas), f"bad ELR: {st}"
            assert len(set(st.replicas)) == len(st.replicas)


class Controller:
    """The active controller's logic, run on the broker that holds the controller role."""

    def __init__(self, broker_id: int, store: MetadataStore, *, session_timeout_ms: int, now_ms: int,
                 previous_controller: Optional[int] = None):
        self.broker_id = broker_id
        self.store = store
        self.epoch = store.controller_epoch
        self.session_timeout_ms = session_timeout_ms
        # Soft state: every broker gets a fresh session, except the broker whose
        # lease just expired (it is presumed dead; a heartbeat brings it back).
        self.last_heartbeat: Dict[int, int] = {b: now_ms for b in store.brokers if b != previous_controller}
        self.incarnation = store.broker_incarnations
        self.shutting_down: Set[int] = set()
        self.active = True
        #: broker -> (incarnation, producer id block) granted to it. Soft state: a new controller
        #: grants every broker a fresh block. Every LeaderAndIsr to the broker repeats its block, so
        #: a lost request does not leave it without one (the broker ignores a block it already has).
        self._pid_blocks: Dict[int, Tuple[int, Tuple[int, int]]] = {}
        #: per broker, its last heartbeat's applied epochs, the store version then, and what it missed
        self._hb_seen: Dict[int, Tuple[object, int, Tuple[PartitionState, ...]]] = {}

    # --------------------------------------------------------------- liveness
    def live_brokers(self) -> Set[int]:
        return set(self.last_heartbeat)

    def _is_live(self, b: int) -> bool:
        return b in self.last_heartbeat

    def _lose_store(self, exc: MetadataStorageError) -> None:
        """The store refused a write: stop acting and resign, as a KRaft controller that lost its
        quorum does. Nothing of the failed change was applied; what was committed before it is
        still sent. A broker claims the role again (a new controller epoch, a fresh controller
        announcing the full state) once the store accepts the epoch bump."""
        if self.active:
            _log.error("controller on broker %d (epoch %d) stops acting: %s", self.broker_id, self.epoch, exc)
        self.active = False
        self.store.resign(self.broker_id)

    def activate(self, now_ms: int) -> Outbox:
        """Announce this controller (its epoch) and the full state to every broker."""
        out = Outbox()
        if not self.active:
            return out
        try:
            for b in self.store.brokers:
                states = tuple(st for st in self.store.partitions.values() if b in st.replicas)
                out.send(b, self._lai(b, states))
            for b in self.store.brokers:
                if not self._is_live(b):  # the previous controller's broker: its lease expired
                    self._broker_failed(b, out)
            # Kafka's onControllerFailover (triggerOnlinePartitionStateChange): elect a leader for
            # every partition left offline. Otherwise a partition whose ISR members all lived
            # through a controller change (a controller that stopped acting on a failing store,
            # or one cut off from them) would wait for a broker restart to be elected.
            for tp, st in list(self.store.partitions.items()):
                if st.leader == NO_LEADER:
                    self._elect(tp, "offline", out, exclude=set())
        except MetadataStorageError as exc:
            self._lose_store(exc)
        return out

    def handle(self, src: object, msg: object, now_ms: int) -> Outbox:
        """A broker's heartbeat, AlterPartition, StopReplica answer or AllocateProducerIds. Never raises for a failing store: the
        controller stops acting (:meth:`_lose_store`) and the committed part is returned."""
        out = Outbox()
        if not self.active:
            return out
        try:
            if isinstance(msg, BrokerHeartbeat):
                self._on_heartbeat(msg, now_ms, out)
            elif isinstance(msg, AlterPartitionRequest):
                resp = self._on_alter_partition(msg, out)
                out.send(src, replace(resp, proposal=tuple(msg.new_isr), request_partition_epoch=msg.partition_epoch))
            elif isinstance(msg, StopReplicaResponse):
                if msg.error is None:
                    self.store.replica_deleted(msg.topic, msg.broker_id, msg.partition)
            elif isinstance(msg, AllocateProducerIdsRequest):
                out.send(src, self._on_allocate_producer_ids(msg))
        except StaleControllerEpochError:
            self.active = False
            return Outbox()
        except MetadataStorageError as exc:
            # No answer to an AlterPartition whose change was not stored: the leader keeps its
            # proposal pending (the maximal ISR counts for the HW) and resends it.
            self._lose_store(exc)
        return out

    def _on_heartbeat(self, hb: BrokerHeartbeat, now_ms: int, out: Outbox) -> None:
        b = hb.broker_id
        known = self.incarnation.get(b)
        was_live = self._is_live(b)
        if known is not None and known != hb.incarnation:
            # Restarted: it lost its in-memory state (and after a crash maybe unflushed
            # data too), so fail it over first (KRaft's broker epoch, KIP-966's unclean flag).
            self._broker_failed(b, out, unclean=hb.unclean_restart)
        self.store.register(b, hb.incarnation)
        self.last_heartbeat[b] = now_ms
        started = not was_live or known != hb.incarnation
        if started:
            self.shutting_down.discard(b)
            self._broker_started(b, out)
        # What broker b has not applied; the same answer as last time when neither its applied
        # epochs nor the store changed (a steady heartbeat costs O(1), not O(partitions)).
        seen = self._hb_seen.get(b)
        if seen is not None and seen[1] == self.store.version and (
                seen[0] is hb.partition_epochs or seen[0] == hb.partition_epochs):
            missed = seen[2]
        else:
            applied = {(t, p): e for t, p, e in hb.partition_epochs}
            missed = tuple(
                st for tp, st in self.store.partitions.items()
                if b in st.replicas and applied.get(tp, -1) < st.partition_epoch
            )
            self._hb_seen[b] = (hb.partition_epochs, self.store.version, missed)
        if missed and not started:
            out.send(b, self._lai(b, missed))
        self.resend_deletions(b, out)
        if hb.want_shutdown:
            if b not in self.shutting_down:
                self.shutting_down.add(b)
                self._controlled_shutdown(b, out)
            leads = sum(1 for st in self.store.partitions.values() if st.leader == b)
            out.send(b, HeartbeatResponse(self.epoch, should_shut_down=leads == 0, leads=leads))

    def discount_stall(self, stall_ms: int, now_ms: int) -> None:
        """The controller could not observe heartbeats for ``stall_ms`` (its host loop was stalled): move
        every broker's last heartbeat that much later (at most ``now_ms``), so the stall does not count
        towards any session timeout. A broker that really died is fenced ``stall_ms`` later than it
        would have been. Complexity: O(brokers)."""
        for b, t in self.last_heartbeat.items():
            self.last_heartbeat[b] = min(now_ms, t + stall_ms)

    def tick(self, now_ms: int) -> Outbox:
        """Expire broker sessions (heartbeat older than the session timeout)."""
        out = Outbox()
        if not self.active:
            return out
        try:
            for b, t in list(self.last_heartbeat.items()):
                if b != self.broker_id and now_ms - t > self.session_timeout_ms:
                    del self.last_heartbeat[b]
                    self.shutting_down.discard(b)
                    self._broker_failed(b, out)
        except StaleControllerEpochError:
            self.active = False
            return Outbox()
        except MetadataStorageError as exc:
            self._lose_store(exc)
        return out

    # --------------------------------------------------------------- events
    def _broker_started(self, b: int, out: Outbox) -> None:
        states = tuple(st for st in self.store.partitions.values() if b in st.replicas)
        out.send(b, self._lai(b, states))
        for tp, st in list(self.store.partitions.items()):
            if st.leader == NO_LEADER and b in st.replicas:
                self._elect(tp, "offline", out, exclude=set())

    def _broker_failed(self, b: int, out: Outbox, unclean: bool = False) -> None:
        """``b`` is gone (session expired) or came back as a new incarnation (``unclean``: after a crash)."""
        lost = {b} if unclean else set()
        for tp in list(self.store.partitions):
            st = self.store.partitions[tp]
            if b in st.elr and unclean:  # it may have lost the committed records it held
                st = self._write(self._next(st, isr=st.isr, unclean=lost), out)
            if st.leader == b or (unclean and st.leader == NO_LEADER and st.isr == (b,)):
                if not self._elect(tp, "offline", out, exclude={b}, unclean=lost) and unclean:
                    st = self.store.partitions[tp]
                    if st.isr == (b,) and st.elr:
                        # KIP-966: a broker that restarted uncleanly leaves the ISR. It was the last
                        # member, so the ISR is "empty" and the next leader must come from the ELR,
                        # which holds every committed record (the HW froze when it left the ISR);
                        # pylog keeps ISRs non-empty, so the ELR becomes the ISR of the offline
                        # partition. Electing ``b`` instead would truncate the ELR to what ``b``
                        # kept (seed 702007 of issue 14: __consumer_offsets HW 5 -> 0).
                        self._write(replace(st, isr=st.elr, elr=(), partition_epoch=st.partition_epoch + 1), out)
            elif b in st.isr and len(st.isr) > 1:
                self._write(self._next(st, isr=tuple(r for r in st.isr if r != b), unclean=lost), out)

    def _controlled_shutdown(self, b: int, out: Outbox) -> None:
        for tp, st in list(self.store.partitions.items()):
            if st.leader == b:
                self._elect(tp, "controlled_shutdown", out, exclude={b})
            elif b in st.isr and len(st.isr) > 1:
                self._write(self._next(st, isr=tuple(r for r in st.isr if r != b)), out)

    @staticmethod
    def _next(st: PartitionState, *, isr: Sequence[int], unclean: Set[int] = frozenset(), **changes: object) -> PartitionState:  # type: ignore[assignment]
        """The next version of ``st`` with ``isr``; maintains the ELR (KIP-966).

        While the ISR is below ``min(min_insync_replicas, RF)`` the HW is frozen, so
        members leaving the ISR then keep every committed record and join the ELR;
        an ISR back at min ISR clears it; a broker that restarted uncleanly leaves it.
        """
        isr = tuple(isr)
        if len(isr) >= min(st.min_insync_replicas, len(st.replicas)):
            elr: Tuple[int, ...] = ()
        else:
            elr = tuple(r for r in st.replicas
                        if (r in st.elr or r in st.isr) and r not in isr and r not in unclean)
        return replace(st, isr=isr, elr=elr, partition_epoch=st.partition_epoch + 1, **changes)  # type: ignore[arg-type]

    # ------------------------------------------------------------ elections
    def select_leader(self, st: PartitionState, kind: str, exclude: Set[int]) -> Tuple[Optional[int], Tuple[int, ...]]:
        """Apply one of Kafka's leader selectors; returns (leader or None, new ISR)."""
        def live(r: int) -> bool:
            return self._is_live(r) and r not in exclude
        if kind == "preferred":
            r = st.replicas[0]
            return (r, st.isr) if live(r) and r in st.isr else (None, st.isr)
        if kind == "controlled_shutdown":
            for r in st.replicas:
                if live(r) and r in st.isr and r not in self.shutting_down:
                    return r, tuple(x for x in st.isr if x not in exclude)
            return None, st.isr
        # offline: a live ISR member, else a live eligible leader replica (KIP-966)
        for r in st.replicas:
            if live(r) and r in st.isr:
                return r, tuple(x for x in st.isr if live(x))
        for r in st.replicas:
            if live(r) and r in st.elr:
                return r, (r,)
        cfg = self.store.topics.get(st.topic)
        if cfg is not None and cfg.unclean_leader_election:
            for r in st.replicas:
                if live(r):
                    self.store.unclean_elections += 1
                    return r, (r,)
        return None, st.isr

    def _elect(self, tp: TP, kind: str, out: Outbox, exclude: Set[int], unclean: Set[int] = frozenset()) -> bool:  # type: ignore[assignment]
        st = self.store.partitions[tp]
        leader, isr = self.select_leader(st, kind, exclude)
        if leader is None:
            if kind in ("offline",) and st.leader != NO_LEADER:
                # No live ISR member: the partition goes Offline; keep the ISR (never empty).
                self._write(self._next(st, isr=st.isr, unclean=unclean, leader=NO_LEADER,
                                       leader_epoch=st.leader_epoch + 1), out)
            return False
        if leader == st.leader and kind == "preferred":
            return False
        self._write(self._next(st, isr=isr, unclean=unclean, leader=leader, leader_epoch=st.leader_epoch + 1), out)
        return True

    def elect_preferred(self, tp: TP) -> Outbox:
        out = Outbox()
        if tp not in self.store.partitions:
            raise UnknownTopicOrPartitionError(f"unknown partition {tp[0]}-{tp[1]}")
        with self._raising_store_errors():
            self._elect(tp, "preferred", out, exclude=set())
        return out

    @contextlib.contextmanager
    def _raising_store_errors(self) -> Iterator[None]:
        """For calls made by the cluster's API: a failing store stops this controller and the
        caller gets the MetadataStorageError (a KafkaStorageError)."""
        try:
            yield
        except MetadataStorageError as exc:
            self._lose_store(exc)
            raise

    def reassign(self, tp: TP, replicas: Sequence[int]) -> Outbox:
        """Move ``tp`` to ``replicas`` (all must already be in the ISR: no data movement here)."""
        out = Outbox()
        st = self.store.partitions[tp]
        new = tuple(replicas)
        for r in new:
            if self._is_live(r) and r in st.isr:
                isr = tuple(x for x in st.isr if x in new)
                with self._raising_store_errors():
                    self._write(replace(st, replicas=new, leader=r, isr=isr, elr=(), leader_epoch=st.leader_epoch + 1,
                                        partition_epoch=st.partition_epoch + 1), out)
                return out
        raise InvalidConfigurationError(f"no live in-sync replica of {tp[0]}-{tp[1]} in {list(new)}")

    def _write(self, st: PartitionState, out: Outbox) -> PartitionState:
        """Store ``st``, then tell its replicas. Everything the LeaderAndIsr requests need stored
        (producer id blocks) is stored first, so a failing store leaves nothing half-sent."""
        for r in st.replicas:
            self._pid_block(r)
        self.store.write(self.epoch, st)
        for r in st.replicas:
            out.send(r, self._lai(r, (st,)))
        return st

    def _pid_block(self, b: int) -> Tuple[int, int]:
        """The producer id block granted to ``b``'s current incarnation (stored when first granted)."""
        inc = self.incarnation.get(b, -1)
        if inc < 0:
            return (-1, 0)
        granted = self._pid_blocks.get(b)
        if granted is None or granted[0] != inc:
            granted = (inc, self.store.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE, self.epoch))
            self._pid_blocks[b] = granted
        return granted[1]

    def _on_allocate_producer_ids(self, req: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        """KIP-730's AllocateProducerIds: a new block for the broker, stored before the answer (a
        failing store raises MetadataStorageError: no answer, the broker asks again). A request of
        another registration than the broker's current one is refused (StaleBrokerEpochError).
        The block also becomes the one the broker's LeaderAndIsr requests carry."""
        b, inc = req.broker_id, req.broker_incarnation
        if self.incarnation.get(b) != inc or not self._is_live(b):
            return AllocateProducerIdsResponse(
                req.correlation_id, StaleBrokerEpochError,
                f"broker {b} incarnation {inc} is not registered (current {self.incarnation.get(b)})",
                broker_incarnation=inc)
        block = self.store.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE, self.epoch)
        self._pid_blocks[b] = (inc, block)
        return AllocateProducerIdsResponse(req.correlation_id, None, "", block[0], block[1], inc)

    def _lai(self, b: int, states: Tuple[PartitionState, ...]) -> LeaderAndIsrRequest:
        inc = self.incarnation.get(b, -1)
        block = self._pid_block(b)
        configs = []
        for t in sorted({st.topic for st in states}):
            cfg = self.store.topics.get(t)
            if cfg is not None and cfg.configs:
                configs.append((t, cfg.config_items()))
        return LeaderAndIsrRequest(self.broker_id, self.epoch, states, inc, tuple(configs), block)

    # ---------------------------------------------------------- ISR changes
    def _on_alter_partition(self, req: AlterPartitionRequest, out: Outbox) -> AlterPartitionResponse:
        tp = (req.topic, req.partition)
        st = self.store.partitions.get(tp)
        if st is None:
            return AlterPartitionResponse(req.topic, req.partition, UnknownTopicOrPartitionError, "unknown partition")
        if req.broker_id != st.leader or req.leader_epoch != st.leader_epoch:
            return AlterPartitionResponse(req.topic, req.partition, FencedLeaderEpochError,
                                          f"{req.topic}-{req.partition}: leader {req.broker_id} epoch {req.leader_epoch} "
                                          f"is not the current leader {st.leader} epoch {st.leader_epoch}", st)
        if req.partition_epoch != st.partition_epoch:
            return AlterPartitionResponse(req.topic, req.partition, FencedLeaderEpochError,
                                          f"{req.topic}-{req.partition}: partition epoch {req.partition_epoch} is "
                                          f"stale (current {st.partition_epoch})", st)
        new_isr = tuple(sorted(set(req.new_isr)))
        added = set(new_isr) - set(st.isr)
        if req.broker_id not in new_isr or not set(new_isr) <= set(st.replicas) or any(
            not self._is_live(r) or r in self.shutting_down for r in added
        ):
            return AlterPartitionResponse(req.topic, req.partition, FencedLeaderEpochError,
                                          f"{req.topic}-{req.partition}: ineligible ISR {list(new_isr)}", st)
        for r, inc in req.added_incarnations:
            # KIP-903: the leader saw this replica caught up in an earlier life; it restarted since
            # (and may have lost what it had), so that fetch says nothing about it now.
            if r in added and inc >= 0 and self.incarnation.get(r, inc) != inc:
                return AlterPartitionResponse(
                    req.topic, req.partition, FencedLeaderEpochError,
                    f"{req.topic}-{req.partition}: replica {r} was caught up as incarnation {inc}, "
                    f"it is incarnation {self.incarnation.get(r)} now", st)
        new = self._next(st, isr=new_isr)
        self._write(new, out)
        return AlterPartitionResponse(req.topic, req.partition, None, "", new)

    # --------------------------------------------------------------- topics
    def create_topic(self, cfg: TopicConfig, *, start_index: Optional[int] = None, shift: Optional[int] = None) -> Outbox:
        validate_topic(cfg.name)
        if cfg.name in self.store.topics:
            raise TopicAlreadyExistsError(f"topic {cfg.name!r} already exists")
        if cfg.name in self.store.deleting:
            raise TopicAlreadyExistsError(
                f"topic {cfg.name!r} is marked for deletion: brokers {sorted(self.store.deleting[cfg.name])} "
                "have not removed their replicas yet (they do when they run)")
        for fname in ("partitions", "replication_factor", "min_insync_replicas"):
            value = getattr(cfg, fname)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidConfigurationError(f"topic {cfg.name!r}: {fname} must be an int, got {value!r}")
        if cfg.min_insync_replicas < 1 or cfg.min_insync_replicas > cfg.replication_factor:
            raise InvalidConfigurationError(
                f"min_insync_replicas must be in [1, replication_factor={cfg.replication_factor}], "
                f"got {cfg.min_insync_replicas}"
            )
        validate_topic_configs(cfg.name, cfg.configs)
        brokers = sorted(self.store.brokers)
        rule = _INTERNAL_REPLICATION.get(cfg.name)
        if rule is not None:
            rf, min_isr = rule[0](len(brokers))
            if cfg.replication_factor < rf or cfg.min_insync_replicas < min_isr:
                raise InvalidConfigurationError(
                    f"topic {cfg.name!r} needs replication_factor >= {rf} and min_insync_replicas >= {min_isr} "
                    f"with {len(brokers)} brokers, got {cfg.replication_factor} and {cfg.min_insync_replicas}: a lone "
                    f"in-sync replica that crashes can lose {rule[1]} (docs/replication.md)")
        assignment = assign_replicas(brokers, cfg.partitions, cfg.replication_factor, rng=self.store.rng,
                                     start_index=start_index, shift=shift)
        states = []
        for p, replicas in enumerate(assignment):
            live = [r for r in replicas if self._is_live(r)] or [replicas[0]]
            leader = live[0] if self._is_live(live[0]) else NO_LEADER
            states.append(PartitionState(cfg.name, p, tuple(replicas), leader, 0, tuple(live), 0,
                                         cfg.min_insync_replicas))
        out = Outbox()
        with self._raising_store_errors():
            for b in sorted({r for replicas in assignment for r in replicas}):
                self._pid_block(b)
            self.store.create_topic(self.epoch, cfg, states)  # the topic and its partitions: one write
        if len(states) <= LEADER_AND_ISR_BATCH_MIN_PARTITIONS:
            for st in states:
                for r in st.replicas:
                    out.send(r, self._lai(r, (st,)))
            return out
        # One LeaderAndIsr per broker carrying all its new replicas (Kafka's controller batches
        # per broker too): the broker creates them all and makes the batch durable in one sync.
        per_broker: Dict[int, List[PartitionState]] = {}
        for st in states:
            for r in st.replicas:
                per_broker.setdefault(r, []).append(st)
        for r in sorted(per_broker):
            out.send(r, self._lai(r, tuple(per_broker[r])))
        return out

    # ---------------------------------------------------------- topic admin
    #: topics Kafka calls internal: never deleted or given more partitions through the admin API
    INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

    def _topic(self, name: str) -> TopicConfig:
        cfg = self.store.topics.get(name)
        if cfg is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return cfg

    def delete_topic(self, name: str) -> Outbox:
        """Delete topic ``name`` (Kafka's DeleteTopics): it leaves the metadata at once (one atomic
        save, together with the list of replicas still to remove); every replica gets a
        StopReplica(delete) - the broker renames the directory ``<topic>-<p>.<uuid>-delete`` and
        deletes it after a delay - and every broker a :class:`TopicsDeleted` for its group
        coordinator. A replica whose broker is down is removed when it comes back (the request is
        repeated on each heartbeat until the broker confirms).

        Raises UnknownTopicOrPartitionError, or InvalidTopicError for an internal topic.
        """
        cfg = self._topic(name)
        if name in self.INTERNAL_TOPICS:
            raise InvalidTopicError(f"topic {name!r} is internal and cannot be deleted")
        delay = cfg.configs.get("file_delete_delay_ms", -1)
        pending: Dict[int, List[int]] = {}
        for (t, p), st in self.store.partitions.items():
            if t == name:
                for r in st.replicas:
                    pending.setdefault(r, []).append(p)
        with self._raising_store_errors():
            self.store.remove_topic(name, pending)
        out = Outbox()
        for b in self.store.brokers:
            self.resend_deletions(b, out, topics=(name,), delay_ms=delay if isinstance(delay, int) else -1)
            out.send(b, TopicsDeleted(self.epoch, (name,)))
        return out

    def resend_deletions(self, b: int, out: Outbox, topics: Optional[Sequence[str]] = None, delay_ms: int = -1) -> None:
        """StopReplica(delete) for every replica broker ``b`` still has to remove (of ``topics``);
        ``delay_ms``: the topic's ``file_delete_delay_ms`` (-1: the broker's)."""
        for t in (topics if topics is not None else sorted(self.store.deleting)):
            for p in self.store.deleting.get(t, {}).get(b, ()):
                out.send(b, StopReplicaRequest(self.epoch, t, p, delete_partition=True, delete_delay_ms=delay_ms))

    def create_partitions(self, name: str, total: int, *, start_index: Optional[int] = None,
                          shift: Optional[int] = None) -> Outbox:
        """Grow topic ``name`` to ``total`` partitions (Kafka's CreatePartitions): the new ones are
        assigned as a topic creation assigns them and start empty at leader epoch 0.

        Raises UnknownTopicOrPartitionError, InvalidPartitionsError (``total`` not above the current
        count), InvalidTopicError for an internal topic.
        """
        cfg = self._topic(name)
        if not isinstance(total, int) or isinstance(total, bool):
            raise InvalidPartitionsError(f"topic {name!r}: the partition count must be an int, got {total!r}")
        if total <= cfg.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {cfg.partitions} partitions; the new count ({total}) must be greater")
        if name in self.INTERNAL_TOPICS:
            raise InvalidTopicError(f"topic {name!r} is internal: its partition count cannot change")
        brokers = sorted(self.store.brokers)
        assignment = assign_replicas(brokers, total - cfg.partitions, cfg.replication_factor, rng=self.store.rng,
                                     start_index=start_index, shift=shift)
        states = []
        for i, replicas in enumerate(assignment):
            live = [r for r in replicas if self._is_live(r)] or [replicas[0]]
            leader = live[0] if self._is_live(live[0]) else NO_LEADER
            states.append(PartitionState(name, cfg.partitions + i, tuple(replicas), leader, 0, tuple(live), 0,
                                         cfg.min_insync_replicas))
        with self._raising_store_errors():
            self.store.extend_topic(replace(cfg, partitions=total), states)
        out = Outbox()
        for st in states:
            for r in st.replicas:
                out.send(r, self._lai(r, (st,)))
        return out

    def alter_topic_config(self, name: str, configs: Dict[str, object]) -> Outbox:
        """Set (value None: remove) per-topic configs, already in snake_case with typed values
        (:func:`pylog.replication.topic_configs.normalize_topic_configs`). Log configs reach the
        running replicas in a LeaderAndIsr (they apply them to their open logs); a new
        ``min_insync_replicas`` is a new partition state (partition epoch + 1).

        Raises UnknownTopicOrPartitionError, InvalidConfigurationError.
        """
        cfg = self._topic(name)
        merged = dict(cfg.configs)
        min_isr, unclean = cfg.min_insync_replicas, cfg.unclean_leader_election
        for k, v in configs.items():
            if k == "min_insync_replicas":
                min_isr = 1 if v is None else v  # type: ignore[assignment]
            elif k == "unclean_leader_election":
                unclean = bool(v)
            elif v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        if not isinstance(min_isr, int) or isinstance(min_isr, bool) or not 1 <= min_isr <= cfg.replication_factor:
            raise InvalidConfigurationError(
                f"topic {name!r}: min.insync.replicas must be in [1, replication_factor={cfg.replication_factor}], "
                f"got {min_isr!r}")
        validate_topic_configs(name, merged)
        new = replace(cfg, configs=merged, min_insync_replicas=min_isr, unclean_leader_election=unclean)
        out = Outbox()
        with self._raising_store_errors():
            self.store.replace_topic(new)
            states = sorted((st for (t, _), st in self.store.partitions.items() if t == name), key=lambda st: st.partition)
            if min_isr != cfg.min_insync_replicas:
                for st in states:
                    self._write(self._next(replace(st, min_insync_replicas=min_isr), isr=st.isr), out)
        if min_isr == cfg.min_insync_replicas:
            for b in self.store.brokers:
                mine = tuple(st for st in states if b in st.replicas)
                if mine:
                    out.send(b, self._lai(b, mine))
        return out

    def _check(self) -> None:
        self.store._check()
        assert self.epoch <= self.store.controller_epoch


__all__ = ["Controller", "MetadataStore", "TopicConfig", "validate_topic_configs", "load_metadata", "LoadedMetadata",
           "read_metadata_json", "metadata_log_path",
           "offsets_topic_replication", "transaction_state_replication", "PRODUCER_ID_BLOCK_SIZE", "NON_EXISTENT", "NEW", "ONLINE", "OFFLINE"]
