"""Transactions in a simulation: what a partition's log says about each record, read from its raw batches.

:func:`log_outcomes` is the oracle the transaction checks compare consumers
against. It walks a partition's log batch by batch (the stored bytes, not a
consumer's view) and classifies every data record by the transaction it
belongs to, using only the batch headers and the COMMIT/ABORT control
records - the rules of Kafka's log, with none of the read side's machinery
(no LSO, no ``.txnindex``, no read_committed filter):

* a record of a non-transactional batch is *plain*;
* a record of a transactional batch belongs to its producer's open
  transaction, which the producer's next COMMIT or ABORT marker in the log
  ends: its records are then *committed* or *aborted*;
* a transactional record no marker ends yet is *open*.

So a read_committed consumer may hand out exactly the plain and committed
records (once the marker is below the HW), never an aborted or open one.

:class:`TxnReadChecks` keeps what one read_committed consumer was handed and
checks it against the oracle and the partition leaders (the
``read-committed-only`` and ``transactions-whole`` invariants of
:data:`pylog.simulation.INVARIANTS`, and the system test in
``tests/sim/test_transactions_system.py``).

Complexity: :func:`log_outcomes` reads the log once, O(bytes); it is meant
for checks, not for a hot path. Durability: reads only.
Thread-safety: none; the simulation thread (the log's own lock is taken per read).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Set, Tuple

from pylog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerClosedError,
    ProducerFencedError,
    PylogError,
    RequestTimedOutError,
)
from pylog.record.types import ATTR_CONTROL, ATTR_TRANSACTIONAL
from pylog.replication.partition import LEADER
from pylog.storage.control_record import marker_of_batch

if TYPE_CHECKING:
    from pylog.cluster import Cluster
    from pylog.storage.log import Log

TP = Tuple[str, int]

PLAIN, COMMITTED, ABORTED, OPEN = "plain", "committed", "aborted", "open"


@dataclass
class LogOutcomes:
    """Every data record of a partition's log below ``end``: offset -> (outcome, value, producer id),
    and each transaction as the offsets it holds (``txns``: (producer id, first offset) -> offsets,
    with its outcome in ``txn_outcome``)."""

    end: int
    records: Dict[int, Tuple[str, Optional[bytes], int]] = field(default_factory=dict)
    txns: Dict[Tuple[int, int], List[int]] = field(default_factory=dict)
    txn_outcome: Dict[Tuple[int, int], str] = field(default_factory=dict)
    #: offset of the marker that ended each transaction
    txn_marker: Dict[Tuple[int, int], int] = field(default_factory=dict)

    def with_outcome(self, *outcomes: str) -> Dict[int, Optional[bytes]]:
        return {o: v for o, (k, v, _) in self.records.items() if k in outcomes}


def log_outcomes(log: "Log", end: Optional[int] = None) -> LogOutcomes:
    """Classify every data record of ``log`` below ``end`` (default: its log end); see the module docstring."""
    stop = log.log_end_offset if end is None else min(end, log.log_end_offset)
    out = LogOutcomes(stop)
    open_txn: Dict[int, Tuple[int, int]] = {}  # producer id -> its open transaction's key
    offset = log.log_start_offset
    while offset < stop:
        batches = log.read_batches(offset, 1 << 20, max_offset=stop)
        if not batches:
            break
        for b in batches:
            i = b.info
            offset = max(offset, i.last_offset + 1)
            if i.base_offset >= stop:
                continue
            if i.attributes & ATTR_CONTROL:
                marker = marker_of_batch(b) if i.magic == 2 else None
                key = open_txn.pop(i.producer_id, None)
                if marker is None or key is None:
                    continue  # another control type, or a marker of an empty transaction
                kind = COMMITTED if marker.committed else ABORTED
                out.txn_outcome[key] = kind
                out.txn_marker[key] = i.base_offset
                for o in out.txns[key]:
                    _, value, pid = out.records[o]
                    out.records[o] = (kind, value, pid)
                continue
            offsets: Optional[List[int]] = None
            if i.attributes & ATTR_TRANSACTIONAL and i.magic == 2:
                txn_key = open_txn.setdefault(i.producer_id, (i.producer_id, i.base_offset))
                offsets = out.txns.setdefault(txn_key, [])
                out.txn_outcome.setdefault(txn_key, OPEN)
            for r in b.records():
                if r.offset >= stop:
                    break
                value = bytes(r.value) if r.value is not None else None
                out.records[r.offset] = (OPEN if offsets is not None else PLAIN, value, i.producer_id)
                if offsets is not None:
                    offsets.append(r.offset)
    return out


def leader_log(c: "Cluster", tp: TP) -> Any:
    """The current leader's partition object of ``tp`` (its broker up and leading at the controller's
    epoch), or None."""
    st = c.store.partitions.get(tp)
    if st is None or st.leader < 0:
        return None
    b = c.brokers.get(st.leader)
    if b is None or not b.running or b.rm is None:
        return None
    p = b.rm.partitions.get(tp)
    if p is None or p.leader_epoch != st.leader_epoch or p.role != LEADER:
        return None
    return p


class TxnReadChecks:
    """What one read_committed consumer was handed, checked as it goes and at the end.

    Call :meth:`saw` with each polled batch of records (it checks at once that no record is in
    a transaction still open on its partition's leader); :meth:`check_against` with each partition's :class:`LogOutcomes` (every record seen is
    committed or plain at the offset it was seen at, with the same value; a transaction is seen
    whole in a partition once the consumer read past its marker); :meth:`check_whole` checks that
    every transaction the consumer saw any record of was seen whole across all its partitions
    (give it the transactions' records per partition, as the writer knows them).
    """

    def __init__(self, name: str):
        self.name = name
        self.seen: Dict[TP, Dict[int, Optional[bytes]]] = {}

    def saw(self, c: "Cluster", records: Iterable[Any]) -> List[str]:
        """Note ``records`` (just handed out) and check each is below the first offset of the oldest
        transaction still open on its partition's serving leader (an LSO bound that holds whatever
        leader served the fetch: a transaction open now was open then; the leader's HW part of the
        LSO is checked by the consumer itself against the LSO each response reported,
        ``Consumer._check``). Reads the leader's producer state, never changes it (``Log.last_stable_offset``
        would: it forgets the transactions below the HW it is given)."""
        problems: List[str] = []
        unstable: Dict[TP, Optional[int]] = {}
        for r in records:
            tp = (r.topic, r.partition)
            got = self.seen.setdefault(tp, {})
            if r.offset in got and got[r.offset] != r.value:
                problems.append(f"{self.name}: {tp[0]}-{tp[1]} offset {r.offset} read as {got[r.offset]!r} "
                                f"then {r.value!r}")
            got[r.offset] = r.value
            if tp not in unstable:
                p = leader_log(c, tp)
                unstable[tp] = None if p is None else p.log.first_unstable_offset
            top = unstable[tp]
            if top is not None and r.offset >= top:
                problems.append(f"{self.name}: {tp[0]}-{tp[1]} offset {r.offset} handed out at or above the "
                                f"first offset {top} of a transaction still open on the leader")
        return problems

    def check_against(self, tp: TP, outcomes: LogOutcomes) -> Tuple[List[str], List[str]]:
        """``(bad reads, partial transactions)`` of ``tp`` against ``outcomes`` (its serving leader's
        whole log: a marker a read_committed consumer relied on was below some leader's HW, so every
        later leader has it): every record seen must be plain or committed there, with the value seen; and every
        committed transaction whose marker is below the highest offset seen must have been seen whole
        in this partition (the consumer reads from the log start)."""
        bad: List[str] = []
        partial: List[str] = []
        got = self.seen.get(tp, {})
        for off, value in sorted(got.items()):
            rec = outcomes.records.get(off)
            if rec is None:
                if off < outcomes.end:
                    bad.append(f"{self.name}: {tp[0]}-{tp[1]} offset {off} ({value!r}) is no data record of the log")
                continue
            kind, stored, _ = rec
            if kind not in (PLAIN, COMMITTED):
                bad.append(f"{self.name}: {tp[0]}-{tp[1]} offset {off} ({value!r}) was handed out but its "
                           f"transaction is {kind} in the log")
            elif stored != value:
                bad.append(f"{self.name}: {tp[0]}-{tp[1]} offset {off} read as {value!r}, the log holds {stored!r}")
        top = max(got, default=-1)
        for key, offs in outcomes.txns.items():
            marker = outcomes.txn_marker.get(key)
            if outcomes.txn_outcome[key] != COMMITTED or marker is None or marker >= top:
                continue
            missing = [o for o in offs if o not in got]
            if missing:
                partial.append(f"{self.name}: {tp[0]}-{tp[1]} committed transaction of producer {key[0]} at "
                               f"offset {key[1]} (marker {marker}) read in part: offsets {missing[:5]} missing "
                               f"although the consumer read offset {top}")
        return bad, partial

    def check_whole(self, txns: Iterable[Tuple[str, Dict[TP, Set[bytes]]]]) -> List[str]:
        """Each ``(name, {tp: values})`` transaction was seen whole (every value, every partition) or
        not at all, by a consumer that has read every partition to its end."""
        values: Dict[TP, Set[Optional[bytes]]] = {tp: set(got.values()) for tp, got in self.seen.items()}
        problems: List[str] = []
        for name, parts in txns:
            seen = {tp: vs & values.get(tp, set()) for tp, vs in parts.items()}
            n_seen = sum(len(s) for s in seen.values())
            n_all = sum(len(vs) for vs in parts.values())
            if 0 < n_seen < n_all:
                lacking = sorted(f"{tp[0]}-{tp[1]}" for tp, vs in parts.items() if seen[tp] != vs)
                problems.append(f"{self.name}: transaction {name} seen in part: {n_seen} of {n_all} records "
                                f"(incomplete in {', '.join(lacking)})")
        return problems


# ---------------------------------------------------------------- the random simulation's transactional client
@dataclass
class SimTxn:
    """One transaction the simulation's transactional producer ran: the values it sent per partition,
    the send futures, and its outcome as the producer learned it (``open``, ``committing``,
    ``aborting``, ``committed``, ``aborted``, or ``unknown`` when the producer was lost with it)."""

    number: int
    values: Dict[TP, Set[bytes]] = field(default_factory=dict)
    futures: List[Tuple[Any, bytes]] = field(default_factory=list)
    state: str = "open"

    @property
    def name(self) -> str:
        return f"#{self.number}"


class TxnActor:
    """The simulation's transactional producer and read_committed consumer (``SimConfig.txn_rate``).

    Each transactional step (see :meth:`act`) begins a transaction and sends a few records to random
    partitions of the simulation's topics, sends more, commits or aborts (about 1 in 4 ends in an
    abort). A commit or abort that cannot finish within ``txn_block_ms`` of virtual time (a network
    partition from the coordinator) is left pending and called again at the next transactional
    step, as Kafka's ``commitTransaction`` after a ``TimeoutException``. A producer that ends in a
    fatal error (fenced, e.g. after its transaction timed out on the coordinator) is replaced by a
    new one with the same transactional id; the transaction it held is ``unknown`` (the new
    producer's ``init_transactions`` aborts it, unless its commit got through first).

    The read_committed consumer (no group, every partition from the start) is polled by the
    invariant checks after each step.
    """

    def __init__(self, c: "Cluster", seed: int, topics: Tuple[str, ...], partitions: int, rng: Any, *,
                 request_timeout_ms: int, delivery_timeout_ms: int, block_ms: int = 20_000):
        self.c, self.seed, self.topics, self.partitions, self.rng = c, seed, topics, partitions, rng
        self.tid = f"sim-txn-{seed}"
        self.request_timeout_ms, self.delivery_timeout_ms, self.block_ms = (
            request_timeout_ms, delivery_timeout_ms, block_ms)
        self.txns: List[SimTxn] = []
        self.current: Optional[SimTxn] = None
        self.producer: Any = None
        self.sent = 0
        self.stats = {"txn_committed": 0, "txn_aborted": 0, "txn_unknown": 0, "txn_records": 0,
                      "txn_producers": 0, "txn_timeouts": 0, "rc_seen": 0}
        self.reads = TxnReadChecks("read_committed consumer")
        self.consumer: Any = None

    def start(self) -> None:
        self._new_producer()
        self.consumer = self.c.consumer(None, list(self.topics), isolation_level="read_committed",
                                        fetch_max_wait_ms=100)

    def _new_producer(self) -> None:
        if self.producer is not None:
            self.producer.close(0)
        # At least 5 s: a request timeout shorter than the coordinator's acks=all append (a slow broker in
        # the ISR: ~1.6 s) makes every InitProducerId/EndTxn answer arrive after the client gave up and
        # retried - each retry processed, none ever seen (seed 300272 with the mix's 1.5 s).
        self.producer = self.c.producer(
            transactional_id=self.tid, acks="all", request_timeout_ms=max(self.request_timeout_ms, 5_000),
            delivery_timeout_ms=max(self.delivery_timeout_ms, 15_000), transaction_timeout_ms=10_000,
            max_block_ms=self.block_ms)
        self.stats["txn_producers"] += 1
        self._ready = False

    def _ensure_ready(self) -> bool:
        """``init_transactions`` (again, after a timeout); False while it cannot finish."""
        if self._ready:
            return True
        try:
            self.producer.init_transactions()
        except PylogError as exc:
            if _fatal(exc):
                self._new_producer()
            else:
                self.stats["txn_timeouts"] += 1
            return False
        self._ready = True
        return True

    def act(self) -> str:
        """One transactional step; what it did."""
        if not self._ready and not self._ensure_ready():
            return "txn init pending"
        t, rng = self.current, self.rng
        try:
            if t is None:
                self.producer.begin_transaction()
                self.current = t = SimTxn(len(self.txns))
                self.txns.append(t)
                return f"txn {t.name} begin + {self._send(t)}"
            if t.state == "open":
                roll = rng.random()
                if roll < 0.35:
                    return f"txn {t.name} + {self._send(t)}"
                t.state = "committing" if roll < 0.8 else "aborting"
            if t.state == "committing":
                self.producer.commit_transaction()
                self._end(t, "committed")
            else:
                self.producer.abort_transaction()
                self._end(t, "aborted")
            return f"txn {t.name} {t.state}"
        except PylogError as exc:
            return self._failed(t, exc)

    def _send(self, t: SimTxn) -> int:
        k = self.rng.randint(1, 6)
        for _ in range(k):
            self.sent += 1
            value = b"t%d-%d" % (self.seed, self.sent)
            topic = self.rng.choice(self.topics)
            part = self.rng.randrange(self.partitions)
            t.values.setdefault((topic, part), set()).add(value)
            t.futures.append((self.producer.send(topic, value, partition=part), value))
        self.stats["txn_records"] += k
        return k

    def _end(self, t: SimTxn, outcome: str) -> None:
        t.state = outcome
        self.current = None
        self.stats["txn_" + outcome] += 1

    def _failed(self, t: Optional[SimTxn], exc: BaseException) -> str:
        if _fatal(exc):
            if t is not None:
                self._end(t, "unknown")
            self._new_producer()
            return f"txn producer lost ({type(exc).__name__}); a new one with the same id"
        if isinstance(exc, (RequestTimedOutError, TimeoutError)):
            self.stats["txn_timeouts"] += 1
            return f"txn {t.name if t else ''} call pending ({type(exc).__name__})"
        if t is not None:
            t.state = "aborting"  # abortable: the next transactional step aborts it
        return f"txn {t.name if t else ''} abortable error ({type(exc).__name__})"

    def settle(self) -> None:
        """The settle phase: the network healed and every broker up - finish the open transaction
        (commit), so no transaction stays open."""
        for _ in range(20):
            if self._ready and self.current is None:
                return
            if self.current is not None and self.current.state == "open":
                self.current.state = "committing"
            self.act()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(0)
        if self.consumer is not None:
            self.consumer.close(autocommit=False)


def _fatal(exc: BaseException) -> bool:
    return isinstance(exc, (ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError,
                            ProducerClosedError))

