"""The record of a simulation: each replica's LEO and HW over virtual time, ISRs, leaders, fault events.

:func:`sample` takes one sample of a cluster; :class:`Trace` serializes to JSON (``pylog sim --trace``)
and hashes (:meth:`Trace.digest`, equal for two runs of one seed); :mod:`pylog.simulation.plot` draws it.

Thread-safety: none; one simulation thread.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

if TYPE_CHECKING:
    from pylog.cluster import Cluster


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


def sample(tr: Trace, c: "Cluster", topics: Sequence[str], brokers: int, t: int) -> None:
    """Record one sample at virtual time ``t`` (ms since the start): every replica's LEO and HW, the
    controller's ISR, leader and epoch of each partition of ``topics``, and any leader change since the
    last sample. A second sample at the same ``t`` replaces the first.

    Complexity: O(partitions x brokers). Reads the cluster, changes nothing.
    """
    for tp, st in sorted(c.store.partitions.items()):
        if tp[0] not in topics:  # internal topics (e.g. group offsets) are checked, not traced
            continue
        name = f"{tp[0]}-{tp[1]}"
        pt = tr.partitions.get(name)
        if pt is None:
            pt = tr.partitions[name] = PartitionTrace(replicas=list(st.replicas))
            for r in range(brokers):
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
