"""Shared test set-up.

Hypothesis profiles, chosen with the environment variable HYPOTHESIS_PROFILE:

* ``fast`` (default): ~100 examples per property, for the everyday run;
* ``ci``: 500 examples, no deadline, derandomized so a CI failure replays;
* ``exhaustive``: 10,000 examples, for an opt-in soak
  (``HYPOTHESIS_PROFILE=exhaustive .venv/bin/python -m pytest tests/property``).
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("fast", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=500, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "exhaustive", max_examples=10_000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))
