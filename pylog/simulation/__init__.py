"""Seeded fault simulations of a :class:`pylog.Cluster`, with invariant checks after every step and a trace.

>>> import tempfile
>>> from pylog.simulation import SimConfig, Simulation
>>> result = Simulation(tempfile.mkdtemp(), SimConfig(seed=7, duration_ms=5_000)).run()
>>> result.ok
True

A :class:`Simulation` builds a simulated cluster (virtual time, seeded
network and disks: see :mod:`pylog.cluster`) with ``acks=all`` producers and
one consumer, then runs random *steps* until ``duration_ms`` of virtual time
(or ``steps`` steps) have passed. Each step picks one action with the
configured per-step probabilities - a produce burst (futures left in flight),
a hard crash, a clean (controlled) stop, a restart, a two-way or one-way
network partition, a heal, a slow broker, a failing disk, failing writes of the
controller's metadata file (``metadata_fail_rate``), and (rates 0 by default) a dropped
connection (everything in flight on it lost, both ends reconnect), a cut between a client and
a broker, an asynchronous commit of the consumer's positions - then runs 5 ms to 2 s of virtual
time and checks every invariant in :data:`INVARIANTS`. Every value sent is unique
(``s<seed>-<n>``), so a value at two offsets is a duplicate; the producer is
idempotent unless ``idempotent=False``.

Committed offsets (``commits-never-move-back``): after each step, for every
group and partition, the offset held by its *serving* coordinator (the broker
leading the group's ``__consumer_offsets`` partition at the controller's
current leader epoch) must be at least the highest any serving coordinator
held before. The rule has one exception, which the simulation never uses:
a user may commit a lower offset on purpose (``commit(offsets)`` after
``seek``, or an admin reset); the consumer here only commits its positions.

Crashes lose every byte not fsynced, so a new crash or stop is only injected
while every broker is up and every ISR is full: at most one replica is ever
missing from a write's ISR, within the ``RF - min ISR`` failures under which
Kafka promises that no acknowledged ``acks=all`` write is lost. Network
partitions (which lose no data) may happen at any time.

At the end the network heals, every broker restarts, every pending send
completes, and a fresh consumer reads each partition to its HW: every
acknowledged record must be there at its acknowledged offset, with no gaps,
and every record the consumer saw during the run must still be there.

With ``trace=True`` the run also records a :class:`Trace`: each replica's LEO
and HW every ``sample_ms`` of virtual time, the controller's ISR and leader,
leader changes with their epoch, and fault events - what ``pylog sim --plot``
draws (:func:`plot_trace`).

With ``txn_rate`` > 0 a transactional producer (begin, sends, commit or abort) and a
read_committed consumer join, and two more invariants are checked after every step:
``read-committed-only`` and ``transactions-whole`` (:mod:`.txn`: the oracle reads each leader's raw
log - batch headers and markers).

Only the cluster's public API is driven; brokers' replica managers are read,
never changed. A known bug (``bug=``, :mod:`.bugs`) is a strategy handed to
the cluster, never a patch.

The package: :mod:`.config` (:class:`SimConfig`), :mod:`.driver`
(:class:`Simulation`: the cluster, the fault steps, the settle phase),
:mod:`.invariants` (:data:`INVARIANTS` and their checker), :mod:`.bugs`,
:mod:`.trace` (:class:`Trace`), :mod:`.txn` (the transactions oracle and client) and :mod:`.plot` (:func:`plot_trace`; matplotlib
is imported only when drawing). It sits on the facade floor (docs/design.md):
it drives :class:`pylog.Cluster` and reads replication state; nothing below
imports it.

Complexity: O(steps x partitions x brokers) checks plus the cluster's own work;
the replica-agreement check reads every batch below each HW once per step.
Durability: the cluster's files live under ``path`` (simulated disks: a crash
drops unsynced bytes from them).
Thread-safety: none; a simulation runs on the calling thread only.
"""
from __future__ import annotations

from pylog.simulation.bugs import BUGS, KNOWN_BUGS, Bug
from pylog.simulation.config import SimConfig
from pylog.simulation.driver import SimResult, Simulation
from pylog.simulation.invariants import INVARIANTS, SimulationViolation, Violation
from pylog.simulation.plot import flag_runs as _runs  # the name tests/unit/test_cli_sim.py imports
from pylog.simulation.plot import partition_sort_key, plot_trace
from pylog.simulation.trace import PartitionTrace, Trace

__all__ = ["BUGS", "Bug", "INVARIANTS", "KNOWN_BUGS", "PartitionTrace", "partition_sort_key", "SimConfig", "SimResult",
           "Simulation", "SimulationViolation", "Trace", "Violation", "plot_trace"]
