"""KIP-360 partition states of the idempotent producer (pylog/client/accumulator.py SequenceState, sender.py).

The sender's rules on one partition, without a cluster: a numbered batch that fails with an unknown
outcome makes the partition UNRESOLVED, one the leader refused makes it GAP (and unnumbers the later
refused batches of the same identity), a gap is never downgraded to unresolved, and resolving bumps
the epoch exactly when the leader may hold a gap.
"""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from pylog.client.accumulator import PartitionState, SequenceState
from pylog.client.sender import Sender


class _Sender(Sender):
    """Just the state the two methods under test read (no cluster, no loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._init_sender()
        self.producer_id, self.producer_epoch = 7, 0
        self._parts = {}
        self.woken = 0

    def _wake_locked(self) -> None:
        self.woken += 1


def _batch(seq: int, written: bool = False, ident: Any = (7, 0)) -> SimpleNamespace:
    return SimpleNamespace(sequence=seq, producer_id=ident[0], producer_epoch=ident[1], maybe_written=written,
                           data=b"x", records=[b"r"])


def _partition(s: _Sender) -> PartitionState:
    ps = PartitionState("t", 0)
    ps.seq_id = (s.producer_id, s.producer_epoch)
    s._parts["t"] = [ps]
    return ps


def test_an_unknown_outcome_makes_the_partition_unresolved():
    s = _Sender()
    ps = _partition(s)
    s._sequence_failed(ps, _batch(0), written=None)
    assert ps.sequences is SequenceState.UNRESOLVED


def test_a_refusal_makes_a_gap_and_unnumbers_the_later_refused_batches():
    s = _Sender()
    ps = _partition(s)
    refused, maybe_in_log, other_identity = _batch(1), _batch(2, written=True), _batch(3, ident=(7, 1))
    ps.retry = [refused, maybe_in_log, other_identity]  # type: ignore[list-item]
    s._sequence_failed(ps, _batch(0), written=False)
    assert ps.sequences is SequenceState.GAP
    assert refused.sequence == -1 and refused.data is None  # numbered again later
    assert maybe_in_log.sequence == 2 and other_identity.sequence == 3  # never renumbered


def test_a_gap_is_not_downgraded_by_a_later_unknown_outcome():
    s = _Sender()
    ps = _partition(s)
    s._sequence_failed(ps, _batch(0), written=False)
    s._sequence_failed(ps, _batch(1), written=None)
    assert ps.sequences is SequenceState.GAP
    ps.acked_next = ps.next_seq  # even with every numbered batch acknowledged, a gap bumps the epoch
    s._maybe_resolve(ps)
    assert (s.producer_epoch, s.epoch_bumps, ps.sequences, ps.seq_id) == (1, 1, SequenceState.OK, None)


def test_resolving_bumps_the_epoch_only_when_the_leader_may_hold_a_gap():
    s = _Sender()
    ps = _partition(s)
    ps.next_seq = ps.acked_next = 5  # the last numbered batch was acknowledged: the rest is in the log
    s._sequence_failed(ps, _batch(3), written=None)
    s._maybe_resolve(ps)
    assert (s.producer_epoch, s.epoch_bumps, ps.sequences) == (0, 0, SequenceState.OK)
    ps.seq_id, ps.next_seq, ps.acked_next = (7, 0), 9, 5  # batches 5..8 numbered, none acknowledged
    s._sequence_failed(ps, _batch(5), written=None)
    s._maybe_resolve(ps)
    assert (s.producer_epoch, s.epoch_bumps, ps.sequences, ps.seq_id) == (1, 1, SequenceState.OK, None)


def test_nothing_resolves_while_a_numbered_batch_is_pending():
    s = _Sender()
    ps = _partition(s)
    s._sequence_failed(ps, _batch(0), written=False)
    ps.inflight = [_batch(1)]  # type: ignore[list-item]
    s._maybe_resolve(ps)
    assert ps.sequences is SequenceState.GAP and s.epoch_bumps == 0
