"""pytest plugin: a ``pylog_cluster`` fixture giving each test a 3-broker simulated cluster, and a
``pylog_kafka`` fixture giving it a real-time 3-broker cluster that real Kafka clients connect to.

Registered as a ``pytest11`` entry point, so installing pylog is enough::

    def test_orders(pylog_cluster):
        pylog_cluster.create_topic("orders", partitions=3, replication_factor=3, min_insync_replicas=2)
        meta = pylog_cluster.producer(acks="all").send("orders", b"v").result()
        pylog_cluster.stop_broker(pylog_cluster.leader_of("orders", meta.partition), clean=False)

The cluster runs on virtual time (blocking calls advance it), so failures,
timeouts and elections take milliseconds of real time. The seed is
``--pylog-seed`` (default 0) or a ``@pytest.mark.pylog_seed(n)`` on the test;
the seed is shown in the test report header so a failure can be replayed.

``pylog_kafka`` is for code that uses a Kafka client library (kafka-python,
confluent-kafka, aiokafka, ...): point it at ``pylog_kafka.bootstrap_servers``::

    def test_billing(pylog_kafka):
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": pylog_kafka.bootstrap_servers})
        p.produce("orders", b"v"); p.flush()         # acks=all: in the ISR when flush returns
        assert pylog_kafka.describe("orders")[0].high_watermark == 1

It runs in real time on loopback ports (docs/kafka-protocol.md); topics are
auto-created as Kafka does, and ``__consumer_offsets`` has
``PYLOG_KAFKA_OFFSETS_PARTITIONS`` (5) partitions so the first group is
ready in a fraction of a second.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from pylog.cluster import Cluster

#: ``__consumer_offsets`` partitions in a ``pylog_kafka`` cluster (Kafka's default 50 takes seconds to create)
PYLOG_KAFKA_OFFSETS_PARTITIONS = 5


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pylog")
    group.addoption("--pylog-seed", type=int, default=0, help="seed of the pylog_cluster fixture's simulation (default 0)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pylog_seed(n): seed for the pylog_cluster fixture")


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("--pylog-seed", default=0)
    return f"pylog: pylog_cluster simulations use seed {seed}"


@pytest.fixture
def pylog_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-broker simulated :class:`pylog.Cluster` in a fresh directory; closed after the test."""
    marker = request.node.get_closest_marker("pylog_seed")
    seed = int(marker.args[0]) if marker is not None else int(request.config.getoption("--pylog-seed", default=0) or 0)
    cluster = Cluster(tmp_path_factory.mktemp("pylog-cluster"), brokers=3, seed=seed)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pylog_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A real-time 3-broker :class:`pylog.Cluster` listening for Kafka clients on 127.0.0.1 (one free
    port per broker; ``.bootstrap_servers``), in a fresh directory; closed after the test."""
    cluster = Cluster(tmp_path_factory.mktemp("pylog-kafka"), brokers=3, listen="127.0.0.1:0")
    cluster.offsets_topic_partitions = PYLOG_KAFKA_OFFSETS_PARTITIONS
    try:
        yield cluster
    finally:
        cluster.close()
