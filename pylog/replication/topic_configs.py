"""Topic config names and values: Kafka's dotted names (``retention.ms``) and pylog's snake_case ones.

A topic's configs are stored in snake_case (:class:`~pylog.replication.controller.TopicConfig`):
the :class:`~pylog.storage.log.LogConfig` fields, the extra topic configs
(:data:`~pylog.replication.controller.EXTRA_TOPIC_CONFIGS`), and two that are
fields of the topic itself (``min_insync_replicas``, ``unclean_leader_election``).
:func:`normalize_topic_configs` accepts either spelling and string values (what
``kafka-configs.sh`` and the CLI pass) and returns typed snake_case values, or
raises :class:`~pylog.errors.InvalidConfigurationError` naming the config.

Complexity: O(configs). Thread-safety: pure functions.
"""
from __future__ import annotations

from typing import Dict, Mapping, Tuple

from pylog.errors import InvalidConfigurationError
from pylog.storage.log import LogConfig

#: configs that are fields of the topic (TopicConfig), not of its logs
TOPIC_FIELDS = ("min_insync_replicas", "unclean_leader_election")

#: Kafka's dotted name of each snake_case config where the rule "dots become underscores" does not give it
_SPECIAL_KAFKA_NAMES = {"unclean_leader_election": "unclean.leader.election.enable"}
_FROM_KAFKA = {v: k for k, v in _SPECIAL_KAFKA_NAMES.items()}

#: types of the configs that are not LogConfig fields (a LogConfig field takes its default's type)
_EXTRA_TYPES = {
    "min_insync_replicas": int,
    "unclean_leader_election": bool,
    "file_delete_delay_ms": int,
    "log_cleanup_interval_ms": int,
    "message_timestamp_type": str,
    "retention_protect_groups": list,
}
_OPTIONAL_INTS = ("flush_messages", "flush_ms")  # LogConfig fields whose default is None


def kafka_name(snake: str) -> str:
    """``retention_ms`` -> ``retention.ms`` (``unclean_leader_election`` -> ``unclean.leader.election.enable``)."""
    return _SPECIAL_KAFKA_NAMES.get(snake, snake.replace("_", "."))


def snake_name(name: str) -> str:
    """``retention.ms`` (or ``retention_ms``) -> ``retention_ms``."""
    return _FROM_KAFKA.get(name, name.replace(".", "_").replace("-", "_"))


def known_topic_configs(extra: "frozenset[str]") -> Tuple[str, ...]:
    """Every snake_case topic config name, sorted."""
    return tuple(sorted(set(LogConfig._fields) | set(extra) | set(TOPIC_FIELDS)))


def _coerce(topic: str, key: str, value: object) -> object:
    """A config value from a string (``"60000"``, ``"true"``, ``"a,b"``) to its type; other values unchanged."""
    if not isinstance(value, str):
        return value
    if key in LogConfig._fields:
        default = LogConfig._field_defaults[key]
        kind: type = int if key in _OPTIONAL_INTS else type(default)
    else:
        kind = _EXTRA_TYPES.get(key, str)
    text = value.strip()
    try:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is list:
            return [g for g in text.split(",") if g]
    except ValueError:
        raise InvalidConfigurationError(
            f"topic {topic!r}: config {kafka_name(key)} ({key}) must be {kind.__name__}-valued, got {value!r}"
        ) from None
    return text


def normalize_topic_configs(topic: str, configs: Mapping[str, object],
                            extra: "frozenset[str]") -> Dict[str, object]:
    """``configs`` with snake_case keys and typed values; an unknown key raises
    :class:`InvalidConfigurationError` naming it and listing the known ones (both spellings)."""
    if not isinstance(configs, Mapping):
        raise InvalidConfigurationError(f"topic {topic!r}: configs must be a dict, not {type(configs).__name__}")
    known = set(known_topic_configs(extra))
    out: Dict[str, object] = {}
    unknown = []
    for name, value in configs.items():
        if not isinstance(name, str):
            unknown.append(repr(name))
            continue
        key = snake_name(name)
        if key not in known:
            unknown.append(name)
            continue
        out[key] = _coerce(topic, key, value)
    if unknown:
        raise InvalidConfigurationError(
            f"topic {topic!r}: unknown config {', '.join(unknown)}; known: "
            + ", ".join(kafka_name(k) for k in sorted(known)))
    if out.get("min_insync_replicas") is not None:
        v = out["min_insync_replicas"]
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidConfigurationError(f"topic {topic!r}: min.insync.replicas must be an int, got {v!r}")
    if out.get("unclean_leader_election") is not None and not isinstance(out["unclean_leader_election"], bool):
        raise InvalidConfigurationError(
            f"topic {topic!r}: unclean.leader.election.enable must be true or false, "
            f"got {out['unclean_leader_election']!r}")
    return out


__all__ = ["TOPIC_FIELDS", "kafka_name", "snake_name", "known_topic_configs", "normalize_topic_configs"]
