"""Kafka's transactions system test (tests/kafkatest/tests/core/transactions_test.py) on the seeded simulator.

3 brokers; input topic of 2 partitions and output topic of 3, RF 3,
``min_insync_replicas=2``. The input is written first (an idempotent
producer). Several *copiers* (Kafka's ``TransactionalMessageCopier``) then
consume-transform-produce: each is a consumer of one group reading
``read_committed`` with auto-commit off, and a producer with its own
``transactional_id``; a copier polls up to a few hundred records, begins a
transaction, sends each record to the output, adds the consumer's positions
with ``send_offsets_to_transaction(offsets, consumer.group_metadata())`` and
commits. Some transactions are aborted on purpose (the copier then rewinds to
the group's committed offsets and copies the records again), so the output
holds aborted records a read_committed reader must skip. Meanwhile a
read_committed consumer reads the output.

Faults, at seeded random moments (one broker down at a time, as Kafka's test):

* hard and clean bounces of a broker (the coordinator of a transaction, a
  partition leader or the controller), some landing in the middle of a
  commit (a timer crashes the broker while ``commit_transaction`` waits);
* hard bounces of a copier (its consumer and producer vanish: no LeaveGroup,
  its open transaction stays open) and clean ones (closed), each restarted
  with the same transactional id - ``init_transactions`` fences the old epoch
  and aborts what it left open;
* zombies: a copier is replaced while it still holds an open transaction, and
  the old instance then tries to finish it: it must be refused.

Checks (Kafka's, plus the read side's):

* the committed output, read at the end by a fresh read_committed consumer,
  is exactly the input: same set of values, none twice;
* per-partition order: the records of one input partition that land in one
  output partition are in input order;
* the concurrent read_committed consumer never sees an aborted or open
  record (every record it was handed is committed in the log, which is read
  raw - batch headers and markers, :func:`pylog.simulation.txn.log_outcomes`),
  never a record at or above the LSO its fetch reported nor in a transaction
  still open on the leader when it is handed out, and its records are the
  final reader's at each offset;
* the aborted records really are in the log (so the check is not vacuous),
  and what the final reader reads is exactly the committed view of the raw
  log.

Default suite: a handful of seeds. Soak (``soak`` marker)::

    PYLOG_SOAK=1 .venv/bin/python -m pytest tests/sim/test_transactions_system.py -m soak -q

(1,000 seeds from 500,000; ``PYLOG_SOAK_SEEDS=N`` / ``PYLOG_SOAK_START=S`` change the range.)
A failing seed's message ends with the command that replays it::

    PYLOG_TXN_SEED=17 .venv/bin/python -m pytest tests/sim/test_transactions_system.py::test_replay_seed -q
"""
from __future__ import annotations

import gc
import os
import random
import shutil
from collections import Counter
from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

from pylog.client._node import ClientNode
from pylog.cluster import Cluster
from pylog.errors import ProducerFencedError, PylogError, RequestTimedOutError, UnknownTopicOrPartitionError
from pylog.simulation.txn import ABORTED, COMMITTED, OPEN, PLAIN, TxnReadChecks, leader_log, log_outcomes

IN, OUT = "input-topic", "output-topic"
GROUP = "transactions-test-consumer-group"
IN_PARTS, OUT_PARTS = 2, 3

TP = Tuple[str, int]


def replay_command(seed: int) -> str:
    return (f"PYLOG_TXN_SEED={seed} .venv/bin/python -m pytest "
            f"tests/sim/test_transactions_system.py::test_replay_seed -q")


def value_of(part: int, seq: int) -> bytes:
    return b"%d-%06d" % (part, seq)


def parse(value: bytes) -> Tuple[int, int]:
    p, s = value.split(b"-")
    return int(p), int(s)


