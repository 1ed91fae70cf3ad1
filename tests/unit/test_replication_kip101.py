"""KIP-101's two failure scenarios and KIP-279's fast-fail-over scenario, step by step with exact offsets.

Each scenario is driven by hand on :class:`Partition` objects (no controller,
no network): we deliver exactly the requests and responses the KIP's figures
describe. With epoch-based truncation the committed data survives and the
replicas converge; with the test-only switch
``Partition.truncate_to_hw_on_become_follower`` (Kafka's pre-0.11 behaviour)
the same steps lose a committed record (scenario 1) or leave the replicas
diverged (scenario 2) - the tests assert both outcomes.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import pytest

from pylog.replication.messages import PartitionState
from pylog.replication.partition import FETCHING, Partition
from pylog.runtime.broker import SimDisk
from pylog.storage.log import Log

A, B = 0, 1
TOPIC = "t"


class Replica:
    """One broker's replica of partition t-0 on its own simulated disk."""

    def __init__(self, root: str, broker_id: int):
        self.broker_id = broker_id
        self.disk = SimDisk()
        self.dir = os.path.join(root, f"broker-{broker_id}", f"{TOPIC}-0")
        self.hw_checkpoint = 0
        self.part: Optional[Partition] = None
        self.open()

    def open(self) -> None:
        log = Log.open(self.dir, file_io=self.disk, clock_ms=lambda: 1000)
        self.part = Partition(self.broker_id, log, high_watermark=self.hw_checkpoint)

    def checkpoint_hw(self) -> None:
        self.hw_checkpoint = self.part.high_watermark

    def restart(self, *, power_loss: bool = False) -> None:
        """Process restart: the page cache survives unless ``power_loss``; HW comes from the checkpoint."""
        if power_loss:
            self.part.log.abandon()
            self.disk.crash()
        else:
            self.part.log.close()
        self.open()

    def values(self) -> List[Tuple[int, bytes]]:
        return [(r.offset, r.value) for r in self.part.log.read(0)] if self.part.log.log_end_offset else []


def state(leader: int, epoch: int, isr=(A, B), pepoch: Optional[int] = None) -> PartitionState:
    return PartitionState(TOPIC, 0, (A, B), leader, epoch, tuple(isr), epoch if pepoch is None else pepoch, 1)


def truncate_and_fetch(follower: Replica, leader: Replica, now: int = 0, deliver: bool = True) -> None:
    """Let ``follower`` finish its OffsetsForLeaderEpoch exchange, then do one fetch round."""
    f, lp = follower.part, leader.part
    for _ in range(10):
        req = f.next_follower_request(1)
        if f.follower_state == FETCHING:
            break
        f.on_offsets_for_leader_epoch(lp.handle_offsets_for_leader_epoch(req))
    req = f.next_follower_request(2)
    resp, _ = lp.handle_fetch(req, now)
    if deliver:
        f.on_fetch_response(req, resp, now)


def fetch_round(follower: Replica, leader: Replica, deliver: bool = True) -> None:
    truncate_and_fetch(follower, leader, deliver=deliver)


@pytest.fixture(autouse=True)
def _restore_switch():
    yield
    Partition.truncate_to_hw_on_become_follower = False


