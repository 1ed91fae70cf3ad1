"""The randomized test driver: :mod:`pylog.simulation` with the test suite's replay command.

``run_seed(path, seed)`` runs a 3-broker simulated cluster, topic ``sim``
with RF 3 and ``min_insync_replicas=2``, 30 random steps (produce bursts,
crashes, clean stops, restarts, network partitions, slow brokers), checking
every invariant of :data:`pylog.simulation.INVARIANTS` after every step, and
stops at the first violation with a :class:`Violation` whose message ends in
a one-line replay command. The number of partitions (1 or 2), the message
loss rate and the network latency are drawn from the seed.

``run_seed(path, seed, mix="clients")`` is issue 14's mix (:func:`clients_config_for`): besides those
faults, dropped connections, clients cut from brokers, extra asynchronous commits, short request and
delivery timeouts (so idempotent batches fail with unknown outcomes under partitions), and every odd seed
a 5-broker cluster with RF 5 and ``min_insync_replicas=3``.

``pylog sim`` runs the same simulation from the command line (docs/cli.md).
"""
from __future__ import annotations

from typing import Dict

from pylog.simulation import SimConfig, Simulation, SimulationViolation

TOPIC = "sim"


class Violation(AssertionError):
    pass


MIXES = ("classic", "clients")


def replay_command(seed: int, disk_fail_rate: float = 0.0, metadata_fail_rate: float = 0.0,
                   mix: str = "classic") -> str:
    rate = f"PYLOG_SIM_DISK_FAIL_RATE={disk_fail_rate:g} " if disk_fail_rate else ""
    if metadata_fail_rate:
        rate += f"PYLOG_SIM_METADATA_FAIL_RATE={metadata_fail_rate:g} "
    which = f"PYLOG_SIM_MIX={mix} " if mix != "classic" else ""
    return (f"{which}{rate}PYLOG_SIM_SEED={seed} .venv/bin/python -m pytest "
            f"tests/sim/test_random_sim.py::test_replay_seed -q")


def config_for(seed: int, *, steps: int = 30, partitions: int = 0, disk_fail_rate: float = 0.0,
               metadata_fail_rate: float = 0.0) -> SimConfig:
    """The test driver's configuration: ``partitions``, loss and latency drawn from the seed when not given."""
    return SimConfig(seed=seed, brokers=3, topics=(TOPIC,), partitions=partitions, rf=3, min_isr=2,
                     duration_ms=None, steps=steps, loss=None, max_latency_ms=None, disk_fail_rate=disk_fail_rate,
                     metadata_fail_rate=metadata_fail_rate)


def clients_config_for(seed: int, *, steps: int = 40, disk_fail_rate: float = 0.0) -> SimConfig:
    """Issue 14's mix: network faults aimed at the clients, commits, short timeouts; odd seeds 5 brokers."""
    five = seed % 2 == 1
    return SimConfig(seed=seed, brokers=5 if five else 3, topics=(TOPIC,), partitions=0, rf=5 if five else 3,
                     min_isr=3 if five else 2, duration_ms=None, steps=steps, loss=None, max_latency_ms=None,
                     produce_rate=0.28, crash_rate=0.06, stop_rate=0.03, restart_rate=0.12, partition_rate=0.08,
                     heal_rate=0.10, slow_rate=0.03, disk_fail_rate=disk_fail_rate, drop_rate=0.06,
                     client_cut_rate=0.06, commit_rate=0.15, request_timeout_ms=1_500, delivery_timeout_ms=5_000,
                     auto_commit_interval_ms=300)


def run_seed(path: str, seed: int, *, steps: int = 30, partitions: int = 0,
             disk_fail_rate: float = 0.0, metadata_fail_rate: float = 0.0, mix: str = "classic") -> Dict[str, int]:
    """Run one seed; return its counters (crashes, stops, partitions, acked, ...); raise Violation on failure."""
    if mix == "clients":
        cfg = clients_config_for(seed, disk_fail_rate=disk_fail_rate)
        cfg.metadata_fail_rate = metadata_fail_rate
    elif mix == "classic":
        cfg = config_for(seed, steps=steps, partitions=partitions, disk_fail_rate=disk_fail_rate,
                         metadata_fail_rate=metadata_fail_rate)
    else:
        raise ValueError(f"unknown simulation mix {mix!r}; known: {', '.join(MIXES)}")
    sim = Simulation(path, cfg, stop_on_violation=True)
    try:
        return sim.run().stats
    except SimulationViolation as exc:
        raise Violation(f"{exc}\nreplay: {replay_command(seed, disk_fail_rate, metadata_fail_rate, mix)}") from exc
