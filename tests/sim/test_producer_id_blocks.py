"""Producer-id blocks on demand (KIP-730's AllocateProducerIds) on the seeded simulator: a broker
whose block is used up (or that never got one: a LeaderAndIsr lost on a lossy network) asks the
controller for the next block, and no producer id is ever handed out twice - an invariant over
every InitProducerId answer of a run, idempotent and transactional, across controller failovers
(clean and hard stops of the controller's broker) on a 10% lossy network.

The blocks are made tiny (``PRODUCER_ID_BLOCK_SIZE``) so that a handful of producers use them up.
A failing seed replays with ``pytest tests/sim/test_producer_id_blocks.py -k "<seed>"``.
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, Hashable, List, Set, Tuple

import pytest

from pylog.cluster import Cluster
from pylog.replication import controller as controller_mod
from pylog.replication.messages import InitProducerIdRequest, InitProducerIdResponse


@pytest.fixture
def small_blocks(monkeypatch: Any) -> int:
    monkeypatch.setattr(controller_mod, "PRODUCER_ID_BLOCK_SIZE", 3)
    return 3


class AnswerLog:
    """Every InitProducerId request and answer the brokers send or receive over the (simulated) network."""

    def __init__(self, c: Cluster):
        self.requests: Dict[Tuple[Hashable, Hashable, int], Any] = {}  # (client, broker, corr) -> transactional id
        self.answers: List[Tuple[Any, int, int]] = []  # (owner, producer id, epoch)
        inner = c.transport.send

        def send(src: Hashable, dst: Hashable, msg: Any) -> None:
            if isinstance(msg, InitProducerIdRequest):
                self.requests[(src, dst, msg.correlation_id)] = msg.transactional_id
            elif isinstance(msg, InitProducerIdResponse) and msg.error is None:
                tid = self.requests.get((dst, src, msg.correlation_id))
                # an idempotent answer is a fresh id for that request alone; a transactional id may
                # get its own producer id again (an epoch bump)
                owner = ("txn", tid) if tid is not None else ("idempotent", dst, src, msg.correlation_id)
                self.answers.append((owner, msg.producer_id, msg.producer_epoch))
            inner(src, dst, msg)

        c.transport.send = send  # type: ignore[method-assign]

    def check(self, c: Cluster) -> None:
        owners: Dict[int, Set[Any]] = {}
        for owner, pid, _ in self.answers:
            owners.setdefault(pid, set()).add(owner)
        twice = {pid: sorted(map(str, o)) for pid, o in owners.items() if len(o) > 1}
        assert not twice, f"producer ids handed out to more than one producer: {twice}"
        assert all(0 <= pid < c.store.next_producer_id for pid in owners), (sorted(owners), c.store.next_producer_id)


def test_a_coordinator_whose_block_is_used_up_gets_the_next_one(tmp_path: Any, small_blocks: int) -> None:
    """12 transactional ids over 3 coordinators whose pushed blocks hold 3 ids each: at least one
    coordinator hands out more ids than its first block holds. Without AllocateProducerIds it answers
    BrokerNotAvailableError until init_transactions() times out."""
    c = Cluster(tmp_path, brokers=3, seed=7)
    try:
        answers = AnswerLog(c)
        c.create_topic("out", partitions=1, replication_factor=3, min_insync_replicas=2)
        producers = [c.producer(transactional_id=f"copier-{i}") for i in range(12)]
        for p in producers:
            p.init_transactions()
        pids = [p.producer_id for p in producers]  # type: ignore[attr-defined]
        assert len(set(pids)) == 12, pids
        assert max(pids) >= 3 * small_blocks  # some broker took a block beyond the three pushed ones
        last = producers[-1]
        last.begin_transaction()
        assert last.send("out", b"v").result().offset == 0
        last.commit_transaction()
        for p in producers:
            p.close()
        answers.check(c)
        c._check()
    finally:
        c.close()


def test_idempotent_producers_beyond_every_pushed_block_get_ids(tmp_path: Any, small_blocks: int) -> None:
    """More idempotent producers than the pushed blocks of all brokers hold: each gets a distinct id
    (without AllocateProducerIds every broker answered BrokerNotAvailableError once its block was used)."""
    c = Cluster(tmp_path, brokers=3, seed=11)
    try:
        answers = AnswerLog(c)
        c.create_topic("out", partitions=1, replication_factor=3, min_insync_replicas=2)
        for i in range(4 * 3 * small_blocks):
            p = c.producer(retry_backoff_ms=20)
            p.send("out", b"%d" % i).result()
            p.close()
        assert len(answers.answers) == 4 * 3 * small_blocks
        answers.check(c)
    finally:
        c.close()


def _failover_run(tmp_path: Any, seed: int) -> None:
    rng = random.Random(seed)
    c = Cluster(tmp_path, brokers=3, seed=seed, loss=0.1, request_timeout_ms=1_000)
    try:
        answers = AnswerLog(c)
        c.create_topic("out", partitions=2, replication_factor=3, min_insync_replicas=2)
        for rnd in range(4):
            for i in range(rng.randrange(1, 5)):
                p = c.producer(request_timeout_ms=500, retry_backoff_ms=20)
                p.send("out", b"r%d-%d" % (rnd, i)).result()
                p.close()
            for i in range(rng.randrange(1, 4)):
                tp = c.producer(transactional_id=f"t{rng.randrange(6)}", request_timeout_ms=500, retry_backoff_ms=20)
                tp.init_transactions()
                tp.close()
            cid = c.store.controller_id
            assert cid is not None
            c.stop_broker(cid, clean=rng.random() < 0.5)
            c.scheduler.wait_until(lambda: c.store.controller_id not in (None, cid), 30_000)
            c.advance(rng.randrange(0, 2_000))
            c.start_broker(cid)
            c.advance(rng.randrange(500, 3_000))
        assert c.store.controller_epoch >= 5  # four failovers happened
        answers.check(c)
    finally:
        c.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_producer_id_is_handed_out_twice_across_controller_failovers(tmp_path: Any, small_blocks: int,
                                                                        seed: int) -> None:
    """Rounds of idempotent producers and transactional inits (some ids again: epoch bumps) on a 10%
    lossy network, each round ending with the controller's broker stopped (clean or hard) and
    restarted: every InitProducerId answer names an id no other producer got, and below the
    store's next producer id."""
    _failover_run(tmp_path, seed)


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get("PYLOG_SOAK"), reason="soak run: set PYLOG_SOAK=1")
def test_no_producer_id_is_handed_out_twice_soak(tmp_path: Any, small_blocks: int) -> None:
    """PYLOG_SOAK=1 .venv/bin/python -m pytest tests/sim/test_producer_id_blocks.py -m soak (seeds 100..199)."""
    for seed in range(100, 200):
        try:
            _failover_run(tmp_path / str(seed), seed)
        except Exception as exc:
            raise AssertionError(f"seed {seed}: {type(exc).__name__}: {exc}") from exc
