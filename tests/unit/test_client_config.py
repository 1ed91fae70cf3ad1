"""pylog/client/config.py: the clients' option dataclasses, checked in one place."""
from __future__ import annotations

import dataclasses
import inspect

import pytest

from pylog.client.config import (
    CONSUMER_OPTIONS,
    PRODUCER_OPTIONS,
    ConsumerConfig,
    ProducerConfig,
    check_group_instance_id,
    need_int,
)
from pylog.client.consumer import Consumer
from pylog.client.producer import Producer
from pylog.errors import InvalidConfigurationError, InvalidGroupIdError


@pytest.mark.parametrize("client, config", [(Consumer, ConsumerConfig), (Producer, ProducerConfig)])
def test_the_client_signature_is_the_config(client, config):
    """The client's keyword options (what help() and inspect show) are exactly the config's fields, with
    the same defaults: the defaults live in both places, and this keeps them equal."""
    params = {n: p.default for n, p in inspect.signature(client.__init__).parameters.items()
              if p.kind is p.KEYWORD_ONLY}
    fields = {f.name: f.default for f in dataclasses.fields(config) if f.init}
    assert params == fields


def test_option_lists():
    assert set(CONSUMER_OPTIONS) >= {"group_id", "topics", "max_poll_records", "group_instance_id"}
    assert set(PRODUCER_OPTIONS) >= {"acks", "batch_size", "buffer_memory", "compression_level"}
    assert not {n for n in CONSUMER_OPTIONS + PRODUCER_OPTIONS if n.endswith("_fn") or n == "assignors"}


def test_consumer_config_derives_and_freezes():
    c = ConsumerConfig(topics="big", partition_assignment_strategy="cooperative-sticky", max_poll_interval_ms=7)
    assert c.topics == ("big",)  # one str is one topic
    assert c.partition_assignment_strategy == ("cooperative-sticky",)
    assert [a.name for a in c.assignors] == ["cooperative-sticky"]
    assert c.rebalance_timeout_ms == 7
    assert ConsumerConfig(rebalance_timeout_ms=9).rebalance_timeout_ms == 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.group_id = "x"  # type: ignore[misc]


def test_producer_config_derives():
    assert ProducerConfig().acks_value == -1 and ProducerConfig().enable_idempotence is True
    assert ProducerConfig(acks="1").acks_value == 1 and ProducerConfig(acks="1").enable_idempotence is False
    assert ProducerConfig(max_in_flight=6).enable_idempotence is False
    assert ProducerConfig(idempotence=False).enable_idempotence is False
    assert ProducerConfig(compression_type="gzip", compression_level=9).compression_level == 9
    assert ProducerConfig(compression_type="gzip").compression_level is None  # the codec default


@pytest.mark.parametrize("config, options, error, words", [
    (ConsumerConfig, {"bogus": 1}, InvalidConfigurationError, ["bogus", "known options", "max_poll_records"]),
    (ConsumerConfig, {"bootstrap_servers": "x"}, InvalidConfigurationError, ["reads its cluster directly"]),
    (ConsumerConfig, {"session_timeout_ms": True}, InvalidConfigurationError, ["session_timeout_ms", "True"]),
    (ConsumerConfig, {"rebalance_timeout_ms": 0}, InvalidConfigurationError, ["rebalance_timeout_ms"]),
    (ConsumerConfig, {"auto_offset_reset": "middle"}, InvalidConfigurationError, ["auto_offset_reset"]),
    (ConsumerConfig, {"group_id": ""}, InvalidGroupIdError, ["group_id"]),
    (ConsumerConfig, {"group_instance_id": "a"}, InvalidConfigurationError, ["needs a group_id"]),
    (ConsumerConfig, {"partition_assignment_strategy": []}, InvalidConfigurationError, ["at least one"]),
    (ConsumerConfig, {"consumer_timeout_ms": -1}, InvalidConfigurationError, ["consumer_timeout_ms"]),
    (ProducerConfig, {"bogus": 1}, InvalidConfigurationError, ["unknown producer option", "bogus"]),
    (ProducerConfig, {"acks": True}, InvalidConfigurationError, ["acks"]),
    (ProducerConfig, {"batch_size": 10, "buffer_memory": 5}, InvalidConfigurationError, ["buffer_memory (5)"]),
    (ProducerConfig, {"acks": 1, "enable_idempotence": True}, InvalidConfigurationError, ["needs acks='all'"]),
    (ProducerConfig, {"compression_type": "brotli"}, InvalidConfigurationError, ["compression_type"]),
    (ProducerConfig, {"transactional_id": ""}, InvalidConfigurationError, ["transactional_id", "non-empty"]),
    (ProducerConfig, {"transactional_id": 7}, InvalidConfigurationError, ["transactional_id", "7"]),
    (ProducerConfig, {"transactional_id": "t", "enable_idempotence": False}, InvalidConfigurationError,
     ["transactional_id 't'", "enable_idempotence"]),
    (ProducerConfig, {"transactional_id": "t", "acks": 1}, InvalidConfigurationError,
     ["transactional_id 't'", "acks='all'"]),
    (ProducerConfig, {"transactional_id": "t", "max_in_flight": 6}, InvalidConfigurationError,
     ["transactional_id 't'", "max_in_flight <= 5"]),
    (ProducerConfig, {"transactional_id": "t", "transaction_timeout_ms": 0}, InvalidConfigurationError,
     ["transaction_timeout_ms"]),
])
def test_a_bad_option_is_named(config, options, error, words):
    with pytest.raises(error) as info:
        config.from_options(options)
    for w in words:
        assert w in str(info.value)


def test_the_first_bad_option_is_the_one_named():
    """The checks run in the order the constructors always had: a test or user seeing one error sees the
    same one as before the configs moved out."""
    with pytest.raises(InvalidConfigurationError, match="enable_auto_commit"):
        ConsumerConfig(enable_auto_commit=1, max_poll_records=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigurationError, match="acks"):
        ProducerConfig(acks=7, batch_size=0)


def test_a_transactional_producer_is_idempotent():
    """Kafka: a transactional id forces idempotence (acks=all, max in flight <= 5), whatever the defaults."""
    cfg = ProducerConfig(transactional_id="t", idempotence=None, max_in_flight=5)
    assert cfg.enable_idempotence is True and cfg.acks_value == -1 and cfg.transaction_timeout_ms == 60_000
    assert ProducerConfig(transactional_id="t", enable_idempotence=True).enable_idempotence is True


def test_shared_checks():
    need_int("x", 3, 3)
    with pytest.raises(InvalidConfigurationError, match="x must be an int >= 4, got 3"):
        need_int("x", 3, 4)
    check_group_instance_id(None, None)
    with pytest.raises(InvalidConfigurationError, match="not legal"):
        check_group_instance_id("a b", "g")
