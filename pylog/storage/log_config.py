"""Per-partition log settings (Kafka's ``LogConfig``) and the topic-name rule.

:class:`LogConfig` holds the settings of one partition's log with Kafka's
defaults and snake_case names, and validates them
(:class:`~pylog.errors.InvalidConfigurationError` naming the setting);
:func:`validate_topic` is Kafka's topic-name rule. Pure values: no I/O, no
state; thread-safe.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Optional

from pylog.errors import InvalidConfigurationError, InvalidTopicError
from pylog.storage.segment_cache import DEFAULT_MAX_OPEN_SEGMENTS

CLEANUP_POLICIES = ("delete", "compact")
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_DAY_MS = 24 * 3600 * 1000


def validate_topic(topic: object) -> str:
    """Return ``topic`` if it is a legal Kafka topic name, else raise InvalidTopicError."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic name must be a str, not {type(topic).__name__}")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    if not _TOPIC_RE.match(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is invalid: use 1 to 249 characters from [a-zA-Z0-9._-]"
        )
    return topic


class LogConfig(NamedTuple):
    """Per-partition settings, with Kafka's defaults and snake_case names."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * _DAY_MS
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    flush_messages: Optional[int] = None  # None: never by count; 1: fsync every append
    flush_ms: Optional[int] = None  # None: never by time
    retention_bytes: int = -1  # -1: unlimited
    retention_ms: int = 7 * _DAY_MS  # -1: unlimited
    recovery_checkpoint_interval_ms: int = 60_000
    # Log cleaner (Kafka's cleanup.policy and friends; see docs/compaction.md).
    cleanup_policy: str = "delete"  # "delete", "compact" or "compact,delete"
    delete_retention_ms: int = _DAY_MS  # how long a tombstone outlives its first cleaning
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0  # a record younger than this is not compacted
    max_compaction_lag_ms: int = 2**63 - 1  # a dirty record older than this forces a clean
    # Segments whose files stay open (LRU; the active one always): pylog/storage/segment_cache.py.
    max_open_segments: int = DEFAULT_MAX_OPEN_SEGMENTS

    @property
    def compact(self) -> bool:
        """True when the cleaner compacts this log by key."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """True when retention by time and size deletes old segments."""
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_kwargs(cls, **kwargs: object) -> "LogConfig":
        unknown = set(kwargs) - set(cls._fields)
        if unknown:
            raise InvalidConfigurationError(
                f"unknown log config {', '.join(sorted(unknown))}; known: {', '.join(cls._fields)}"
            )
        cfg = cls(**kwargs)  # type: ignore[arg-type]
        cfg.validate()
        return cfg

    def validate(self) -> None:
        def need_int(name: str, lo: int, allow_none: bool = False) -> None:
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if not isinstance(v, int) or isinstance(v, bool):
                raise InvalidConfigurationError(f"{name} must be an int, not {type(v).__name__} ({v!r})")
            if v < lo:
                raise InvalidConfigurationError(f"{name} must be >= {lo}, got {v}")

        need_int("segment_bytes", 14 + 61)
        need_int("segment_ms", 1)
        need_int("index_interval_bytes", 0)
        need_int("max_message_bytes", 61)
        need_int("flush_messages", 1, allow_none=True)
        need_int("flush_ms", 0, allow_none=True)
        need_int("retention_bytes", -1)
        need_int("retention_ms", -1)
        need_int("recovery_checkpoint_interval_ms", 0)
        need_int("max_open_segments", 2)  # the active segment and one being read
        policy = self.cleanup_policy
        parts = policy.split(",") if isinstance(policy, str) else None
        if not parts or any(p not in CLEANUP_POLICIES for p in parts) or len(set(parts)) != len(parts):
            raise InvalidConfigurationError(
                f"cleanup_policy must be 'delete', 'compact' or 'compact,delete', got {policy!r}"
            )
        need_int("delete_retention_ms", 0)
        need_int("min_compaction_lag_ms", 0)
        need_int("max_compaction_lag_ms", 1)
        ratio = self.min_cleanable_dirty_ratio
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0.0 <= ratio <= 1.0:
            raise InvalidConfigurationError(f"min_cleanable_dirty_ratio must be a number in [0, 1], got {ratio!r}")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigurationError(
                f"min_compaction_lag_ms ({self.min_compaction_lag_ms}) must not exceed "
                f"max_compaction_lag_ms ({self.max_compaction_lag_ms})"
            )


__all__ = ["LogConfig", "validate_topic", "CLEANUP_POLICIES"]
