"""Cluster.consumer() checks the consumer's options before it creates ``__consumer_offsets``."""
from __future__ import annotations

import os
from typing import Any, Dict

import pytest

import pylog
from pylog.errors import InvalidConfigurationError, InvalidGroupIdError, PylogError
from pylog.replication.offsets_topic import OFFSETS_TOPIC


def _offsets_dirs(path: str) -> list:
    return sorted(n for b in os.listdir(path) if b.startswith("broker-")
                  for n in os.listdir(os.path.join(path, b)) if n.startswith(OFFSETS_TOPIC))


@pytest.mark.parametrize("kwargs, error", [
    ({"bogus_option": 1}, InvalidConfigurationError),
    ({"auto_offset_reset": "middle"}, InvalidConfigurationError),
    ({"session_timeout_ms": 0}, InvalidConfigurationError),
    ({"max_poll_records": "many"}, InvalidConfigurationError),
    ({"partition_assignment_strategy": ["nope"]}, PylogError),
    ({"topics": "orders"}, None),  # a single str is one topic name: valid
])
def test_a_bad_option_leaves_no_offsets_topic_behind(tmp_path, kwargs: Dict[str, Any], error: Any) -> None:
    path = str(tmp_path)
    with pylog.Cluster(path, brokers=1, seed=3) as c:
        c.create_topic("orders", partitions=1, replication_factor=1)
        if error is None:
            c.consumer(group_id="g", **kwargs).close()
            assert OFFSETS_TOPIC in c.store.topics
            return
        with pytest.raises(error):
            c.consumer(group_id="g", **kwargs)
        assert OFFSETS_TOPIC not in c.store.topics
        assert _offsets_dirs(path) == []
        # The cluster still works, and a good consumer then creates the topic.
        c.consumer(group_id="g", topics=["orders"]).close()
        assert OFFSETS_TOPIC in c.store.topics


def test_a_bad_group_id_or_pattern_leaves_nothing_behind(tmp_path) -> None:
    path = str(tmp_path)
    with pylog.Cluster(path, brokers=1, seed=4) as c:
        with pytest.raises(InvalidGroupIdError):
            c.consumer(group_id="", topics=["orders"])
        with pytest.raises(Exception):
            c.consumer(group_id="g", pattern="orders[")  # not a regex
        assert OFFSETS_TOPIC not in c.store.topics
        assert _offsets_dirs(path) == []
        assert c._clients == []
