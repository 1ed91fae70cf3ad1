"""The random simulation with a transactional producer and a read_committed consumer (issue 17).

Issue 14's client-fault mix (dropped connections, clients cut from brokers,
short request and delivery timeouts, crashes, clean stops, network partitions,
slow brokers; every odd seed 5 brokers with RF 5 / ``min_insync_replicas=3``)
over two topics of two partitions, plus transactional steps
(``SimConfig.txn_rate``, :class:`pylog.simulation.txn.TxnActor`): a
transaction begins with a few records to random partitions of both topics,
gets more, then commits or aborts; a commit that cannot finish within
``max_block_ms`` is called again later; a fenced producer is replaced by one
with the same transactional id. Every invariant of
:data:`pylog.simulation.INVARIANTS` is checked after every step, among them:

* ``read-committed-only``: the read_committed consumer is never handed a
  record of an aborted or open transaction (judged on the leader's raw log:
  batch headers and COMMIT/ABORT markers) nor one at or above the LSO its fetch reported;
* ``transactions-whole``: a transaction it saw any record of is committed in
  every partition it wrote, and, once the consumer is past its marker in a
  partition, was read whole there; at the end a fresh read_committed consumer
  reads every committed transaction whole, every aborted one not at all, and
  exactly the log's committed view.

Replay one seed::

    PYLOG_TXN_SIM_SEED=300017 .venv/bin/python -m pytest tests/sim/test_transactions_random_sim.py::test_replay_seed -q

Soak (1,000 seeds from 300,000; ``PYLOG_SOAK_SEEDS`` / ``PYLOG_SOAK_START`` change the range)::

    PYLOG_SOAK=1 .venv/bin/python -m pytest tests/sim/test_transactions_random_sim.py -m soak -q
"""
from __future__ import annotations

import os
import shutil
from collections import Counter
from typing import Dict

import pytest

from pylog.simulation import SimConfig, Simulation, SimulationViolation

TOPICS = ("sim", "sim2")
FIRST = 300_000


def replay_command(seed: int) -> str:
    return (f"PYLOG_TXN_SIM_SEED={seed} .venv/bin/python -m pytest "
            f"tests/sim/test_transactions_random_sim.py::test_replay_seed -q")


def txn_config_for(seed: int, *, steps: int = 40) -> SimConfig:
    five = seed % 2 == 1
    return SimConfig(seed=seed, brokers=5 if five else 3, topics=TOPICS, partitions=2, rf=5 if five else 3,
                     min_isr=3 if five else 2, duration_ms=None, steps=steps, loss=None, max_latency_ms=None,
                     produce_rate=0.14, crash_rate=0.06, stop_rate=0.03, restart_rate=0.12, partition_rate=0.08,
                     heal_rate=0.10, slow_rate=0.03, drop_rate=0.06, client_cut_rate=0.06, commit_rate=0.06,
                     txn_rate=0.25, request_timeout_ms=1_500, delivery_timeout_ms=5_000, auto_commit_interval_ms=300)


class Violation(AssertionError):
    pass


def run_seed(path: str, seed: int) -> Dict[str, int]:
    sim = Simulation(path, txn_config_for(seed), stop_on_violation=True)
    try:
        return sim.run().stats
    except SimulationViolation as exc:
        raise Violation(f"{exc}\nreplay: {replay_command(seed)}") from exc


CHUNK = 10
DEFAULT_SEEDS = 30


@pytest.mark.parametrize("first", range(FIRST, FIRST + DEFAULT_SEEDS, CHUNK))
def test_random_simulation_transactions(tmp_path, first):
    totals: Counter = Counter()
    for seed in range(first, first + CHUNK):
        totals.update(run_seed(str(tmp_path / f"seed-{seed}"), seed))
    # the transactions, their outcomes and the reads really happened
    assert totals["txn_committed"] >= CHUNK and totals["txn_aborted"] >= 1, totals
    assert totals["rc_seen"] > 0 and totals["crashes"] + totals["stops"] >= CHUNK // 2, totals


def test_same_seed_replays_exactly(tmp_path):
    a = run_seed(str(tmp_path / "a"), FIRST + 7)
    b = run_seed(str(tmp_path / "b"), FIRST + 7)
    assert a == b and a["txn_records"] > 0


def _caught(tmp_path, seeds, invariant):
    caught = []
    for seed in seeds:
        try:
            run_seed(str(tmp_path / f"m{seed}"), seed)
        except Violation as exc:
            caught.append(str(exc))
            if f"[{invariant}]" in str(exc):
                break
    return caught


def test_checker_catches_a_consumer_that_keeps_aborted_batches(tmp_path, monkeypatch):
    """Mutation check of read-committed-only: a read_committed consumer whose filter keeps aborted
    transactional batches (it still stops at the LSO) is caught, with the replay command."""
    from pylog.client.txn_filter import ReadCommittedFilter

    monkeypatch.setattr(ReadCommittedFilter, "keep", lambda self, batch: not batch.is_control)
    caught = _caught(tmp_path, range(FIRST, FIRST + 40), "read-committed-only")
    assert any("[read-committed-only]" in m and "aborted in the log" in m and "PYLOG_TXN_SIM_SEED=" in m
               for m in caught), caught


def test_checker_catches_a_leader_that_serves_open_transactions(tmp_path, monkeypatch):
    """Mutation check of read-committed-only: a leader whose LSO is its HW (open transactions served to
    read_committed fetches) is caught: the record's transaction is open on the leader."""
    from pylog.storage.log import Log

    monkeypatch.setattr(Log, "last_stable_offset", lambda self, hw: min(hw, self.log_end_offset))
    caught = _caught(tmp_path, range(FIRST, FIRST + 40), "read-committed-only")
    assert any("[read-committed-only]" in m and ("still open on the leader" in m or "is open in the log" in m)
               for m in caught), caught


def test_checker_catches_a_transaction_committed_in_one_partition_only(tmp_path, monkeypatch):
    """Mutation check of transactions-whole: a coordinator that writes COMMIT to a transaction's first
    partition and ABORT to the others is caught."""
    import dataclasses

    from pylog.runtime.txn_host import TxnHost

    orig = TxnHost._act

    def split(self, o, now_ms, out, replied=False):
        if len(o.markers) > 1 and o.markers[0].committed:
            first, *rest = sorted(o.markers, key=lambda m: (m.topic, m.partition))
            o = dataclasses.replace(o, markers=(first,) + tuple(dataclasses.replace(m, committed=False) for m in rest))
        return orig(self, o, now_ms, out, replied)

    monkeypatch.setattr(TxnHost, "_act", split)
    caught = _caught(tmp_path, range(FIRST, FIRST + 40), "transactions-whole")
    assert any("[transactions-whole]" in m for m in caught), caught


def test_replay_seed(tmp_path):
    seed = os.environ.get("PYLOG_TXN_SIM_SEED")
    if seed is None:
        pytest.skip("set PYLOG_TXN_SIM_SEED=<seed> to replay one simulation")
    run_seed(str(tmp_path / "replay"), int(seed))


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(os.environ.get("PYLOG_SOAK") != "1", reason="soak run: set PYLOG_SOAK=1")
def test_soak_random_simulation_transactions(tmp_path):
    start = int(os.environ.get("PYLOG_SOAK_START", str(FIRST)))
    count = int(os.environ.get("PYLOG_SOAK_SEEDS", "1000"))
    for seed in range(start, start + count):
        path = tmp_path / f"seed-{seed}"
        run_seed(str(path), seed)
        shutil.rmtree(path, ignore_errors=True)
