"""Correlation ids a broker's replica manager and group coordinator put on their requests are unique
across the broker's incarnations (and apart from each other), so a response to a request the
previous incarnation sent - still in flight when it crashed - never completes a request of the
restarted one (soak seed 31140: a stale fetch response was appended past a hole below the HW)."""
from __future__ import annotations

from typing import List, Set

from pylog.replication.group_coordinator import GroupCoordinator
from pylog.replication.messages import Outbox, ProduceRequest
from pylog.replication.replica_manager import ReplicaManager


def rm_ids(tmp_path, incarnation: int, n: int) -> List[int]:
    rm = ReplicaManager(0, str(tmp_path / f"rm-{incarnation}"), clock_ms=lambda: 0, incarnation=incarnation)
    return [rm._next_corr() for _ in range(n)]


def coordinator_ids(incarnation: int, n: int) -> List[int]:
    gc = GroupCoordinator(0, incarnation=incarnation)
    out = Outbox()
    for _ in range(n):
        gc._append(0, [], out, lambda resp, o, now: None)
    return [msg.correlation_id for _, msg in out.items if isinstance(msg, ProduceRequest)]


def test_ids_never_repeat_across_incarnations_or_components(tmp_path) -> None:
    seen: Set[int] = set()
    total = 0
    for incarnation in (1, 2, 3, 255, 256, 257):
        for ids in (rm_ids(tmp_path, incarnation, 50), coordinator_ids(incarnation, 50)):
            assert len(ids) == 50
            seen.update(ids)
            total += len(ids)
    assert len(seen) == total  # no id used twice by any incarnation or component
