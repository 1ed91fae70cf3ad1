"""The simulation driver: builds a seeded cluster, runs random fault steps, settles, and reports.

See :mod:`pylog.simulation` for what a run does. The driver owns the cluster,
its clients and the fault actions; :class:`~pylog.simulation.invariants.Invariants`
checks after every step; :mod:`pylog.simulation.trace` records the timeline. A
known replication bug (:mod:`pylog.simulation.bugs`) is a strategy the driver
gives the cluster (the class it builds partitions with): nothing is patched.

Complexity: O(steps x partitions x brokers) checks plus the cluster's own work.
Durability: the cluster's files live under ``path`` (simulated disks: a crash
drops unsynced bytes from them).
Thread-safety: none; a simulation runs on the calling thread only.
"""
from __future__ import annotations

import errno
import logging
import random
from dataclasses import dataclass
from typing import Any, Dict, Optional

from pylog.cluster import Cluster
from pylog.record.types import ATTR_CONTROL
from pylog.runtime.broker import SimDisk
from pylog.runtime.transport.simnet import SimulatedNetwork
from pylog.simulation.bugs import Bug, bug_named
from pylog.simulation.config import STEP_MS, SimConfig
from pylog.simulation.invariants import Invariants, Violation
from pylog.simulation.txn import TxnActor, TxnReadChecks, leader_log
from pylog.simulation.trace import Trace, sample

log = logging.getLogger(__name__)


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


