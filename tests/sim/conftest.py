"""tests/sim: make simdriver importable.

The ``pylog_cluster`` fixture comes from the ``pylog.testing`` pytest11 entry
point that ``pip install`` registers, exactly as a user's test suite gets it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    config.addinivalue_line("markers", "pylog_seed(n): seed for the pylog_cluster fixture")
