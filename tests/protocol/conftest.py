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
