"""tests/sim: make simdriver importable and provide the pylog_cluster fixture.

The fixture normally comes from the ``pylog.testing`` pytest11 entry point;
importing it here keeps these tests working before the package metadata is
reinstalled (``pytest_plugins`` is only allowed in the root conftest).
"""
import os
import sys

from pylog.testing import pylog_cluster  # noqa: F401

sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    config.addinivalue_line("markers", "pylog_seed(n): seed for the pylog_cluster fixture")