def out_partition(value: bytes) -> int:
    """The output partition of an input record: a fixed function of the record (the copier's
    "transform"), so the records of one input partition spread over every output partition."""
    p, s = parse(value)
    return ((s * 2654435761) >> 7 ^ p) % OUT_PARTS


class Copier:
    """Kafka's TransactionalMessageCopier, in two halves the driver interleaves with everything else:
    :meth:`fill` (poll, begin, send) and :meth:`finish` (send the offsets, commit or abort)."""

    def __init__(self, run: "Run", index: int, incarnation: int):
        self.run, self.index, self.incarnation = run, index, incarnation
        self.tid = f"copier-{index}"
        c = run.c
        self.consumer = c.consumer(GROUP, [IN], isolation_level="read_committed", enable_auto_commit=False,
                                   session_timeout_ms=1_500, heartbeat_interval_ms=250, max_poll_interval_ms=10_000,
                                   fetch_max_wait_ms=100,
                                   max_poll_records=run.txn_max, request_timeout_ms=3_000)
        self.producer = c.producer(transactional_id=self.tid, transaction_timeout_ms=20_000, acks="all",
                                   request_timeout_ms=3_000, delivery_timeout_ms=120_000)
        self.wait(self.producer.init_transactions)
        self.open: Optional[Dict[TP, int]] = None  # the open transaction's offsets to commit
        self.sent = 0
        self.alive = True

    def __repr__(self) -> str:
        return f"{self.tid}#{self.incarnation}"

    def wait(self, call: Any, *args: Any) -> None:
        """A blocking transactional call, called again while it times out (``max_block_ms``: Kafka's
        rule - the call goes on, calling it again keeps waiting), five times at most: a stall longer
        than that fails the run as a liveness failure."""
        for attempt in range(5):
            try:
                call(*args)
                return
            except RequestTimedOutError as exc:
                self.run.stats["call_timeouts"] += 1
                self.run.log.append(f"t={self.run.c.now_ms} {self} {call.__name__} timed out ({attempt + 1}): {exc}")
                if attempt == 4:
                    raise

    def fill(self) -> int:
        """Poll and copy what came into a new transaction; the number of records copied."""
        records = self.consumer.poll(0.3)
        if not records:
            return 0
        self.run.log.append(f"t={self.run.c.now_ms} {self} polled {len(records)}: "
                            + ", ".join(f"{tp[1]}@{min(r.offset for r in records if (r.topic, r.partition) == tp)}.."
                                        f"{max(r.offset for r in records if (r.topic, r.partition) == tp)}"
                                        for tp in sorted({(r.topic, r.partition) for r in records}))
                            + f" assignment {sorted(tuple(tp) for tp in self.consumer.assignment())}"
                            + f" generation {self.consumer.group_metadata().generation_id}")
        self.producer.begin_transaction()
        offsets: Dict[TP, int] = {}
        for r in records:
            assert r.topic == IN
            self.producer.send(OUT, r.value, key=r.key, partition=out_partition(r.value))
            offsets[(r.topic, r.partition)] = r.offset + 1
        self.open = offsets
        self.sent = len(records)
        return len(records)

    def finish(self, abort: bool) -> str:
        """Commit (or, ``abort``, abort) the open transaction; what happened."""
        assert self.open is not None
        offsets, self.open = self.open, None
        run = self.run
        if abort:
            self.wait(self.producer.abort_transaction)
            self.rewind()
            run.stats["aborts"] += 1
            return "aborted"
        try:
            meta = self.consumer.group_metadata()
            run.log.append(f"t={run.c.now_ms} {self} sends offsets {sorted(offsets.items())} at generation "
                           f"{meta.generation_id}")
            self.wait(self.producer.send_offsets_to_transaction, offsets, meta)
            self.wait(self.producer.commit_transaction)
        except (ProducerFencedError, RequestTimedOutError):
            raise
        except PylogError as exc:
            # Abortable (the group moved on: CommitFailed; a batch failed): abort and copy again.
            run.log.append(f"{self}: commit failed ({type(exc).__name__}: {exc}); aborting")
            self.wait(self.producer.abort_transaction)
            self.rewind()
            run.stats["failed_commits"] += 1
            return "failed"
        run.log.append(f"t={run.c.now_ms} {self} (producer {self.producer_identity()}) committed {self.sent} records, "
                       f"offsets {sorted(offsets.items())}")
        for tp, off in offsets.items():
            run.progress[tp] = max(run.progress.get(tp, 0), off)
        run.stats["commits"] += 1
        run.stats["copied"] += self.sent
        return "committed"

    def producer_identity(self) -> str:
        txn = getattr(self.producer, "_txn", None)
        return f"{getattr(txn, 'producer_id', '?')}/{getattr(txn, 'producer_epoch', '?')}"

    def rewind(self) -> None:
        """After an abort: every assigned partition back to the group's committed offset (Kafka's
        copier's ``resetToLastCommittedPositions``)."""
        for tp in self.consumer.assignment():
            committed = self.consumer.committed(tp[0], tp[1])
            try:
                if committed is None:
                    self.consumer.seek_to_beginning(tp)
                else:
                    self.consumer.seek(tp[0], tp[1], committed)
            except UnknownTopicOrPartitionError:
                pass  # revoked meanwhile (a rebalance while committed() waited): its next owner starts there

    def crash(self) -> None:
        """Vanish like a killed process: no LeaveGroup, no abort, in-flight requests are lost."""
        self.alive = False
        self.consumer._crash()
        self.producer.close(0)

    def close(self) -> None:
        self.alive = False
        if self.open is not None:
            try:
                self.producer.abort_transaction()
            except PylogError:
                pass
            self.open = None
        self.producer.close()
        self.consumer.close(autocommit=False)


