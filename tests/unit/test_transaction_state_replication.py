"""The controller enforces ``__transaction_state``'s replication as ``__consumer_offsets``'s (Kafka's
``transaction.state.log.replication.factor`` 3 / ``transaction.state.log.min.isr`` 2, capped by the
brokers): a creation with less is refused, whoever asks (the facade, a Kafka CreateTopics)."""
from __future__ import annotations

import random
from typing import Any

import pytest

from pylog.cluster import Cluster
from pylog.errors import InvalidConfigurationError
from pylog.replication.controller import Controller, MetadataStore, TopicConfig, transaction_state_replication
from pylog.replication.messages import BrokerHeartbeat
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC


def controller(brokers: Any) -> Any:
    store = MetadataStore(list(brokers), random.Random(1))
    assert store.try_claim(0, 0, 1_000)
    c = Controller(0, store, session_timeout_ms=1_000, now_ms=0)
    for b in brokers:
        c.handle(b, BrokerHeartbeat(b, 1), 0)
    return store, c


def test_defaults_follow_the_brokers() -> None:
    assert [transaction_state_replication(n) for n in (1, 2, 3, 5)] == [(1, 1), (2, 1), (3, 2), (3, 2)]


def test_a_creation_below_the_rule_is_refused() -> None:
    store, c = controller((0, 1, 2, 3, 4))
    with pytest.raises(InvalidConfigurationError, match="min_insync_replicas >= 2.*transaction states"):
        c.create_topic(TopicConfig(TRANSACTION_STATE_TOPIC, 1, 3, 1))
    with pytest.raises(InvalidConfigurationError, match="replication_factor >= 3"):
        c.create_topic(TopicConfig(TRANSACTION_STATE_TOPIC, 1, 2, 2))
    assert TRANSACTION_STATE_TOPIC not in store.topics
    c.create_topic(TopicConfig(TRANSACTION_STATE_TOPIC, 1, 4, 2))  # more is fine
    assert store.partitions[(TRANSACTION_STATE_TOPIC, 0)].min_insync_replicas == 2


def test_two_brokers_allow_rf_2_and_min_isr_1() -> None:
    store, c = controller((0, 1))
    with pytest.raises(InvalidConfigurationError, match="replication_factor >= 2"):
        c.create_topic(TopicConfig(TRANSACTION_STATE_TOPIC, 1, 1, 1))
    c.create_topic(TopicConfig(TRANSACTION_STATE_TOPIC, 1, 2, 1))


def test_a_real_cluster_refuses_a_lone_replica_and_creates_it_right(tmp_path: Any) -> None:
    c = Cluster(tmp_path, brokers=3, seed=3)
    try:
        with pytest.raises(InvalidConfigurationError, match="__transaction_state"):
            c.create_topic(TRANSACTION_STATE_TOPIC, partitions=2, replication_factor=1)
        c.ensure_transaction_state_topic()
        cfg = c.store.topics[TRANSACTION_STATE_TOPIC]
        assert (cfg.replication_factor, cfg.min_insync_replicas) == (3, 2)
        assert all(len(row.replicas) == 3 for row in c.describe(TRANSACTION_STATE_TOPIC))
    finally:
        c.close()
