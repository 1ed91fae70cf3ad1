"""Shared fixtures of the wire-protocol tests: a real-time cluster with Kafka listeners on loopback."""
from __future__ import annotations

import pytest

import pylog


@pytest.fixture
def kcluster(tmp_path):
    """A 3-broker cluster listening on free loopback ports."""
    c = pylog.Cluster(tmp_path / "c", brokers=3, listen="127.0.0.1:0")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def kcluster1(tmp_path):
    """A 1-broker cluster listening on a free loopback port."""
    c = pylog.Cluster(tmp_path / "c", brokers=1, listen="127.0.0.1:0")
    try:
        yield c
    finally:
        c.close()


def pytest_configure(config):
    # kafka-python 3.0 loads its JSON schemas with importlib.resources.read_text/open_text (deprecated in 3.11)
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")