class Simulation:
    """One seeded run; see the module docstring. ``run()`` once, then read the :class:`SimResult`."""

    def __init__(self, path: str, config: SimConfig, *, trace: bool = False, sample_ms: int = 20,
                 stop_on_violation: bool = False, bug: "str | Bug | None" = None):
        config.validate()
        self.path = path
        self.cfg = config
        #: the injected replication bug (a strategy the cluster builds its partitions with), or None
        self.bug: Optional[Bug] = bug_named(bug) if isinstance(bug, str) else bug
        self.stop_on_violation = stop_on_violation
        self.sample_ms = sample_ms
        self.rng = random.Random(config.seed ^ 0x5EED)
        rng = self.rng
        self.partitions = config.partitions or rng.choice([1, 1, 2])
        self.loss = config.loss if config.loss is not None else rng.choice([0.0, 0.0, 0.01, 0.05])
        self.max_latency_ms = config.max_latency_ms if config.max_latency_ms is not None else rng.choice([2, 5, 20])
        self.trace: Optional[Trace] = Trace(config.brokers) if trace else None
        self.stats = {"crashes": 0, "stops": 0, "partitions": 0, "acked": 0, "restarts": 0, "heals": 0,
                      "slows": 0, "produced": 0, "steps": 0, "virtual_ms": 0, "leader_changes": 0,
                      "disk_failures": 0, "metadata_failures": 0, "connection_drops": 0, "client_cuts": 0,
                      "commits": 0, "commits_seen": 0, "epoch_bumps": 0}
        self.inv = Invariants(config, lambda: self._now() if self.c is not None else 0,
                              stop_on_violation=stop_on_violation)
        self.down: Dict[int, bool] = {}
        self.disk_failed: Dict[int, None] = {}  # brokers whose disk fails every write (insertion-ordered)
        self._t0 = 0
        self.c: Optional[Cluster] = None
        self.producer: Any = None
        self.consumer: Any = None
        self.txn: Optional[TxnActor] = None

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        """Run every step and the settle phase; raise :class:`SimulationViolation` only with ``stop_on_violation``."""
        cfg = self.cfg
        self.c = c = Cluster(
            self.path, brokers=cfg.brokers, seed=cfg.seed, replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
            session_timeout_ms=cfg.session_timeout_ms, heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            request_timeout_ms=cfg.request_timeout_ms, max_latency_ms=self.max_latency_ms, loss=self.loss,
            partition_factory=self.bug.partition_class if self.bug is not None else None,
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
            self.inv.c, self.inv.consumer = c, self.consumer
            if cfg.txn_rate > 0:
                self.txn = TxnActor(c, cfg.seed, cfg.topics, self.partitions, self.rng,
                                    request_timeout_ms=cfg.request_timeout_ms,
                                    delivery_timeout_ms=cfg.delivery_timeout_ms)
                self.txn.start()
                self.inv.txn = self.txn
            self._t0 = c.now_ms
            self._sample()
            step = 0
            while True:
                if cfg.steps is not None and step >= cfg.steps:
                    break
                if cfg.duration_ms is not None and self._now() >= cfg.duration_ms:
                    break
                self.inv.step = step
                what = self._act()
                log.debug("seed %d step %d t=%d ms: %s", cfg.seed, step, self._now(), what or "-")
                self._sample()
                self._advance(self.rng.choice(STEP_MS))
                self.inv.action = what + " +time"
                self.check(step, self.inv.action)
                step += 1
            self.stats["steps"] = step
            self._settle(step)
            self.stats["virtual_ms"] = self._now()
            self.stats["commits_seen"] = len(self.inv.committed)
            self.stats["epoch_bumps"] = self.producer.epoch_bumps
            if self.txn is not None:
                self.stats.update(self.txn.stats)
        finally:
            if self.txn is not None:
                self.txn.close()
            c.close()
        if self.trace is not None:
            self.trace.end_ms = self.stats["virtual_ms"]
            self.stats["leader_changes"] = len(self.trace.leader_changes)
        return SimResult(self.cfg, dict(self.inv.violations), dict(self.stats), self.trace)

    def check(self, step: int, what: str) -> None:
        """Check every invariant now; record (or raise) the first violation of each (:class:`Invariants`)."""
        self.inv.check(step, what)

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
                self.inv.futures.append((self.producer.send(topic, value, partition=rng.randrange(self.partitions)), value))
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
            clients = [self.producer, self.consumer]
            if self.txn is not None:
                clients += [self.txn.producer, self.txn.consumer]
            client = rng.choice(clients)._node.node_id
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
        cut += cfg.txn_rate
        if roll < cut and self.txn is not None:
            return self.txn.act()
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
        self.inv.step = step
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
        if self.txn is not None:
            self.txn.settle()
        for fut, _ in list(self.inv.futures):
            try:
                fut.result()
            except Exception:  # noqa: BLE001 - a failed send is allowed; only acks are promised
                pass
        self._sample()
        self.check(step, "settle")
        self._advance(5_000)
        self.check(step + 1, "settled")
        self.inv.action = "final read"
        self.inv.step = step + 2
        tps = sorted(set(self.inv.acked) | {tp for tp, _ in self.inv.consumed})
        if self.txn is not None:
            tps = [(t, p) for t in self.cfg.topics for p in range(self.partitions)]
        for tp in tps:
            self.stats["acked"] += len(self.inv.acked.get(tp, {}))
            hw = c.describe(tp[0])[tp[1]].high_watermark
            control = self._control_offsets(tp, hw)
            reader = c.consumer(None, [tp[0]], fetch_max_wait_ms=50)
            got: Dict[int, Optional[bytes]] = {}
            for _ in range(200):
                for r in reader.poll(0.5):
                    if r.partition == tp[1]:
                        got[r.offset] = r.value
                if len(got) + len(control) >= hw:
                    break
            self.inv.check_read_back(tp, got, hw, reader, control)
        if self.txn is not None:
            self._read_committed_back()

    def _control_offsets(self, tp: Any, hw: int) -> set:
        """Offsets of the control batches (transaction markers) below ``hw`` in ``tp``'s leader log."""
        if self.txn is None or self.c is None:
            return set()
        p = leader_log(self.c, tp)
        if p is None:
            return set()
        return {o for i in p.log.read_batch_infos(0, hw) if i.attributes & ATTR_CONTROL
                for o in range(i.base_offset, i.last_offset + 1)}

    def _read_committed_back(self) -> None:
        """A fresh read_committed consumer reads every partition to its HW; see
        :meth:`Invariants.check_read_committed_back`."""
        c = self.c
        assert c is not None
        tps = [(t, p) for t in self.cfg.topics for p in range(self.partitions)]
        hws = {tp: c.describe(tp[0])[tp[1]].high_watermark for tp in tps}
        reader = c.consumer(None, list(self.cfg.topics), isolation_level="read_committed", fetch_max_wait_ms=50)
        checks = TxnReadChecks("final read_committed consumer")
        got: Dict[Any, Dict[int, Optional[bytes]]] = {tp: {} for tp in tps}
        for _ in range(400):
            records = reader.poll(0.5)
            problems = checks.saw(c, records)
            if problems:
                self.inv._violate("read-committed-only", problems[0])
            for r in records:
                got[(r.topic, r.partition)][r.offset] = r.value
            if not records and all(reader.position(tp[0], tp[1]) >= hw for tp, hw in hws.items()):
                break
        self.inv.check_read_committed_back(got, checks)
        reader.close(autocommit=False)

    def _sample(self) -> None:
        if self.trace is not None and self.c is not None:
            sample(self.trace, self.c, self.cfg.topics, self.cfg.brokers, self._now())