class Run:
    def __init__(self, path: str, seed: int, *, records: int = 3_000, copiers: int = 3):
        # A seed replays the same in a fresh process and after other runs: client node names come from
        # a process-wide counter, and objects of an earlier run collected mid-run change the replay.
        ClientNode._ids = 0
        gc.collect()
        self.seed = seed
        self.rng = random.Random(seed ^ 0x7A5)
        self.c = Cluster(path, brokers=3, seed=seed, session_timeout_ms=2_000, heartbeat_interval_ms=250)
        self.records = records
        self.txn_max = self.rng.choice([100, 200, 300, 500])
        self.n_copiers = copiers
        self.stats: Counter = Counter()
        self.progress: Dict[TP, int] = {}
        self.log: List[str] = []
        self.down: Optional[int] = None
        self.copiers: List[Copier] = []
        self.zombies: List[Copier] = []
        self.incarnations = [0] * copiers

    # -------------------------------------------------------------- set-up
    def start(self) -> None:
        c = self.c
        c.create_topic(IN, partitions=IN_PARTS, replication_factor=3, min_insync_replicas=2)
        c.create_topic(OUT, partitions=OUT_PARTS, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        for i in range(self.records):
            part = i % IN_PARTS
            p.send(IN, value_of(part, i // IN_PARTS), partition=part)
        p.flush()
        p.close()
        self.inputs = {value_of(i % IN_PARTS, i // IN_PARTS) for i in range(self.records)}
        self.in_end = {(IN, q): len([i for i in range(self.records) if i % IN_PARTS == q]) for q in range(IN_PARTS)}
        self.reader = c.consumer(None, [OUT], isolation_level="read_committed", fetch_max_wait_ms=100)
        self.reads = TxnReadChecks("concurrent read_committed consumer")
        self.copiers = [Copier(self, i, 0) for i in range(self.n_copiers)]

    # -------------------------------------------------------------- faults
    def in_sync(self) -> bool:
        c = self.c
        registered = all(c.store.broker_incarnations.get(b) == c.brokers[b].incarnation for b in c.brokers)
        return registered and self.down is None and all(
            set(st.replicas) <= set(st.isr) and st.leader >= 0 for st in c.store.partitions.values())

    def broker_target(self) -> int:
        c = self.c
        choices = [c.store.controller_id, c.leader_of(OUT, self.rng.randrange(OUT_PARTS)),
                   c.leader_of(IN, self.rng.randrange(IN_PARTS)), self.rng.randrange(3)]
        coord = c.store.partitions.get(("__transaction_state", 0))
        if coord is not None:
            choices.append(coord.leader)
        return int(self.rng.choice([b for b in choices if b is not None and b >= 0] or [0]))

    def stop_broker(self, b: int, clean: bool) -> None:
        self.log.append(f"t={self.c.now_ms} stop broker {b} clean={clean}")
        self.c.stop_broker(b, clean=clean)
        self.down = b
        self.stats["clean_bounces" if clean else "hard_bounces"] += 1

    def crash_if_alone(self, b: int) -> None:
        """The timer-driven crash inside a commit: only if it is still the only fault (another stop may
        have come first - two brokers down would leave the ISRs under min_insync_replicas)."""
        if self.down is None and self.in_sync():
            self.stop_broker(b, clean=False)

    def start_broker(self) -> None:
        assert self.down is not None
        self.log.append(f"t={self.c.now_ms} start broker {self.down}")
        self.c.start_broker(self.down)
        self.down = None

    def bounce_copier(self, hard: bool) -> None:
        live = [k for k in self.copiers if k.alive]
        old = self.rng.choice(live)
        self.log.append(f"t={self.c.now_ms} {'hard' if hard else 'clean'} bounce of {old}")
        if hard:
            old.crash()
        else:
            old.close()
        self.replace(old)
        self.stats["copier_hard_bounces" if hard else "copier_clean_bounces"] += 1

    def replace(self, old: Copier) -> Copier:
        self.incarnations[old.index] += 1
        new = Copier(self, old.index, self.incarnations[old.index])  # init_transactions fences the old epoch
        self.copiers[self.copiers.index(old)] = new
        return new

    def make_zombie(self) -> bool:
        """A copier with an open transaction is replaced while it lives on (a long GC pause, a
        partition from the cluster); it is left to try its commit later."""
        holders = [k for k in self.copiers if k.alive and k.open is not None]
        if not holders:
            return False
        old = self.rng.choice(holders)
        self.log.append(f"t={self.c.now_ms} {old} becomes a zombie")
        old.alive = False
        self.replace(old)
        self.zombies.append(old)
        self.stats["zombies"] += 1
        return True

    def zombie_wakes(self) -> None:
        z = self.zombies.pop(0)
        self.log.append(f"t={self.c.now_ms} zombie {z} tries to commit")
        try:
            what = z.finish(abort=False)
        except ProducerFencedError:
            self.stats["zombies_fenced"] += 1
        else:
            assert what != "committed", f"zombie {z} committed a transaction after {z.tid} was initialized again"
        finally:
            z.consumer._crash()
            z.producer.close(0)

    # ---------------------------------------------------------------- run
    def observe(self) -> None:
        self.reader._check()  # nothing handed out at or above the LSO a fetch response reported
        records = self.reader.poll(0.0)
        problems = self.reads.saw(self.c, records)
        assert not problems, problems[0]
        self.stats["observed"] += len(records)

    def done(self) -> bool:
        return all(self.progress.get(tp, 0) >= end for tp, end in self.in_end.items())

    def step(self) -> None:
        rng, c = self.rng, self.c
        roll = rng.random()
        if roll < 0.62:
            k = rng.choice([k for k in self.copiers if k.alive])
            if k.open is None:
                n = k.fill()
                self.log.append(f"t={c.now_ms} {k} fill {n}")
            else:
                crash_mid_commit = self.down is None and self.in_sync() and rng.random() < 0.08
                if crash_mid_commit:
                    b = self.broker_target()
                    c.scheduler.call_later(rng.randint(1, 25), self.crash_if_alone, b)
                try:
                    what = k.finish(abort=rng.random() < 0.15)
                except ProducerFencedError as exc:
                    # e.g. its transaction ran past transaction_timeout_ms and the coordinator aborted
                    # it: as Kafka's copier, it exits and is restarted with the same transactional id
                    what = f"fenced ({exc}); restarted"
                    self.stats["fenced_live"] += 1
                    k.crash()
                    self.replace(k)
                self.log.append(f"t={c.now_ms} {k} {what}")
        elif roll < 0.70:
            if self.down is None and self.in_sync():
                self.stop_broker(self.broker_target(), clean=rng.random() < 0.5)
        elif roll < 0.80:
            if self.down is not None:
                self.start_broker()
        elif roll < 0.85:
            self.bounce_copier(hard=rng.random() < 0.5)
        elif roll < 0.89:
            self.make_zombie()
        elif roll < 0.93:
            if self.zombies:
                self.zombie_wakes()
        else:
            c.advance(rng.choice([50, 300, 1_000]))
        self.observe()

    def run(self, max_steps: int = 1_500) -> None:
        self.start()
        for _ in range(max_steps):
            if self.done() and self.stats["steps"] >= 20:
                break
            self.step()
            self.stats["steps"] += 1
        else:
            raise AssertionError(f"the copiers did not copy the input within {max_steps} steps: committed "
                                 f"{self.progress} of {self.in_end}")
        self.settle()

    def settle(self) -> None:
        c = self.c
        while self.zombies:
            self.zombie_wakes()
        for k in self.copiers:
            if k.open is not None:
                k.finish(abort=False)
            k.close()
        if self.down is not None:
            self.start_broker()
        c.advance(3_000)
        self.observe()
        self.check()

    # -------------------------------------------------------------- checks
    def final_read(self) -> Dict[int, Dict[int, bytes]]:
        c = self.c
        hws = {p.partition: p.high_watermark for p in c.describe(OUT)}
        reader = c.consumer(None, [OUT], isolation_level="read_committed", fetch_max_wait_ms=50)
        got: Dict[int, Dict[int, bytes]] = {q: {} for q in range(OUT_PARTS)}
        checks = TxnReadChecks("final read_committed consumer")
        for _ in range(2_000):
            records = reader.poll(0.2)
            problems = checks.saw(c, records)
            assert not problems, problems[0]
            for r in records:
                got[r.partition][r.offset] = r.value
            if not records and all(reader.position(OUT, q) >= hw for q, hw in hws.items()):
                break
        else:
            raise AssertionError(f"the final reader did not reach the HWs {hws}")
        reader._check()
        reader.close()
        self.final_checks = checks
        return got

    def check(self) -> None:
        c = self.c
        got = self.final_read()
        outcomes = {}
        for q in range(OUT_PARTS):
            p = leader_log(c, (OUT, q))
            assert p is not None, f"no leader for {OUT}-{q} after the settle"
            o = log_outcomes(p.log, p.high_watermark)
            outcomes[q] = o
            assert not o.with_outcome(OPEN), f"{OUT}-{q}: a transaction is still open after every copier closed"
            assert not o.with_outcome(PLAIN), f"{OUT}-{q}: a non-transactional record in the output"
            # the final reader read exactly the committed view of the raw log
            assert got[q] == o.with_outcome(COMMITTED), (
                f"{OUT}-{q}: the read_committed reader's records differ from the log's committed records")
            for checks in (self.reads, self.final_checks):
                bad, partial = checks.check_against((OUT, q), o)
                assert not bad, bad[0]
                assert not partial, partial[0]
            # what the concurrent consumer saw is what the final reader read, at each offset
            for off, v in self.reads.seen.get((OUT, q), {}).items():
                assert got[q].get(off) == v, f"{OUT}-{q} offset {off}: concurrent {v!r}, final {got[q].get(off)!r}"
        values = [v for q in range(OUT_PARTS) for _, v in sorted(got[q].items())]
        counts = Counter(values)
        dups = [v for v, n in counts.items() if n > 1]
        assert not dups, f"{len(dups)} input records copied twice, e.g. {dups[:3]}"
        missing = self.inputs - set(counts)
        extra = set(counts) - self.inputs
        assert not missing and not extra, f"output != input: {len(missing)} missing (e.g. {sorted(missing)[:3]}), " \
                                          f"{len(extra)} unexpected"
        for q in range(OUT_PARTS):
            last: Dict[int, int] = {}
            for off, v in sorted(got[q].items()):
                part, seq = parse(v)
                assert seq > last.get(part, -1), (f"{OUT}-{q} offset {off}: {v!r} after input record "
                                                  f"{part}-{last[part]}: input order not kept")
                last[part] = seq
        self.stats["aborted_records"] = sum(len(o.with_outcome(ABORTED)) for o in outcomes.values())
        self.stats["committed_txns"] = sum(
            1 for o in outcomes.values() for k in o.txn_outcome.values() if k == COMMITTED)

    def close(self) -> None:
        self.c.close()


def run_seed(path: str, seed: int, **kwargs: Any) -> Counter:
    run = Run(path, seed, **kwargs)
    try:
        run.run()
    except Exception as exc:  # noqa: BLE001 - any failure names its seed, its last events and the replay
        tail = "\n  ".join(run.log[-15:])
        raise AssertionError(f"seed {seed}: {type(exc).__name__}: {exc}\nlast events:\n  {tail}\n"
                             f"replay: {replay_command(seed)}") from exc
    finally:
        run.close()
    return run.stats


#: the default suite's seeds: a few plus the seeds that found bugs (11: a rebalance between a copier's
#: poll and its send_offsets_to_transaction let it commit offsets of a partition another copier had
#: already started copying - Consumer.group_metadata() now gives the generation that owned the records
#: handed out; 500013: records handed out by a poll during which the consumer joined must carry the
#: generation it joined at, not "no generation", which the coordinator does not check)
DEFAULT_SEEDS = (1, 2, 3, 4, 5, 11, 500013)


def test_transactional_copy_under_bounces(tmp_path):
    totals: Counter = Counter()
    for seed in DEFAULT_SEEDS:
        stats = run_seed(str(tmp_path / f"seed-{seed}"), seed)
        # per seed: transactions committed, and the concurrent reader read the output
        assert stats["commits"] >= 3 and stats["observed"] > 0, (seed, stats)
        totals.update(stats)
    # Together the seeds really bounce brokers both ways, copiers both ways, fence zombies, abort
    # transactions (so the read_committed checks meet aborted records) and fail commits.
    for k in ("hard_bounces", "clean_bounces", "copier_hard_bounces", "copier_clean_bounces", "zombies_fenced",
              "aborts", "failed_commits", "aborted_records"):
        assert totals[k] >= 1, (k, totals)


def test_replay_seed(tmp_path):
    seed = os.environ.get("PYLOG_TXN_SEED")
    if seed is None:
        pytest.skip("set PYLOG_TXN_SEED=<seed> to replay one run")
    run_seed(str(tmp_path / "replay"), int(seed))


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(os.environ.get("PYLOG_SOAK") != "1", reason="soak run: set PYLOG_SOAK=1")
def test_soak_transactions(tmp_path):
    start = int(os.environ.get("PYLOG_SOAK_START", "500000"))
    count = int(os.environ.get("PYLOG_SOAK_SEEDS", "1000"))
    for seed in range(start, start + count):
        path = tmp_path / f"seed-{seed}"
        run_seed(str(path), seed)
        shutil.rmtree(path, ignore_errors=True)
