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

Only the cluster's public API is driven; brokers' replica managers are read,
never changed.

Complexity: O(steps x partitions x brokers) checks plus the cluster's own work;
the replica-agreement check reads every batch below each HW once per step.
Durability: the cluster's files live under ``path`` (simulated disks: a crash
drops unsynced bytes from them).
Thread-safety: none; a simulation runs on the calling thread only.
"""
from __future__ import annotations

import errno
import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

from pylog.cluster import Cluster
from pylog.errors import InvalidConfigurationError
from pylog.replication.offsets_topic import OFFSETS_TOPIC
from pylog.replication.partition import FETCHING, FOLLOWER, LEADER, TRUNCATING, Partition, records_equal_below
from pylog.runtime.broker import SimDisk
from pylog.runtime.transport.simnet import SimulatedNetwork

TP = Tuple[str, int]

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
]

#: Test-only bugs ``pylog sim --inject-bug`` can switch on, to show the checks catch them.
BUGS: Dict[str, str] = {
    "no-epoch-truncation": "a follower skips the leader-epoch truncation (KIP-101) and fetches from its own log end",
    "hw-ignores-followers": "the leader advances the HW to its own LEO without waiting for the ISR",
}

#: Virtual milliseconds one step may run after its action.
STEP_MS = (5, 50, 200, 800, 2_000)


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


@dataclass
class SimConfig:
    """What to simulate. Rates are probabilities per step (they must sum to at most 1).

    ``partitions=0``, ``loss=None`` and ``max_latency_ms=None`` are drawn from
    the seed (in that order), as the randomized test driver does.
    """

    seed: int = 0
    brokers: int = 3
    topics: Tuple[str, ...] = ("sim",)
    partitions: int = 1
    rf: int = 3
    min_isr: int = 2
    duration_ms: Optional[int] = 60_000
    steps: Optional[int] = None
    produce_rate: float = 0.40
    max_burst: int = 8
    crash_rate: float = 0.105
    stop_rate: float = 0.045
    restart_rate: float = 0.15
    partition_rate: float = 0.08
    heal_rate: float = 0.08
    slow_rate: float = 0.04
    disk_fail_rate: float = 0.0
    #: chance per step of toggling the metadata-write fault: every write of ``cluster-metadata.json``
    #: fails (ENOSPC) until the next such step (or the settle phase) heals it. 0 (the default) draws
    #: nothing from the seed, so runs without it replay as before.
    metadata_fail_rate: float = 0.0
    loss: Optional[float] = 0.0
    max_latency_ms: Optional[int] = 5
    replica_lag_time_max_ms: int = 2_000
    session_timeout_ms: int = 1_500
    heartbeat_interval_ms: int = 250
    request_timeout_ms: int = 3_000
    delivery_timeout_ms: int = 20_000
    offsets_partitions: int = 1
    #: a random connection that carried traffic (client-broker or broker-broker) drops
    drop_rate: float = 0.0
    #: the producer or the consumer is cut from one broker (one way or both); ``heal`` restores it
    client_cut_rate: float = 0.0
    #: the consumer commits its positions with ``commit_async`` (besides its auto-commits)
    commit_rate: float = 0.0
    auto_commit_interval_ms: int = 5_000
    #: the producer's ``enable_idempotence`` (False: the control run, where duplicates are expected)
    idempotent: bool = True

    def validate(self) -> None:
        rates = (self.produce_rate, self.crash_rate, self.stop_rate, self.restart_rate, self.partition_rate,
                 self.heal_rate, self.slow_rate, self.disk_fail_rate, self.metadata_fail_rate, self.drop_rate,
                 self.client_cut_rate, self.commit_rate)
        if any(r < 0 for r in rates) or sum(rates) > 1.0 + 1e-9:
            raise InvalidConfigurationError(f"simulation rates must be >= 0 and sum to at most 1 per step, got {rates}")
        if self.brokers < 1 or not 1 <= self.rf <= self.brokers:
            raise InvalidConfigurationError(f"need 1 <= rf ({self.rf}) <= brokers ({self.brokers})")
        if not 1 <= self.min_isr <= self.rf:
            raise InvalidConfigurationError(f"need 1 <= min_isr ({self.min_isr}) <= rf ({self.rf})")
        if self.rf < 2 and self.crash_rate > 0:
            raise InvalidConfigurationError(
                "with RF 1 a crash loses every acknowledged write not yet fsynced, by design (there is no other "
                "replica to take over): use a crash rate of 0 (clean stops are fine)")
        if not self.topics or self.partitions < 0 or self.max_burst < 1:
            raise InvalidConfigurationError("need at least one topic, partitions >= 0 and max_burst >= 1")
        if self.duration_ms is None and self.steps is None:
            raise InvalidConfigurationError("give duration_ms or steps")
        loss = self.loss
        if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool) or not 0.0 <= loss < 1.0):
            raise InvalidConfigurationError(f"simulation loss must be a number in [0, 1), got {loss!r}")


# --------------------------------------------------------------------------- trace


@dataclass
class PartitionTrace:
    """Samples of one partition: per replica LEO/HW (None while its broker is down), the controller's view."""

    replicas: List[int]
    times: List[int] = field(default_factory=list)
    leo: Dict[int, List[Optional[int]]] = field(default_factory=dict)
    hw: Dict[int, List[Optional[int]]] = field(default_factory=dict)
    isr: List[List[int]] = field(default_factory=list)
    leader: List[int] = field(default_factory=list)
    epoch: List[int] = field(default_factory=list)


