"""The randomized test driver: :mod:`pylog.simulation` with the test suite's replay command.

``run_seed(path, seed)`` runs a 3-broker simulated cluster, topic ``sim``
with RF 3 and ``min_insync_replicas=2``, 30 random steps (produce bursts,
crashes, clean stops, restarts, network partitions, slow brokers), checking
every invariant of :data:`pylog.simulation.INVARIANTS` after every step, and
stops at the first violation with a :class:`Violation` whose message ends in
a one-line replay command. The number of partitions (1 or 2), the message
loss rate and the network latency are drawn from the seed.

``pylog sim`` runs the same simulation from the command line (docs/cli.md).
"""
from __future__ import annotations

from typing import Dict

from pylog.simulation import SimConfig, Simulation, SimulationViolation

TOPIC = "sim"


class Violation(AssertionError):
    pass


def replay_command(seed: int, disk_fail_rate: float = 0.0, metadata_fail_rate: float = 0.0) -> str:
    rate = f"PYLOG_SIM_DISK_FAIL_RATE={disk_fail_rate:g} " if disk_fail_rate else ""
    if metadata_fail_rate:
        rate += f"PYLOG_SIM_METADATA_FAIL_RATE={metadata_fail_rate:g} "
    return f"{rate}PYLOG_SIM_SEED={seed} .venv/bin/python -m pytest tests/sim/test_random_sim.py::test_replay_seed -q"


def config_for(seed: int, *, steps: int = 30, partitions: int = 0, disk_fail_rate: float = 0.0,
               metadata_fail_rate: float = 0.0) -> SimConfig:
    """The test driver's configuration: ``partitions``, loss and latency drawn from the seed when not given."""
    return SimConfig(seed=seed, brokers=3, topics=(TOPIC,), partitions=partitions, rf=3, min_isr=2,
                     duration_ms=None, steps=steps, loss=None, max_latency_ms=None, disk_fail_rate=disk_fail_rate,
                     metadata_fail_rate=metadata_fail_rate)


def run_seed(path: str, seed: int, *, steps: int = 30, partitions: int = 0,
             disk_fail_rate: float = 0.0, metadata_fail_rate: float = 0.0) -> Dict[str, int]:
    """Run one seed; return its counters (crashes, stops, partitions, acked, ...); raise Violation on failure."""
    sim = Simulation(path, config_for(seed, steps=steps, partitions=partitions, disk_fail_rate=disk_fail_rate,
                                      metadata_fail_rate=metadata_fail_rate),
                     stop_on_violation=True)
    try:
        return sim.run().stats
    except SimulationViolation as exc:
        raise Violation(f"{exc}\nreplay: {replay_command(seed, disk_fail_rate, metadata_fail_rate)}") from exc
