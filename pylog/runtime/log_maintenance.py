"""Periodic log maintenance a broker runs from its tick: time-based flush, retention and compaction.

On every call, each log whose ``flush_ms`` has passed since its last flush
with data still unflushed is flushed (:meth:`Log.flush_if_due`; Kafka's
``log.flush.scheduler.interval.ms`` is how often the caller runs this), so a
log that stops receiving appends still gets its tail fsynced.

:func:`run_maintenance` goes over a broker's logs and, for each one whose
``log_cleanup_interval_ms`` has passed since its last run (Kafka's
``log.retention.check.interval.ms`` and cleaner backoff, one knob here):

* **retention** (``cleanup_policy`` with ``delete``): :meth:`Log.enforce_retention`
  by ``retention_ms`` / ``retention_bytes``, never the active segment, and,
  when the topic config ``retention_protect_groups`` names consumer groups,
  never a segment holding an offset at or above the slowest named group's
  committed offset (a named group without a committed offset for the
  partition protects the whole log); on a replica, never a segment holding
  an offset at or above its high watermark (the log's
  ``retention_high_watermark``, which the replica manager sets);
* **compaction** (``cleanup_policy`` with ``compact``): :meth:`Cleaner.clean`
  bounded by ``upper_bound(topic, partition)`` - the broker passes the
  partition's high watermark (or last stable offset), so nothing that could
  still be truncated after a leader change is cleaned.

Replicas clean independently, as in Kafka: compaction never changes an
offset, and a follower fetching an offset whose record was removed gets the
next batch (reads skip gaps), so replication keeps working when the leader
and followers compacted differently.

Durability: whatever the storage calls guarantee (fsynced swaps and
checkpoints). Thread-safety: call from one thread (the broker's tick); each
log call takes that log's lock. This module does no I/O of its own and
reads no clock: ``now_ms`` comes from the caller.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from pylog.errors import InvalidConfigurationError, LogClosedError, PylogError
from pylog.storage.cleaner import Cleaner, CleanResult
from pylog.storage.log import Log

TopicPartition = Tuple[str, int]
CommittedOffset = Callable[[str, str, int], Optional[int]]  # (group, topic, partition) -> offset or None

#: Kafka's log.retention.check.interval.ms default (5 minutes).
DEFAULT_CLEANUP_INTERVAL_MS = 300_000
#: Topic config keys this module reads (besides the LogConfig fields the Log already has).
PROTECT_GROUPS_CONFIG = "retention_protect_groups"
INTERVAL_CONFIG = "log_cleanup_interval_ms"

_default_cleaner = Cleaner()


class MaintenanceSummary(NamedTuple):
    """What one :func:`run_maintenance` call did, per partition."""

    checked: List[TopicPartition]  # partitions whose interval had passed
    deleted_segments: Dict[TopicPartition, List[int]]  # base offsets removed by retention
    protected_from: Dict[TopicPartition, int]  # consumer-aware retention floor applied
    cleaned: Dict[TopicPartition, CleanResult]  # compactions that ran
    errors: Dict[TopicPartition, str]
    flushed: List[TopicPartition]  # logs flushed because their flush_ms had passed


def protected_offset(
    topic: str, partition: int, groups: Sequence[str], committed_offset: CommittedOffset, log_start_offset: int
) -> Optional[int]:
    """The retention floor for one partition: the lowest committed offset among ``groups``.

    A group with no committed offset for the partition has consumed nothing,
    so it protects everything from ``log_start_offset``. None when ``groups``
    is empty (no protection).
    """
    floor: Optional[int] = None
    for group in groups:
        off = committed_offset(group, topic, partition)
        if off is None or off < log_start_offset:
            off = log_start_offset
        floor = off if floor is None else min(floor, off)
    return floor


def _groups(cfg: Mapping[str, object], topic: str) -> Sequence[str]:
    groups = cfg.get(PROTECT_GROUPS_CONFIG) or ()
    if isinstance(groups, str):
        groups = [g for g in groups.split(",") if g]  # Kafka's list configs are comma-separated strings
    if not isinstance(groups, Iterable) or not all(isinstance(g, str) and g for g in groups):
        raise InvalidConfigurationError(
            f"topic {topic!r}: {PROTECT_GROUPS_CONFIG} must be a list of group ids, got {groups!r}"
        )
    return [g for g in groups if isinstance(g, str)]  # all are (checked above)


def run_maintenance(
    logs: Mapping[TopicPartition, Log],
    topic_configs: Mapping[str, Mapping[str, object]],
    committed_offset: CommittedOffset,
    now_ms: int,
    *,
    upper_bound: Optional[Callable[[str, int], Optional[int]]] = None,
    cleaner: Optional[Cleaner] = None,
    default_interval_ms: int = DEFAULT_CLEANUP_INTERVAL_MS,
    force: bool = False,
) -> MaintenanceSummary:
    """Flush the logs whose ``flush_ms`` passed; run retention and compaction on every log that
    is due; see the module docstring.

    ``topic_configs[topic]`` may hold ``retention_protect_groups`` (list of
    group ids) and ``log_cleanup_interval_ms``; ``committed_offset(group,
    topic, partition)`` answers from the group coordinator; ``upper_bound``
    gives the first offset compaction must not touch (high watermark / last
    stable offset; default: the log end, right for an unreplicated log).
    ``force`` ignores the interval. Errors of one log are reported in the
    summary and do not stop the others.

    Complexity: O(logs) when nothing is due; a clean costs O(bytes cleaned).
    """
    cleaner = cleaner or _default_cleaner
    summary = MaintenanceSummary([], {}, {}, {}, {}, [])
    for tp, log in sorted(logs.items()):
        topic, partition = tp
        if log.closed or log.read_only:
            continue
        cfg = topic_configs.get(topic, {})
        try:
            if log.flush_if_due(now_ms):  # every call, whatever the cleanup interval
                summary.flushed.append(tp)
            interval = cfg.get(INTERVAL_CONFIG, default_interval_ms)
            if not isinstance(interval, int) or isinstance(interval, bool) or interval < 0:
                raise InvalidConfigurationError(f"topic {topic!r}: {INTERVAL_CONFIG} must be an int >= 0, got {interval!r}")
            last = log.last_maintenance_ms
            if not force and last is not None and now_ms - last < interval:
                continue
            log.last_maintenance_ms = now_ms
            summary.checked.append(tp)
            groups = _groups(cfg, topic)
            floor = protected_offset(topic, partition, groups, committed_offset, log.log_start_offset) if groups else None
            log.retention_protect_from = floor  # also honoured by the retention a roll triggers
            if floor is not None:
                summary.protected_from[tp] = floor
            if log.config.delete:
                deleted = log.enforce_retention(now_ms)
                if deleted:
                    summary.deleted_segments[tp] = deleted
            if log.config.compact:
                bound = upper_bound(topic, partition) if upper_bound is not None else None
                res = cleaner.clean(log, now_ms, upper_bound=bound)
                if res.cleaned:
                    summary.cleaned[tp] = res
        except LogClosedError:
            continue  # the partition was closed (deleted, broker stopping) meanwhile
        except PylogError as exc:
            summary.errors[tp] = f"{type(exc).__name__}: {exc}"
    return summary


__all__ = ["run_maintenance", "MaintenanceSummary", "protected_offset", "DEFAULT_CLEANUP_INTERVAL_MS",
           "PROTECT_GROUPS_CONFIG", "INTERVAL_CONFIG"]