@dataclass
class Trace:
    """What happened, in virtual milliseconds since the simulation started.

    ``events`` are ``{"t", "kind", ...}`` with kind ``crash``, ``stop``,
    ``start``, ``partition``, ``heal``, ``slow`` or ``settle``;
    ``leader_changes`` are ``{"t", "tp", "leader", "epoch"}``, one per epoch
    bump seen between samples.
    """

    brokers: int
    partitions: Dict[str, PartitionTrace] = field(default_factory=dict)
    events: List[Dict[str, Any]] = field(default_factory=list)
    leader_changes: List[Dict[str, Any]] = field(default_factory=list)
    end_ms: int = 0

    def to_json(self) -> Dict[str, Any]:
        out = asdict(self)
        for pt in out["partitions"].values():  # JSON object keys are strings
            pt["leo"] = {str(k): v for k, v in pt["leo"].items()}
            pt["hw"] = {str(k): v for k, v in pt["hw"].items()}
        return out

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Trace":
        parts = {}
        for name, pt in data["partitions"].items():
            parts[name] = PartitionTrace(
                replicas=list(pt["replicas"]), times=list(pt["times"]),
                leo={int(k): v for k, v in pt["leo"].items()}, hw={int(k): v for k, v in pt["hw"].items()},
                isr=pt["isr"], leader=pt["leader"], epoch=pt["epoch"],
            )
        return cls(brokers=data["brokers"], partitions=parts, events=data["events"],
                   leader_changes=data["leader_changes"], end_ms=data["end_ms"])

    def digest(self) -> str:
        """SHA-256 of the canonical JSON: equal for two runs of one seed."""
        blob = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


@dataclass
class SimResult:
    """The outcome: first violation per invariant (absent = held), counters, and the trace (if recorded)."""

    config: SimConfig
    violations: Dict[str, Violation]
    stats: Dict[str, int]
    trace: Optional[Trace]

    @property
    def ok(self) -> bool:
        return not self.violations


# --------------------------------------------------------------------------- the simulation


