"""pytest plugin: a ``pylog_cluster`` fixture giving each test a 3-broker simulated cluster.

Registered as a ``pytest11`` entry point, so installing pylog is enough::

    def test_orders(pylog_cluster):
        pylog_cluster.create_topic("orders", partitions=3, replication_factor=3, min_insync_replicas=2)
        meta = pylog_cluster.producer(acks="all").send("orders", b"v").result()
        pylog_cluster.stop_broker(pylog_cluster.leader_of("orders", meta.partition), clean=False)

The cluster runs on virtual time (blocking calls advance it), so failures,
timeouts and elections take milliseconds of real time. The seed is
``--pylog-seed`` (default 0) or a ``@pytest.mark.pylog_seed(n)`` on the test;
the seed is shown in the test report header so a failure can be replayed.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from pylog.cluster import Cluster


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
