"""The invariants a simulation checks after every step, and the checker that keeps their state.

:data:`INVARIANTS` names each rule. :class:`Invariants` holds what the checks
remember between steps (acknowledged offsets, the highest epochs and HWs seen,
what the consumer read, committed offsets) and records the first
:class:`Violation` of each rule (or raises :class:`SimulationViolation` with
``stop_on_violation``). It reads the cluster and the clients, never changes
them - except that the consumer check polls the run's consumer, as an
application would (so the order of checks is part of a seed's replay).

Complexity: O(partitions x brokers) per check, plus one read of every batch
below each HW for ``replicas-agree-below-hw``.
Thread-safety: none; one simulation thread.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from pylog.replication.offsets_topic import OFFSETS_TOPIC
from pylog.replication.partition import FETCHING, FOLLOWER, LEADER, records_equal_below
from pylog.simulation.config import TP, SimConfig
from pylog.simulation.txn import ABORTED, COMMITTED, PLAIN, LogOutcomes, TxnActor, TxnReadChecks, leader_log, log_outcomes

if TYPE_CHECKING:
    from pylog.cluster import Cluster

log = logging.getLogger(__name__)

#: (name, what it asserts), in the order they are checked and reported.
INVARIANTS: List[Tuple[str, str]] = [
    ("component-invariants", "every broker's, replica's, controller's, scheduler's and client's own _check() holds"),
    ("replicas-agree-below-hw", "every fetching ISR follower holds the leader's exact batches below the leader's HW"),
    ("leader-epochs-only-grow", "the controller's and every replica's leader epoch never goes back"),
    ("hw-never-moves-back", "a replica's HW never moves back while its broker stays up"),
    ("committed-records-kept", "a serving leader holds every offset below the highest HW ever reached"),
    ("acked-writes-kept", "each offset is acknowledged once, and every acknowledged acks=all write survives"),
    ("consumer-below-hw", "consumers never see an offset at or above the HW; what they saw is never lost"),
    ("consumer-reads-acked", "a consumer reads the acknowledged value at each offset, one value per offset, no gaps"),
    ("idempotent-writes-once", "no value an idempotent producer sent is in a partition's log at two offsets"),
    ("commits-never-move-back", "a group's committed offset, as its serving coordinator holds it, never goes back"),
    ("read-committed-only", "a read_committed consumer is never handed a record of an aborted or open transaction, "
                            "nor one at or above the last stable offset its leader reported"),
    ("transactions-whole", "a transaction is seen whole or not at all across its partitions: a read_committed "
                           "consumer that saw any of it finds it committed in every partition, and reads all of a "
                           "partition's part once past its marker"),
]


class SimulationViolation(AssertionError):
    """An invariant failed (raised only with ``stop_on_violation``)."""

    def __init__(self, violation: "Violation"):
        super().__init__(str(violation))
        self.violation = violation


@dataclass(frozen=True)
class Violation:
    """The first violation of one invariant."""

    invariant: str
    seed: int
    step: int
    t_ms: int
    action: str
    message: str

    def __str__(self) -> str:
        return f"seed {self.seed} step {self.step} ({self.action}) at t={self.t_ms / 1000:.3f}s: [{self.invariant}] {self.message}"


class Invariants:
    """The checks of :data:`INVARIANTS` over one run, with their state; see the module docstring.

    The driver sets :attr:`c` and :attr:`consumer` once the cluster is up,
    adds each send's future to :attr:`futures`, and sets :attr:`step` and
    :attr:`action` (they name where a violation happened).
    """

    def __init__(self, cfg: SimConfig, now_ms: Callable[[], int], *, stop_on_violation: bool = False):
        self.cfg = cfg
        self.now_ms = now_ms
        self.stop_on_violation = stop_on_violation
        self.c: Optional["Cluster"] = None
        self.consumer: Any = None
        self.step = 0
        self.action = "start"
        self.violations: Dict[str, Violation] = {}
        self.futures: List[Tuple[Any, bytes]] = []  # sends not yet acknowledged, with their value
        self.acked: Dict[TP, Dict[int, bytes]] = {}
        self.consumed: Dict[Tuple[TP, int], bytes] = {}
        self.value_at: Dict[Tuple[TP, bytes], int] = {}  # the first offset each value was consumed at
        self.max_epoch: Dict[TP, int] = {}
        self.replica_epoch: Dict[Tuple[int, int, TP], int] = {}
        self.replica_hw: Dict[Tuple[int, int, TP], int] = {}
        self.max_hw: Dict[TP, int] = {}
        self.committed: Dict[Tuple[str, TP], int] = {}  # highest committed offset a serving coordinator held
        #: the transactional producer and its read_committed consumer (``txn_rate`` > 0), else None
        self.txn: Optional[TxnActor] = None

    def _violate(self, name: str, message: str) -> None:
        v = Violation(name, self.cfg.seed, self.step, self.now_ms(), self.action, message)
        if name not in self.violations:
            log.info("%s", v)
        if self.stop_on_violation:
            raise SimulationViolation(v)
        self.violations.setdefault(name, v)

    def _guard(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except SimulationViolation:
            raise
        except AssertionError as exc:
            self._violate(name, str(exc) or repr(exc))

    def check(self, step: int, what: str) -> None:
        """Check every invariant now; record (or raise) the first violation of each."""
        self.step, self.action = step, what
        self._guard("acked-writes-kept", self._harvest)
        self._guard("component-invariants", self._check_components)
        self._guard("replicas-agree-below-hw", self._check_agreement)
        self._guard("leader-epochs-only-grow", self._check_controller_epochs)
        self._check_replicas()
        self._check_consumer()
        self._guard("commits-never-move-back", self._check_commits)
        if self.txn is not None:
            self._check_read_committed()

    def _harvest(self) -> None:
        keep = []
        failures = []
        for fut, value in self.futures:
            if not fut.done():
                keep.append((fut, value))
            elif fut.exception() is None:
                m = fut.result()
                slot = self.acked.setdefault((m.topic, m.partition), {})
                if m.offset in slot and slot[m.offset] != value:
                    failures.append(f"two acks for {m.topic}-{m.partition} offset {m.offset}: {slot[m.offset]!r} and {value!r}")
                slot[m.offset] = value
        self.futures[:] = keep
        assert not failures, failures[0]

    def _check_components(self) -> None:
        c = self.c
        assert c is not None
        c._check(deep=False)

    def _check_agreement(self) -> None:
        c = self.c
        assert c is not None
        for tp, st in c.store.partitions.items():
            lb = c.brokers.get(st.leader)
            if lb is None or not lb.running or lb.rm is None:
                continue
            lp = lb.rm.partitions.get(tp)
            if lp is None or lp.role != LEADER or lp.leader_epoch != st.leader_epoch:
                continue
            for r in st.isr:
                rb = c.brokers[r]
                if r == st.leader or not rb.running or rb.rm is None:
                    continue
                rp = rb.rm.partitions.get(tp)
                if rp is None or rp.role != FOLLOWER or rp.leader_epoch != st.leader_epoch or rp.follower_state != FETCHING:
                    continue
                diff = records_equal_below(lp.log, rp.log, min(lp.high_watermark, rp.log_end_offset))
                assert diff is None, (
                    f"{tp[0]}-{tp[1]}: broker {r} differs from leader {st.leader} at offset {diff} "
                    f"(below HW {lp.high_watermark})")

    def _check_controller_epochs(self) -> None:
        c = self.c
        assert c is not None
        for tp, st in c.store.partitions.items():
            assert st.leader_epoch >= self.max_epoch.get(tp, -1), (
                f"{tp[0]}-{tp[1]}: controller leader epoch went back from {self.max_epoch[tp]} to {st.leader_epoch}")
            self.max_epoch[tp] = st.leader_epoch

    def _check_replicas(self) -> None:
        c = self.c
        assert c is not None
        for b in c.brokers.values():
            if not b.running or b.rm is None:
                continue
            for tp, p in b.rm.partitions.items():
                key = (b.broker_id, b.incarnation, tp)
                name = f"broker {b.broker_id} {tp[0]}-{tp[1]}"

                def epochs() -> None:
                    assert p.leader_epoch >= self.replica_epoch.get(key, -1), (
                        f"{name}: leader epoch went back from {self.replica_epoch[key]} to {p.leader_epoch}")

                def hw() -> None:
                    assert p.high_watermark >= self.replica_hw.get(key, 0), (
                        f"{name}: HW moved back {self.replica_hw[key]} -> {p.high_watermark}")

                self._guard("leader-epochs-only-grow", epochs)
                self._guard("hw-never-moves-back", hw)
                self.replica_epoch[key] = max(p.leader_epoch, self.replica_epoch.get(key, -1))
                self.replica_hw[key] = max(p.high_watermark, self.replica_hw.get(key, 0))
                if p.role == LEADER and p.leader_epoch == c.store.partitions[tp].leader_epoch:
                    self.max_hw[tp] = max(self.max_hw.get(tp, 0), p.high_watermark)
                    top = self.max_hw[tp]
                    mine = self.acked.get(tp, {})
                    self._guard("committed-records-kept", lambda: _assert(
                        p.log_end_offset >= top, f"{tp[0]}-{tp[1]}: leader {b.broker_id} LEO {p.log_end_offset} "
                                                 f"< committed HW {top}"))
                    self._guard("acked-writes-kept", lambda: _assert(
                        not mine or p.log_end_offset > max(mine),
                        f"{tp[0]}-{tp[1]}: leader {b.broker_id} (LEO {p.log_end_offset}) lacks acknowledged "
                        f"offset {max(mine) if mine else -1}"))

    def _check_commits(self) -> None:
        """See the module docstring: no serving coordinator holds an offset below one held before."""
        c = self.c
        assert c is not None
        for b in c.brokers.values():
            co, rm = b.coordinator, b.rm
            if not b.running or co is None or rm is None:
                continue
            for gid, g in sorted(co.groups.items()):
                tp_off = (OFFSETS_TOPIC, g.partition)
                part, st = rm.partitions.get(tp_off), c.store.partitions.get(tp_off)
                if part is None or st is None or part.role != LEADER or part.leader_epoch != st.leader_epoch \
                        or co.loaded.get(g.partition) != part.leader_epoch:
                    continue
                for tp, v in sorted(g.offsets.items()):
                    key = (gid, tp)
                    top = self.committed.get(key, -1)
                    assert v.offset >= top, (f"group {gid!r} {tp[0]}-{tp[1]}: committed offset moved back {top} -> "
                                             f"{v.offset} (coordinator: broker {b.broker_id})")
                    self.committed[key] = max(top, v.offset)

    def _check_consumer(self) -> None:
        self._guard("consumer-below-hw", self.consumer._check)
        records = self.consumer.poll(0.0)
        problems: List[str] = []
        twice: List[str] = []
        for r in records:
            tp = (r.topic, r.partition)
            seen = self.consumed.setdefault((tp, r.offset), r.value)  # the first read is what must stay
            if seen != r.value:
                problems.append(f"{tp[0]}-{tp[1]} offset {r.offset} read as {seen!r} then {r.value!r}")
            want = self.acked.get(tp, {}).get(r.offset)
            if want is not None and want != r.value:
                problems.append(f"{tp[0]}-{tp[1]} offset {r.offset}: acked {want!r}, consumed {r.value!r}")
            if self.cfg.idempotent:
                first = self.value_at.setdefault((tp, r.value), r.offset)
                if first != r.offset:
                    twice.append(f"{tp[0]}-{tp[1]}: value {r.value!r} consumed at offsets {first} and {r.offset}: "
                                 f"written twice by an idempotent producer")
        if problems:
            self._violate("consumer-reads-acked", problems[0])
        if twice:
            self._violate("idempotent-writes-once", twice[0])

    def _check_read_committed(self) -> None:
        """``read-committed-only`` and ``transactions-whole`` on what the read_committed consumer is
        handed now (see :mod:`pylog.simulation.txn`): below the LSO each fetch reported and below every
        transaction open on the leader; plain or committed in
        the leader's log below its HW (the oracle reads the raw batches and markers); every
        transaction it saw any record of committed in each of its partitions; a partition's part of a
        committed transaction read whole once the consumer is past its marker."""
        t, c = self.txn, self.c
        assert t is not None and c is not None
        self._guard("read-committed-only", t.consumer._check)  # nothing at or above a reported LSO
        records = t.consumer.poll(0.0)
        t.stats["rc_seen"] += len(records)
        problems = t.reads.saw(c, records)
        if problems:
            self._violate("read-committed-only", problems[0])
        self._judge_reads(t.reads, {(r.topic, r.partition) for r in records}, t)

    def _judge_reads(self, reads: TxnReadChecks, fresh: Any, t: TxnActor) -> None:
        c = self.c
        assert c is not None
        oracles: Dict[TP, Optional[LogOutcomes]] = {}

        def oracle(tp: TP) -> Optional[LogOutcomes]:
            if tp not in oracles:
                p = leader_log(c, tp)
                oracles[tp] = None if p is None else log_outcomes(p.log)
            return oracles[tp]

        for tp in sorted(fresh):
            o = oracle(tp)
            if o is None:
                continue  # no serving leader now: the next check reads it
            bad, partial = reads.check_against(tp, o)
            if bad:
                self._violate("read-committed-only", bad[0])
            if partial:
                self._violate("transactions-whole", partial[0])
        seen_values = {v for got in reads.seen.values() for v in got.values()}
        for txn in t.txns:
            if not any(v in seen_values for vs in txn.values.values() for v in vs):
                continue
            if txn.state == "aborted":
                self._violate("read-committed-only", f"{reads.name} saw a record of transaction {txn.name}, "
                                                     f"which the producer aborted")
            for tp, vs in sorted(txn.values.items()):
                o = oracle(tp)
                if o is None:
                    continue
                kinds = {k for k, v, _ in o.records.values() if v in vs}
                if ABORTED in kinds:
                    self._violate("transactions-whole", f"{reads.name} saw records of transaction {txn.name}, "
                                                        f"which is aborted in {tp[0]}-{tp[1]}")

    def check_read_committed_back(self, got: Dict[TP, Dict[int, Optional[bytes]]], reader: TxnReadChecks) -> None:
        """The settle phase: a fresh read_committed consumer read every partition to its HW (``got``).
        It read exactly the plain and committed records of each leader's log; every transaction the
        producer committed is there whole, every one it aborted is absent, every other whole or absent."""
        t, c = self.txn, self.c
        assert t is not None and c is not None
        for tp, records in sorted(got.items()):
            p = leader_log(c, tp)
            if p is None:
                self._violate("read-committed-only", f"no serving leader of {tp[0]}-{tp[1]} after the settle")
                continue
            o = log_outcomes(p.log, p.high_watermark)
            want = o.with_outcome(PLAIN, COMMITTED)
            if records != want:
                diff = sorted(set(records.items()) ^ set(want.items()))[:3]
                self._violate("read-committed-only", f"final read_committed read of {tp[0]}-{tp[1]} differs "
                                                     f"from the log's committed view, e.g. {diff}")
        self._judge_reads(reader, set(got), t)
        for problem in reader.check_whole((txn.name, txn.values) for txn in t.txns):
            self._violate("transactions-whole", problem)
        seen = {v for recs in got.values() for v in recs.values()}
        for txn in t.txns:
            vs = {v for s in txn.values.values() for v in s}
            if txn.state == "committed" and not vs <= seen:
                self._violate("transactions-whole", f"transaction {txn.name} was committed but "
                                                    f"{len(vs - seen)} of its {len(vs)} records are not read back")
            if txn.state == "aborted" and vs & seen:
                self._violate("read-committed-only", f"transaction {txn.name} was aborted but "
                                                     f"{len(vs & seen)} of its records are read back")

    def check_read_back(self, tp: TP, got: Dict[int, Optional[bytes]], hw: int, reader: Any,
                        control: Optional[set] = None) -> None:
        """The settle phase's last checks on what a fresh consumer ``reader`` read of ``tp`` below ``hw``:
        no gaps (but at the ``control`` offsets: transaction markers, which no consumer is handed), every
        acknowledged write at its offset, every record consumed during the run still there, and
        (idempotent producer) no value twice."""
        name = f"{tp[0]}-{tp[1]}"
        offsets = self.acked.get(tp, {})
        skip = control or set()
        self._guard("consumer-reads-acked", lambda: _assert(
            sorted(got) == [o for o in range(len(got) + len(skip)) if o not in skip],
            f"gap in the offsets read back from {name} (HW {hw})"))

        def acked_there() -> None:
            for off, value in offsets.items():
                assert got.get(off) == value, (
                    f"acknowledged {value!r} at {name} offset {off} was not read back there "
                    f"(got {got.get(off)!r}, HW {hw})")

        def consumed_there() -> None:
            for (ctp, off), value in sorted(self.consumed.items()):
                if ctp == tp:
                    assert got.get(off) == value, (
                        f"{name} offset {off} was consumed as {value!r} during the run but reads back as "
                        f"{got.get(off)!r} (HW {hw}): the consumer saw an uncommitted record")

        def written_once() -> None:
            at: Dict[bytes, int] = {}
            for off in sorted(got):
                value = got[off]
                if value is None:
                    continue  # the simulation writes unique non-null values; a null is not its
                first = at.setdefault(value, off)
                assert first == off, (f"{name}: value {got[off]!r} is at offsets {first} and {off} (HW {hw}): "
                                      f"written twice by an idempotent producer")

        self._guard("acked-writes-kept", acked_there)
        self._guard("consumer-below-hw", consumed_there)
        if self.cfg.idempotent:
            self._guard("idempotent-writes-once", written_once)
        self._guard("component-invariants", reader._check)


def _assert(cond: bool, message: str) -> None:
    if not cond:
        raise AssertionError(message)