class Simulation:
    """One seeded run; see the module docstring. ``run()`` once, then read the :class:`SimResult`."""

    def __init__(self, path: str, config: SimConfig, *, trace: bool = False, sample_ms: int = 20,
                 stop_on_violation: bool = False, bug: Optional[str] = None):
        config.validate()
        if bug is not None and bug not in BUGS:
            raise InvalidConfigurationError(f"unknown bug {bug!r}; known: {', '.join(BUGS)}")
        self.path = path
        self.cfg = config
        self.bug = bug
        self.stop_on_violation = stop_on_violation
        self.sample_ms = sample_ms
        self.rng = random.Random(config.seed ^ 0x5EED)
        rng = self.rng
        self.partitions = config.partitions or rng.choice([1, 1, 2])
        self.loss = config.loss if config.loss is not None else rng.choice([0.0, 0.0, 0.01, 0.05])
        self.max_latency_ms = config.max_latency_ms if config.max_latency_ms is not None else rng.choice([2, 5, 20])
        self.trace: Optional[Trace] = Trace(config.brokers) if trace else None
        self.violations: Dict[str, Violation] = {}
        self.stats = {"crashes": 0, "stops": 0, "partitions": 0, "acked": 0, "restarts": 0, "heals": 0,
                      "slows": 0, "produced": 0, "steps": 0, "virtual_ms": 0, "leader_changes": 0,
                      "disk_failures": 0, "metadata_failures": 0, "connection_drops": 0, "client_cuts": 0,
                      "commits": 0, "commits_seen": 0, "epoch_bumps": 0}
        # Checker state.
        self.futures: List[Tuple[Any, bytes]] = []
        self.acked: Dict[TP, Dict[int, bytes]] = {}
        self.consumed: Dict[Tuple[TP, int], bytes] = {}
        self.value_at: Dict[Tuple[TP, bytes], int] = {}  # the first offset each value was consumed at
        self.max_epoch: Dict[TP, int] = {}
        self.replica_epoch: Dict[Tuple[int, int, TP], int] = {}
        self.replica_hw: Dict[Tuple[int, int, TP], int] = {}
        self.max_hw: Dict[TP, int] = {}
        self.down: Dict[int, bool] = {}
        self.committed: Dict[Tuple[str, TP], int] = {}  # highest committed offset a serving coordinator held
        self.disk_failed: Dict[int, None] = {}  # brokers whose disk fails every write (insertion-ordered)
        self._step = 0
        self._action = "start"
        self._t0 = 0
        self.c: Optional[Cluster] = None
        self.producer: Any = None
        self.consumer: Any = None

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        """Run every step and the settle phase; raise :class:`SimulationViolation` only with ``stop_on_violation``."""
        undo = self._inject_bug()
        cfg = self.cfg
        try:
            self.c = c = Cluster(
                self.path, brokers=cfg.brokers, seed=cfg.seed, replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
                session_timeout_ms=cfg.session_timeout_ms, heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                request_timeout_ms=cfg.request_timeout_ms, max_latency_ms=self.max_latency_ms, loss=self.loss,
            )
            try:
                for t in cfg.topics:
                    c.create_topic(t, partitions=self.partitions, replication_factor=cfg.rf,
                                   min_insync_replicas=cfg.min_isr)
                self.producer = c.producer(acks="all", request_timeout_ms=cfg.request_timeout_ms,
                                           delivery_timeout_ms=cfg.delivery_timeout_ms,
                                           enable_idempotence=cfg.idempotent)
                # One __consumer_offsets partition (a simulated cluster's default is 5): the group
                # coordinator is exercised all the same, at a fraction of the checking cost.
                c.offsets_topic_partitions = cfg.offsets_partitions
                self.consumer = c.consumer("sim", list(cfg.topics), fetch_max_wait_ms=100,
                                           auto_commit_interval_ms=cfg.auto_commit_interval_ms)
                self._t0 = c.now_ms
                self._sample()
                step = 0
                while True:
                    if cfg.steps is not None and step >= cfg.steps:
                        break
                    if cfg.duration_ms is not None and self._now() >= cfg.duration_ms:
                        break
                    self._step = step
                    what = self._act()
                    self._sample()
                    self._advance(self.rng.choice(STEP_MS))
                    self._action = what + " +time"
                    self.check(step, self._action)
                    step += 1
                self.stats["steps"] = step
                self._settle(step)
                self.stats["virtual_ms"] = self._now()
                self.stats["commits_seen"] = len(self.committed)
                self.stats["epoch_bumps"] = self.producer.epoch_bumps
            finally:
                c.close()
        finally:
            undo()
        if self.trace is not None:
            self.trace.end_ms = self.stats["virtual_ms"]
            self.stats["leader_changes"] = len(self.trace.leader_changes)
        return SimResult(self.cfg, dict(self.violations), dict(self.stats), self.trace)

    def _inject_bug(self) -> Callable[[], None]:
        if self.bug == "no-epoch-truncation":
            orig_ofle = Partition.__dict__["on_offsets_for_leader_epoch"]

            def keep_log(part: Partition, resp: Any) -> bool:
                if part.role != FOLLOWER or part.follower_state != TRUNCATING or resp.error is not None:
                    return False
                part.follower_state = FETCHING
                return True

            Partition.on_offsets_for_leader_epoch = keep_log  # type: ignore[method-assign,assignment]  # a patched bug

            def undo() -> None:
                Partition.on_offsets_for_leader_epoch = orig_ofle  # type: ignore[method-assign]

            return undo
        if self.bug == "hw-ignores-followers":
            orig = Partition.__dict__["maybe_increment_hw"]

            def commit_alone(part: Partition, now_ms: int) -> bool:
                if part.role == LEADER and part.log.log_end_offset > part.high_watermark:
                    part.high_watermark = part.log.log_end_offset
                    return True
                return False

            Partition.maybe_increment_hw = commit_alone  # type: ignore[method-assign,assignment]  # a patched bug

            def undo2() -> None:
                Partition.maybe_increment_hw = orig  # type: ignore[method-assign]

            return undo2
        return lambda: None

    def _now(self) -> int:
        assert self.c is not None
        return self.c.now_ms - self._t0

    def _advance(self, ms: int) -> None:
        assert self.c is not None
        if self.trace is None:
            self.c.advance(ms)
            return
        end = self.c.now_ms + ms
        while self.c.now_ms < end:
            self.c.advance(min(self.sample_ms, end - self.c.now_ms))
            self._sample()

    def _event(self, kind: str, **detail: Any) -> None:
        if self.trace is not None:
            self.trace.events.append({"t": self._now(), "kind": kind, **detail})

    def _all_in_sync(self, but: Optional[int] = None) -> bool:
        # Every broker up, registered with the controller under its current incarnation
        # (a restarted broker is dropped from ISRs at registration), and every ISR full again
        # (``but``: except that broker, which may be missing from ISRs).
        c = self.c
        assert c is not None
        registered = all(c.store.broker_incarnations.get(b) == c.brokers[b].incarnation for b in c.brokers)
        full = all(set(st.replicas) - {but} <= set(st.isr) and st.leader >= 0 for st in c.store.partitions.values())
        return registered and full and not any(self.down.values())

    def _act(self) -> str:
        """Pick and run one action (the thresholds fall through exactly as the original driver's did)."""
        c, cfg, rng = self.c, self.cfg, self.rng
        assert c is not None
        assert isinstance(c.transport, SimulatedNetwork)  # a seeded cluster's (narrows c.transport below)
        n = cfg.brokers
        roll = rng.random()
        cut = cfg.produce_rate
        if roll < cut:
            k = rng.randint(1, cfg.max_burst)
            for _ in range(k):
                self.stats["produced"] += 1
                value = b"s%d-%d" % (cfg.seed, self.stats["produced"])
                topic = cfg.topics[0] if len(cfg.topics) == 1 else rng.choice(cfg.topics)
                self.futures.append((self.producer.send(topic, value, partition=rng.randrange(self.partitions)), value))
            return f"produce {k}"
        cut += cfg.crash_rate + cfg.stop_rate
        if roll < cut and self._all_in_sync() and not c.transport.blocked and not self.disk_failed:
            leader = c.store.partitions[(cfg.topics[0], 0)].leader
            controller = c.store.controller_id if c.store.controller_id is not None else leader  # none: metadata fault
            target = rng.choice([leader, controller, rng.randrange(n)])
            stops = cfg.crash_rate + cfg.stop_rate
            clean = rng.random() < (cfg.stop_rate / stops if stops else 0.0)
            self._event("stop" if clean else "crash", broker=target)
            c.stop_broker(target, clean=clean)
            self.down[target] = True
            self.stats["stops" if clean else "crashes"] += 1
            return f"stop {target} clean={clean}"
        cut += cfg.restart_rate
        if roll < cut and (any(self.down.values()) or self.disk_failed):
            b = rng.choice([b for b, d in self.down.items() if d] + list(self.disk_failed))
            if b in self.disk_failed:
                # Its crash must be the only fault, as any crash here: every other replica in sync.
                if not self._all_in_sync(but=b) or c.transport.blocked:
                    return ""
                self._replace_disk(b)
                return f"replace disk {b}"
            c.start_broker(b)
            self._event("start", broker=b)
            self.down[b] = False
            self.stats["restarts"] += 1
            return f"start {b}"
        cut += cfg.partition_rate
        if roll < cut and not c.transport.blocked:
            a = rng.randrange(n)
            one_way = rng.random() < 0.3
            c.partition_network([a], [x for x in range(n) if x != a], one_way=one_way)
            self._event("partition", broker=a, one_way=one_way)
            self.stats["partitions"] += 1
            return f"partition {a} one_way={one_way}"
        cut += cfg.heal_rate
        if roll < cut:
            if c.transport.blocked:
                self._event("heal")
            c.heal_network()
            self.stats["heals"] += 1
            return "heal"
        cut += cfg.slow_rate
        if roll < cut:
            b = rng.randrange(n)
            ms = rng.choice([0, 50, 400])
            c.transport.slow(b, ms)
            self._event("slow", broker=b, extra_ms=ms)
            self.stats["slows"] += 1
            return f"slow {b}"
        cut += cfg.disk_fail_rate
        if roll < cut and self._all_in_sync() and not c.transport.blocked and not self.disk_failed:
            # Like a crash, only while every replica is in sync: the broker keeps running, but
            # every write and fsync of its disk fails until the disk is replaced (a restart step).
            b = rng.choice([c.store.partitions[(cfg.topics[0], 0)].leader, rng.randrange(n)])
            disk = c.brokers[b].disk
            assert isinstance(disk, SimDisk)  # a seeded cluster's
            disk.fail_errno = rng.choice([errno.ENOSPC, errno.EIO])
            disk.fail_write_after = disk.writes
            disk.fail_fsync_after = disk.fsyncs
            self.disk_failed[b] = None
            self._event("disk_fail", broker=b)
            self.stats["disk_failures"] += 1
            return f"disk fail {b}"
        cut += cfg.metadata_fail_rate
        if roll < cut:
            # The controller's metadata file cannot be written (a full disk): no controller change
            # can be stored, so the controller stops acting until the next such step heals it.
            # Loses no data, so (like a network partition) it may come on top of other faults.
            if self._metadata_failing():
                self._fail_metadata(False)
                return "metadata heal"
            self._fail_metadata(True)
            self.stats["metadata_failures"] += 1
            return "metadata fail"
        cut += cfg.drop_rate
        if roll < cut:
            link = c.transport.drop_random_connection(rng)
            if link is None:
                return ""
            self._event("drop", link=[str(x) for x in link])
            self.stats["connection_drops"] += 1
            return f"drop connection {link[0]}-{link[1]}"
        cut += cfg.client_cut_rate
        if roll < cut:
            client = rng.choice([self.producer, self.consumer])._node.node_id
            b = rng.randrange(n)
            way = rng.choice(["to", "from", "both"])
            if way == "to":
                c.transport.partition([client], [b], one_way=True)  # its requests are lost
            elif way == "from":
                c.transport.partition([b], [client], one_way=True)  # the replies are lost
            else:
                c.transport.partition([client], [b])
            self._event("client_cut", broker=b, way=way)
            self.stats["client_cuts"] += 1
            return f"cut {client} {way} {b}"
        cut += cfg.commit_rate
        if roll < cut:
            self.consumer.commit_async()
            self.stats["commits"] += 1
            return "commit"
        return ""

    def _metadata_failing(self) -> bool:
        assert self.c is not None
        return self.c.store.io.fail_write_after is not None  # type: ignore[attr-defined]

    def _fail_metadata(self, fail: bool) -> None:
        assert self.c is not None
        disk = self.c.store.io
        disk.fail_errno = errno.ENOSPC  # type: ignore[attr-defined]
        disk.fail_write_after = disk.writes if fail else None  # type: ignore[attr-defined]
        self._event("metadata_fail" if fail else "metadata_heal")

    def _replace_disk(self, b: int) -> None:
        """The operator's answer to a failed disk: the broker dies (unsynced bytes lost, as in a
        crash), the disk works again, the broker restarts and recovers from its files."""
        c = self.c
        assert c is not None
        self._event("crash", broker=b)
        c.stop_broker(b, clean=False)
        disk = c.brokers[b].disk
        assert isinstance(disk, SimDisk)  # a seeded cluster's
        disk.fail_write_after = disk.fail_fsync_after = None
        del self.disk_failed[b]
        self.stats["crashes"] += 1
        c.start_broker(b)
        self._event("start", broker=b)
        self.stats["restarts"] += 1

    def _settle(self, step: int) -> None:
        """Heal, restart everyone, finish every send, check, run 5 s, check, read everything back."""
        c = self.c
        assert c is not None
        assert isinstance(c.transport, SimulatedNetwork)  # a seeded cluster's (narrows c.transport below)
        self._step = step
        self._event("settle")
        if c.transport.blocked:
            self._event("heal")
        c.heal_network()
        if self._metadata_failing():
            self._fail_metadata(False)
        c.transport.loss = 0.0
        for b in range(self.cfg.brokers):
            c.transport.slow(b, 0)
            if self.down.get(b):
                c.start_broker(b)
                self._event("start", broker=b)
                self.down[b] = False
        for b in list(self.disk_failed):
            # The other replicas catch up first (the broker keeps serving what it has), so its
            # crash is the only fault; then the disk is replaced.
            for _ in range(60):
                if self._all_in_sync(but=b):
                    break
                self._advance(500)
            self._replace_disk(b)
        for fut, _ in list(self.futures):
            try:
                fut.result()
            except Exception:  # noqa: BLE001 - a failed send is allowed; only acks are promised
                pass
        self._sample()
        self.check(step, "settle")
        self._advance(5_000)
        self.check(step + 1, "settled")
        self._action = "final read"
        self._step = step + 2
        tps = sorted(set(self.acked) | {tp for tp, _ in self.consumed})
        for tp in tps:
            offsets = self.acked.get(tp, {})
            self.stats["acked"] += len(offsets)
            hw = c.describe(tp[0])[tp[1]].high_watermark
            reader = c.consumer(None, [tp[0]], fetch_max_wait_ms=50)
            got: Dict[int, Optional[bytes]] = {}
            for _ in range(200):
                for r in reader.poll(0.5):
                    if r.partition == tp[1]:
                        got[r.offset] = r.value
                if len(got) >= hw:
                    break
            name = f"{tp[0]}-{tp[1]}"
            self._guard("consumer-reads-acked", lambda: _assert(
                sorted(got) == list(range(len(got))), f"gap in the offsets read back from {name} (HW {hw})"))

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

    # ------------------------------------------------------------------ trace
    def _sample(self) -> None:
        tr, c = self.trace, self.c
        if tr is None or c is None:
            return
        t = self._now()
        for tp, st in sorted(c.store.partitions.items()):
            if tp[0] not in self.cfg.topics:  # internal topics (e.g. group offsets) are checked, not traced
                continue
            name = f"{tp[0]}-{tp[1]}"
            pt = tr.partitions.get(name)
            if pt is None:
                pt = tr.partitions[name] = PartitionTrace(replicas=list(st.replicas))
                for r in range(self.cfg.brokers):
                    pt.leo[r], pt.hw[r] = [], []
            if pt.epoch and st.leader_epoch > pt.epoch[-1]:
                tr.leader_changes.append({"t": t, "tp": name, "leader": st.leader, "epoch": st.leader_epoch})
            if pt.times and pt.times[-1] == t:  # same instant: the newer sample wins
                pt.times.pop()
                pt.isr.pop(), pt.leader.pop(), pt.epoch.pop()
                for r in pt.leo:
                    pt.leo[r].pop(), pt.hw[r].pop()
            pt.times.append(t)
            pt.isr.append(sorted(st.isr))
            pt.leader.append(st.leader)
            pt.epoch.append(st.leader_epoch)
            for r in pt.leo:
                b = c.brokers[r]
                part = b.rm.partitions.get(tp) if b.running and b.rm is not None else None
                pt.leo[r].append(part.log_end_offset if part is not None else None)
                pt.hw[r].append(part.high_watermark if part is not None else None)

    # ------------------------------------------------------------------ checks
    def _violate(self, name: str, message: str) -> None:
        v = Violation(name, self.cfg.seed, self._step, self._now() if self.c is not None else 0, self._action, message)
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
        self._step, self._action = step, what
        self._guard("acked-writes-kept", self._harvest)
        self._guard("component-invariants", self._check_components)
        self._guard("replicas-agree-below-hw", self._check_agreement)
        self._guard("leader-epochs-only-grow", self._check_controller_epochs)
        self._check_replicas()
        self._check_consumer()
        self._guard("commits-never-move-back", self._check_commits)

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