# --------------------------------------------------------------------- scenario 1
def scenario_1(root: str, hw_truncation: bool) -> Dict[str, object]:
    """HW truncation followed by an immediate leader election (KIP-101 figure 1)."""
    Partition.truncate_to_hw_on_become_follower = hw_truncation
    a, b = Replica(root, A), Replica(root, B)
    b.part.apply_state(state(B, 0), 0)
    a.part.apply_state(state(B, 0), 0)
    # 1. B has m1@0, m2@1; A fetches both but learns HW=1 only.
    assert b.part.append_as_leader([b"m1"], -1, 0).base_offset == 0
    fetch_round(a, b)
    assert b.part.append_as_leader([b"m2"], -1, 0).base_offset == 1
    fetch_round(a, b)
    assert a.part.log_end_offset == 2 and a.part.high_watermark == 1
    a.checkpoint_hw()
    # 2. A fetches at 2: B's HW becomes 2, m2 is committed; the response never reaches A.
    fetch_round(a, b, deliver=False)
    assert b.part.high_watermark == 2
    committed = [(0, b"m1"), (1, b"m2")]
    # 3. A restarts (HW checkpoint says 1) and becomes a follower of B again.
    a.restart()
    a.part.apply_state(state(B, 0), 0)
    if not hw_truncation:
        truncate_and_fetch(a, b, deliver=False)  # OffsetsForLeaderEpoch(0) -> (0, 2): nothing truncated
    # 4. B dies before A re-fetches m2; A is elected leader (epoch 1, ISR {A}).
    a.part.apply_state(state(A, 1, isr=(A,)), 0)
    new = a.part.append_as_leader([b"m3"], -1, 0).base_offset
    return {"committed": committed, "leader_log": a.values(), "m3_offset": new}


def assert_committed_kept(outcome: Dict[str, object]) -> None:
    log = dict(outcome["leader_log"])  # type: ignore[arg-type]
    for off, value in outcome["committed"]:  # type: ignore[union-attr]
        assert log.get(off) == value, f"committed record {value!r} at offset {off} lost: leader log {outcome['leader_log']}"


def test_kip101_scenario_1_epoch_truncation_keeps_committed_write(tmp_path):
    out = scenario_1(str(tmp_path), hw_truncation=False)
    assert out["leader_log"] == [(0, b"m1"), (1, b"m2"), (2, b"m3")]
    assert out["m3_offset"] == 2
    assert_committed_kept(out)


def test_kip101_scenario_1_hw_truncation_loses_committed_write(tmp_path):
    out = scenario_1(str(tmp_path), hw_truncation=True)
    assert out["leader_log"] == [(0, b"m1"), (1, b"m3")]  # m2 is gone, m3 took its offset
    with pytest.raises(AssertionError, match="committed record b'm2' at offset 1 lost"):
        assert_committed_kept(out)


# --------------------------------------------------------------------- scenario 2
def scenario_2(root: str, hw_truncation: bool) -> Tuple[List[Tuple[int, bytes]], List[Tuple[int, bytes]]]:
    """Replica divergence on restart after multiple hard failures (KIP-101 figure 2)."""
    Partition.truncate_to_hw_on_become_follower = hw_truncation
    a, b = Replica(root, A), Replica(root, B)
    a.part.apply_state(state(A, 0), 0)
    b.part.apply_state(state(A, 0), 0)
    # 1. A has m1@0 and m2@1 (flushed); B fetched both, HW=2 on both, B flushed only m1.
    a.part.append_as_leader([b"m1"], -1, 0)
    fetch_round(b, a)
    b.part.log.flush()
    a.part.append_as_leader([b"m2"], -1, 0)
    fetch_round(b, a)
    fetch_round(b, a)
    a.part.log.flush()
    assert a.part.high_watermark == 2 and b.part.high_watermark == 2 and b.part.log_end_offset == 2
    a.checkpoint_hw()
    b.checkpoint_hw()
    # 2. Power outage takes down both; B loses its unflushed m2.
    a.restart(power_loss=True)
    b.restart(power_loss=True)
    assert a.values() == [(0, b"m1"), (1, b"m2")]
    assert b.values() == [(0, b"m1")]
    # 3. B comes back first, is elected leader (epoch 1) and accepts m3 at offset 1.
    b.part.apply_state(state(B, 1, isr=(B,)), 0)
    assert b.part.append_as_leader([b"m3"], -1, 0).base_offset == 1
    assert b.part.log.epochs.entries == [(0, 0), (1, 1)]
    # 4. A comes back as a follower of B and replicates.
    a.part.apply_state(state(B, 1, isr=(B,), pepoch=2), 0)
    truncate_and_fetch(a, b)
    truncate_and_fetch(a, b)
    return a.values(), b.values()


