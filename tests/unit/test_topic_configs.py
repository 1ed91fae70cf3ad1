"""pylog.replication.topic_configs: Kafka's dotted names and snake_case, string values typed, bad input named."""
from __future__ import annotations

import pytest

from pylog.errors import InvalidConfigurationError
from pylog.replication.controller import EXTRA_TOPIC_CONFIGS
from pylog.replication.topic_configs import kafka_name, known_topic_configs, normalize_topic_configs, snake_name


def test_every_known_config_round_trips_between_its_two_names():
    for key in known_topic_configs(EXTRA_TOPIC_CONFIGS):
        assert snake_name(kafka_name(key)) == key
        assert snake_name(key) == key
    assert kafka_name("unclean_leader_election") == "unclean.leader.election.enable"
    assert kafka_name("retention_ms") == "retention.ms"


def test_string_values_are_typed_like_the_config():
    got = normalize_topic_configs("t", {
        "retention.ms": "60000", "flush.messages": "1", "min.cleanable.dirty.ratio": "0.25",
        "cleanup.policy": "compact", "unclean.leader.election.enable": "TRUE", "min.insync.replicas": "2",
        "retention.protect.groups": "a,b", "segment_bytes": 4096}, EXTRA_TOPIC_CONFIGS)
    assert got == {"retention_ms": 60000, "flush_messages": 1, "min_cleanable_dirty_ratio": 0.25,
                   "cleanup_policy": "compact", "unclean_leader_election": True, "min_insync_replicas": 2,
                   "retention_protect_groups": ["a", "b"], "segment_bytes": 4096}


@pytest.mark.parametrize("configs, match", [
    ({"retention.mss": 1}, "unknown config retention.mss"),
    ({"retention.ms": "soon"}, r"retention.ms \(retention_ms\) must be int"),
    ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable"),
    ({"min.insync.replicas": 1.5}, "min.insync.replicas must be an int"),
    ({3: 1}, "unknown config 3"),
])
def test_bad_configs_are_named(configs, match):
    with pytest.raises(InvalidConfigurationError, match=match):
        normalize_topic_configs("t", configs, EXTRA_TOPIC_CONFIGS)
    with pytest.raises(InvalidConfigurationError, match="must be a dict"):
        normalize_topic_configs("t", [("a", 1)], EXTRA_TOPIC_CONFIGS)  # type: ignore[arg-type]