def _assert(cond: bool, message: str) -> None:
    if not cond:
        raise AssertionError(message)


# --------------------------------------------------------------------------- the picture

#: Colours per broker (matplotlib's tab10 order) and per fault kind.
_FAULT_COLOURS = {"crash": "#d62728", "stop": "#ff7f0e"}
_EVENT_LINES = {"crash": ("#d62728", "-"), "stop": ("#ff7f0e", "-"), "start": ("#2ca02c", "--")}


def plot_trace(trace: Trace, out_path: str, *, partitions: Optional[Sequence[str]] = None,
               title: str = "", violations: Sequence[Violation] = ()) -> List[str]:
    """Draw ``trace`` to a PNG at ``out_path``; returns the partitions drawn.

    One panel pair per partition: on top each replica's LEO (solid) and HW
    (dashed) as step lines over virtual time, leader changes as vertical lines
    labelled with the new epoch and leader, network partitions shaded; below,
    one band per replica: in the ISR (filled), leader (dark), broker down
    (hatched red for a crash, orange for a clean stop), slowed (marker).

    Needs matplotlib (the ``plot`` extra); raises ImportError without it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    names = list(partitions) if partitions else sorted(trace.partitions, key=partition_sort_key)
    for n in names:
        if n not in trace.partitions:
            raise InvalidConfigurationError(f"no partition {n!r} in the trace; have {', '.join(sorted(trace.partitions))}")
    cmap = plt.get_cmap("tab10")
    assert isinstance(cmap, ListedColormap)  # tab10 is a list of 10 colours
    colours = cast(Sequence[Tuple[float, float, float]], cmap.colors)  # ten RGB tuples (typed ArrayLike)
    end_s = max(trace.end_ms, 1) / 1000.0
    down_spans = _down_spans(trace)
    net_spans = _network_spans(trace)
    slow_spans = _slow_spans(trace)
    n_handles = trace.brokers + 13  # the legend below: brokers, 6 line and 7 patch entries
    legend_h = 0.2 * -(-n_handles // 8)  # inches: one row per 8 entries
    fig_h = 0.85 + legend_h + 4.4 * len(names)
    fig = plt.figure(figsize=(13, fig_h), dpi=100)
    heights: List[float] = []
    for _ in names:
        heights += [3.0, 0.35 * trace.brokers + 0.4]
    gs = fig.add_gridspec(len(heights), 1, height_ratios=heights, hspace=0.12)
    axes = []
    for i, name in enumerate(names):
        pt = trace.partitions[name]
        ax = fig.add_subplot(gs[2 * i])
        band = fig.add_subplot(gs[2 * i + 1], sharex=ax)
        axes.append((ax, band))
        ts = [t / 1000.0 for t in pt.times]
        top = max([v for r in pt.replicas for v in pt.leo[r] if v is not None] or [1])
        for s, e, ev in net_spans:
            ax.axvspan(s, e, color="#9aa5b1", alpha=0.22, lw=0)
            if e - s < end_s * 0.06:
                continue  # too narrow for a label; the band below still shows who was cut off
            label = f"b{ev['broker']} cut off" + (" (one way)" if ev.get("one_way") else "")
            ax.text((s + e) / 2, 0.03, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                    fontsize=7, color="#44505c", clip_on=True)
        # Replicas that agree draw on top of each other: the first replica's line is
        # the widest, so every colour stays visible where the lines coincide.
        widths = [4.2, 2.6, 1.2, 0.8, 0.6]
        for k, r in enumerate(pt.replicas):
            ax.plot(ts, _nan(pt.leo[r]), drawstyle="steps-post", color=colours[r % len(colours)],
                    lw=widths[min(k, len(widths) - 1)], solid_capstyle="butt")
        for k, r in enumerate(pt.replicas):
            ax.plot(ts, _nan(pt.hw[r]), drawstyle="steps-post", color=colours[r % len(colours)], lw=1.1,
                    ls=(0, (3, 2)), alpha=0.95)
        ax.set_ylim(-0.03 * top - 0.5, top * 1.18 + 1)
        for ev in trace.events:
            if ev["kind"] in _EVENT_LINES:
                col, ls = _EVENT_LINES[ev["kind"]]
                ax.axvline(ev["t"] / 1000.0, color=col, lw=1.1, ls=ls, alpha=0.75)
        for lc in trace.leader_changes:
            if lc["tp"] != name:
                continue
            x = lc["t"] / 1000.0
            ax.axvline(x, color="#222222", lw=1.0, ls=":")
            band.axvline(x, color="#222222", lw=1.0, ls=":")
            ax.text(x, 0.985, f"e{lc['epoch']}\u2192b{lc['leader']}", transform=ax.get_xaxis_transform(),
                    rotation=90, va="top", ha="right", fontsize=7.5, color="#111111",
                    bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.8))
        ax.set_ylabel("offset")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{name}   (replicas {', '.join(map(str, pt.replicas))})", loc="left", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        plt.setp(ax.get_xticklabels(), visible=False)
        # ISR / leader / down bands.
        rows = list(pt.replicas)
        for row, r in enumerate(rows):
            y = len(rows) - 1 - row
            rgb = colours[r % len(colours)]
            band.broken_barh(_runs(pt.times, [r in isr for isr in pt.isr], trace.end_ms), (y - 0.35, 0.7),
                             facecolors=rgb, alpha=0.45, lw=0)
            band.broken_barh(_runs(pt.times, [lead == r for lead in pt.leader], trace.end_ms), (y - 0.35, 0.7),
                             facecolors=rgb, alpha=1.0, lw=0)
            for s, e, kind in down_spans.get(r, []):
                band.broken_barh([(s, max(e - s, end_s * 0.004))], (y - 0.42, 0.84), facecolors="none",
                                 edgecolors=_FAULT_COLOURS[kind], hatch="//", lw=0.8)
            for s, e, ev in net_spans:
                if ev["broker"] == r:
                    band.broken_barh([(s, e - s)], (y - 0.5, 0.13), facecolors="#44505c", lw=0)
            for s, e in slow_spans.get(r, []):
                band.broken_barh([(s, e - s)], (y + 0.37, 0.13), facecolors="#8c564b", lw=0)
        band.set_yticks(range(len(rows)))
        band.set_yticklabels([f"b{r}" for r in reversed(rows)], fontsize=8)
        band.set_ylim(-0.6, len(rows) - 0.4)
        band.set_xlim(0, end_s)
        ax.set_xlim(0, end_s)
        band.set_ylabel("ISR", fontsize=8)
        if i < len(names) - 1:
            plt.setp(band.get_xticklabels(), visible=False)
        else:
            band.set_xlabel("virtual time (s)")
    by_time: Dict[int, List[str]] = {}
    for v in violations:
        by_time.setdefault(v.t_ms, []).append(v.invariant)
    for k, (t_ms, invs) in enumerate(sorted(by_time.items())):
        for ax, band in axes:
            ax.axvline(t_ms / 1000.0, color="#d62728", lw=2.2)
            band.axvline(t_ms / 1000.0, color="#d62728", lw=2.2)
        ax0 = axes[0][0]
        ax0.text(t_ms / 1000.0, 0.90 - 0.09 * (k % 5), f" FAIL {', '.join(invs)} (t={t_ms / 1000:.3f}s)",
                 transform=ax0.get_xaxis_transform(), color="#d62728", fontsize=8, ha="left", va="top",
                 bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="#d62728", alpha=0.9))
    settle = [ev["t"] for ev in trace.events if ev["kind"] == "settle"]
    if settle:
        for ax, band in axes:
            ax.axvspan(settle[0] / 1000.0, end_s, color="#2ca02c", alpha=0.06, lw=0)
            ax.text(settle[0] / 1000.0, 0.5, " settle: heal, restart all, read back", transform=ax.get_xaxis_transform(),
                    fontsize=7, color="#2c6e2c", rotation=90, va="center", ha="left")
    handles: List[Artist] = [Line2D([], [], color=colours[r % len(colours)], lw=2.5, label=f"broker {r}")
               for r in range(trace.brokers)]
    handles += [
        Line2D([], [], color="#555555", lw=2.2, label="log end offset"),
        Line2D([], [], color="#555555", lw=1.1, ls=(0, (3, 2)), label="high watermark"),
        Line2D([], [], color="#222222", lw=1.0, ls=":", label="leader change (epoch\u2192broker)"),
        Line2D([], [], color="#d62728", lw=1.1, label="crash"),
        Line2D([], [], color="#ff7f0e", lw=1.1, label="clean stop"),
        Line2D([], [], color="#2ca02c", lw=1.1, ls="--", label="restart"),
        Patch(facecolor="#9aa5b1", alpha=0.35, label="network partition"),
        Patch(facecolor="#888888", alpha=0.45, label="in ISR"),
        Patch(facecolor="#888888", alpha=1.0, label="leader"),
        Patch(facecolor="white", edgecolor=_FAULT_COLOURS["crash"], hatch="//", label="down (crash)"),
        Patch(facecolor="white", edgecolor=_FAULT_COLOURS["stop"], hatch="//", label="down (clean stop)"),
        Patch(facecolor="#44505c", label="cut off (band bottom)"),
        Patch(facecolor="#8c564b", label="slowed (band top)"),
    ]
    fig.legend(handles=handles, loc="upper center", ncol=8, fontsize=8.5, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.25 / fig_h))
    if title:
        fig.suptitle(title, y=1 - 0.02 / fig_h, fontsize=11)
    fig.subplots_adjust(left=0.06, right=0.99, top=1 - (0.55 + legend_h) / fig_h, bottom=0.55 / fig_h)
    fig.savefig(out_path, format="png")
    plt.close(fig)
    return names


def partition_sort_key(name: str) -> Tuple[str, int]:
    """``"orders-10"`` -> ``("orders", 10)``: partitions in numeric order."""
    topic, _, p = name.rpartition("-")
    return (topic, int(p)) if p.isdigit() else (name, -1)


def _nan(values: Sequence[Optional[int]]) -> List[float]:
    return [float("nan") if v is None else float(v) for v in values]


def _runs(times: Sequence[int], flags: Sequence[bool], end_ms: int) -> List[Tuple[float, float]]:
    """(start s, width s) of each run of True flags, each sample holding until the next."""
    out: List[Tuple[float, float]] = []
    start: Optional[int] = None
    for i, (t, f) in enumerate(zip(times, flags)):
        if f and start is None:
            start = t
        elif not f and start is not None:
            out.append((start / 1000.0, (t - start) / 1000.0))
            start = None
    if start is not None:
        out.append((start / 1000.0, (max(end_ms, start) - start) / 1000.0))
    return out


def _down_spans(trace: Trace) -> Dict[int, List[Tuple[float, float, str]]]:
    """broker -> [(start s, end s, "crash"|"stop")] from the stop/crash and start events."""
    open_: Dict[int, Tuple[int, str]] = {}
    out: Dict[int, List[Tuple[float, float, str]]] = {}
    for ev in trace.events:
        if ev["kind"] in ("crash", "stop"):
            open_[ev["broker"]] = (ev["t"], ev["kind"])
        elif ev["kind"] == "start" and ev["broker"] in open_:
            t, kind = open_.pop(ev["broker"])
            out.setdefault(ev["broker"], []).append((t / 1000.0, ev["t"] / 1000.0, kind))
    for b, (t, kind) in open_.items():
        out.setdefault(b, []).append((t / 1000.0, trace.end_ms / 1000.0, kind))
    return out


def _slow_spans(trace: Trace) -> Dict[int, List[Tuple[float, float]]]:
    """broker -> [(start s, end s)] while its messages were delayed."""
    since: Dict[int, int] = {}
    out: Dict[int, List[Tuple[float, float]]] = {}
    for ev in trace.events:
        if ev["kind"] == "slow" or (ev["kind"] == "settle"):
            brokers = [ev["broker"]] if ev["kind"] == "slow" else list(since)
            for b in brokers:
                if b in since:
                    out.setdefault(b, []).append((since.pop(b) / 1000.0, ev["t"] / 1000.0))
            if ev["kind"] == "slow" and ev["extra_ms"] > 0:
                since[ev["broker"]] = ev["t"]
    for b, t in since.items():
        out.setdefault(b, []).append((t / 1000.0, trace.end_ms / 1000.0))
    return out


def _network_spans(trace: Trace) -> List[Tuple[float, float, Dict[str, Any]]]:
    out: List[Tuple[float, float, Dict[str, Any]]] = []
    cur: Optional[Dict[str, Any]] = None
    for ev in trace.events:
        if ev["kind"] == "partition" and cur is None:
            cur = ev
        elif ev["kind"] == "heal" and cur is not None:
            out.append((cur["t"] / 1000.0, ev["t"] / 1000.0, cur))
            cur = None
    if cur is not None:
        out.append((cur["t"] / 1000.0, trace.end_ms / 1000.0, cur))
    return out


__all__ = ["BUGS", "INVARIANTS", "PartitionTrace", "partition_sort_key", "SimConfig", "SimResult", "Simulation", "SimulationViolation",
           "Trace", "Violation", "plot_trace"]