def test_kip101_scenario_2_epoch_truncation_converges(tmp_path):
    a_log, b_log = scenario_2(str(tmp_path), hw_truncation=False)
    # A asked for the end of epoch 0, B answered offset 1: A dropped m2 and fetched m3.
    assert a_log == b_log == [(0, b"m1"), (1, b"m3")]


def test_kip101_scenario_2_hw_truncation_diverges(tmp_path):
    a_log, b_log = scenario_2(str(tmp_path), hw_truncation=True)
    assert a_log == [(0, b"m1"), (1, b"m2")]
    assert b_log == [(0, b"m1"), (1, b"m3")]
    with pytest.raises(AssertionError):
        assert a_log == b_log


# ------------------------------------------------------------------------ KIP-279
def test_kip279_fast_leader_changes_do_not_diverge(tmp_path):
    """logsShouldNotDivergeOnUncleanLeaderElections (research §3.10), epochs as in that trace."""
    root = str(tmp_path)
    r100, r101 = Replica(root, A), Replica(root, B)
    both = (A, B)

    def st(leader, epoch, isr):
        return PartitionState(TOPIC, 0, both, leader, epoch, isr, epoch, 1)

    r100.part.apply_state(st(A, 0, both), 0)
    r101.part.apply_state(st(A, 0, both), 0)
    r100.part.append_as_leader([b"e0"], 1, 0)
    truncate_and_fetch(r101, r100)                       # both hold [0:e0]
    r101.part.apply_state(st(B, 1, (B,)), 0)              # 100 stopped; 101 leads e1
    r101.part.append_as_leader([b"e1"], 1, 0)             # 101: [e0, e1]
    r100.part.apply_state(st(A, 2, (A,)), 0)              # unclean: 100 leads e2
    for v in (b"e2a", b"e2b", b"e2c"):
        r100.part.append_as_leader([v], 1, 0)             # 100: [e0, e2, e2, e2]
    r101.part.apply_state(st(B, 3, (B,)), 0)              # 101 leads e3
    r101.part.append_as_leader([b"e3"], 1, 0)             # 101: [e0, e1, e3]
    r100.part.apply_state(st(A, 4, (A,)), 0)              # 100 leads e4
    r100.part.append_as_leader([b"e4a"], 1, 0)
    r100.part.append_as_leader([b"e4b"], 1, 0)            # 100: [e0, e2 x3, e4 x2]
    assert r101.part.log.epochs.entries == [(0, 0), (1, 1), (3, 2)]
    r101.part.apply_state(st(A, 4, (A,)), 0)              # 101 follows 100
    # KIP-279: (e2, 4) -> 101 truncates to the end of its e1 (2) and asks for e1;
    # (e0, 1) -> truncates to 1; then fetches 1.. from 100.
    req = r101.part.next_follower_request(1)
    assert req.leader_epoch == 3
    resp = r100.part.handle_offsets_for_leader_epoch(req)
    assert (resp.leader_epoch, resp.end_offset) == (2, 4)
    assert r101.part.on_offsets_for_leader_epoch(resp) is False
    assert r101.part.log_end_offset == 2
    req = r101.part.next_follower_request(2)
    assert req.leader_epoch == 1
    resp = r100.part.handle_offsets_for_leader_epoch(req)
    assert (resp.leader_epoch, resp.end_offset) == (0, 1)
    assert r101.part.on_offsets_for_leader_epoch(resp) is True
    assert r101.part.log_end_offset == 1
    for _ in range(3):
        truncate_and_fetch(r101, r100)
    assert r101.values() == r100.values()
    assert [v for _, v in r101.values()] == [b"e0", b"e2a", b"e2b", b"e2c", b"e4a", b"e4b"]
    r100.part._check()
    r101.part._check()
