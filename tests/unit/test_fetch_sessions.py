"""Followers fetch per (follower broker, leader broker) with KIP-227 fetch sessions (issue 18, item 4).

Two replica managers wired by hand (broker 0 leads every partition of ``t``, broker 1 follows),
virtual time, messages delivered in order; what goes to the controller is kept for the tests.
"""
from __future__ import annotations

import os
from typing import List, Tuple

import pytest

from pylog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from pylog.replication import partition as partition_mod
from pylog.replication.messages import (
    AlterPartitionRequest,
    FetchRequest,
    LeaderAndIsrRequest,
    OffsetsForLeaderEpochRequest,
    PartitionState,
    ProduceRequest,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from pylog.replication.replica_manager import CONTROLLER, ReplicaManager, ReplicaManagerConfig
from pylog.record import encode_batch

LAG = 1_000
WAIT = 100


class Pair:
    """Leader broker 0 and follower broker 1 for ``n`` partitions of ``t`` at RF 2."""

    def __init__(self, tmp_path, n: int, incarnation: int = 0):
        self.tmp_path = tmp_path
        self.n = n
        self.now = 0
        self.cfg = ReplicaManagerConfig(replica_lag_time_max_ms=LAG, replica_fetch_max_wait_ms=WAIT,
                                        request_timeout_ms=5_000)
        self.to_controller: List[object] = []
        self.sent: List[Tuple[int, int, object]] = []  # (src, dst, message)
        self.queue: List[Tuple[int, object, object]] = []
        self.rms = {b: self._rm(b) for b in (0, 1)}
        states = tuple(PartitionState("t", p, (0, 1), 0, 0, (0, 1), 0, 1) for p in range(n))
        for b in (0, 1):
            self._post(b, self.rms[b].handle("controller", LeaderAndIsrRequest(9, 1, states), self.now))

    def _rm(self, b: int, incarnation: int = 0) -> ReplicaManager:
        return ReplicaManager(b, os.path.join(self.tmp_path, f"broker-{b}"), clock_ms=lambda: self.now,
                              config=self.cfg, incarnation=incarnation)

    def _post(self, src: int, out) -> None:
        for dst, msg in out.items:
            if dst == CONTROLLER:
                self.to_controller.append(msg)
            elif dst in self.rms:
                self.sent.append((src, dst, msg))
                self.queue.append((src, dst, msg))

    def deliver(self, drop_from: int = -1) -> int:
        """Deliver every queued message (and what they cause) now; returns how many."""
        count = 0
        while self.queue:
            src, dst, msg = self.queue.pop(0)
            if src == drop_from:
                continue
            count += 1
            rm = self.rms[dst]  # type: ignore[index]
            self._post(dst, rm.handle(src, msg, self.now))  # type: ignore[arg-type]
            self._post(dst, rm.complete_fetch_wakeups(self.now))  # type: ignore[arg-type]
        return count

    def advance(self, ms: int, step: int = 10, drop_from: int = -1) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += step
            for b, rm in self.rms.items():
                self._post(b, rm.tick(self.now))
            self.deliver(drop_from)
            for rm in self.rms.values():
                rm._check()

    def produce(self, p: int, values: List[bytes], drop_from: int = -1) -> None:
        rm = self.rms[0]
        self._post(0, rm.handle(7, ProduceRequest("t", p, encode_batch(values, now_ms=self.now), 1, 1000, 1), self.now))
        self._post(0, rm.complete_fetch_wakeups(self.now))  # as the broker runs it after the produce
        self.deliver(drop_from)

    def requests(self) -> List[ReplicaFetchRequest]:
        return [m for s, d, m in self.sent if isinstance(m, ReplicaFetchRequest)]


def test_one_request_in_flight_per_broker_pair_whatever_the_number_of_partitions(tmp_path) -> None:
    pair = Pair(tmp_path, 40)
    reqs = pair.requests()
    assert len(reqs) == 1, "the follower's LeaderAndIsr produced one fetch for its 40 partitions"
    full = reqs[0]
    assert full.session_id == 0 and len(full.partitions) == 40
    assert not [m for _, _, m in pair.sent if isinstance(m, (FetchRequest, OffsetsForLeaderEpochRequest))]
    pair.advance(3 * WAIT)
    assert all(len(r.partitions) == 0 for r in pair.requests()[1:]), "idle rounds list no partition"
    # one outstanding request per pair at every moment: never more requests than responses + 1
    resps = [m for _, _, m in pair.sent if isinstance(m, ReplicaFetchResponse)]
    assert len(pair.requests()) - len(resps) in (0, 1)


def test_an_idle_round_costs_the_leader_no_per_partition_work(tmp_path, monkeypatch) -> None:
    pair = Pair(tmp_path, 50)
    pair.advance(2 * WAIT)
    calls = [0]
    real = partition_mod.Partition.handle_fetch

    def counting(self, req, now_ms):
        calls[0] += 1
        return real(self, req, now_ms)

    monkeypatch.setattr(partition_mod.Partition, "handle_fetch", counting)
    before = len(pair.requests())
    pair.advance(5 * WAIT)
    assert len(pair.requests()) - before >= 4  # the long-poll went on ...
    assert calls[0] == 0  # ... and no partition was looked at


def test_an_append_to_the_last_partition_wakes_the_parked_request_with_that_partition_only(tmp_path) -> None:
    pair = Pair(tmp_path, 30)
    pair.advance(2 * WAIT)
    pair.now += 1
    n_sent = len(pair.sent)
    pair.produce(29, [b"a", b"b", b"c"])  # answered at once, not after max_wait_ms
    resps = [m for _, _, m in pair.sent[n_sent:] if isinstance(m, ReplicaFetchResponse)]
    assert [(r.topic, r.partition) for _, r in resps[0].partitions] == [("t", 29)]
    assert resps[0].partitions[0][1].records
    # then the follower lists its new offset; the answer, which carries only the HW that moved, is
    # held back for replica_hw_linger_ms (no data follows) and then says that partition only
    assert len(resps) == 1
    pair.advance(pair.cfg.replica_hw_linger_ms)
    resps = [m for _, _, m in pair.sent[n_sent:] if isinstance(m, ReplicaFetchResponse)]
    assert [(r.partition, r.high_watermark, r.records) for _, r in resps[1].partitions] == [(29, 3, b"")]
    follower = pair.rms[1].partitions[("t", 29)]
    assert follower.log_end_offset == 3
    listed = [r for r in pair.requests() if r.partitions][-1]  # the follower's next request: only what moved
    assert [(m.topic, m.partition, m.fetch_offset) for m in listed.partitions] == [("t", 29, 3)]
    pair.advance(WAIT)
    leader = pair.rms[0].partitions[("t", 29)]
    assert leader.high_watermark == 3 and follower.high_watermark == 3


def test_idle_followers_stay_in_the_isr_and_a_silent_one_leaves_it_once_behind(tmp_path) -> None:
    pair = Pair(tmp_path, 20)
    pair.produce(3, [b"x"])
    pair.advance(5 * LAG)  # idle for five lag times: the lazily kept fetch state says caught up
    assert not [m for m in pair.to_controller if isinstance(m, AlterPartitionRequest)]
    # The follower's requests stop arriving. As in Kafka (isFollowerOutOfSync), a follower at the
    # leader's log end is not out of sync; once the leader appends, it is after the lag time.
    pair.advance(LAG, drop_from=1)
    pair.produce(3, [b"y"])
    pair.produce(11, [b"z"])
    pair.advance(3 * LAG, drop_from=1)
    shrinks = [m for m in pair.to_controller if isinstance(m, AlterPartitionRequest)]
    assert {m.partition for m in shrinks} == {3, 11}  # (resent: no controller answers here)
    assert all(m.new_isr == (0,) for m in shrinks)


def test_an_idle_partition_counts_its_follower_caught_up_at_the_last_session_request(tmp_path) -> None:
    """The leader looks at no idle partition per request, yet an append after a long idle time
    finds the follower caught up as of the session's last request (not as of the partition's last
    answer, five lag times ago): a follower briefly slow right then is not dropped from the ISR."""
    pair = Pair(tmp_path, 3)
    pair.produce(1, [b"x"])
    pair.advance(5 * LAG)
    pair.produce(1, [b"y"], drop_from=1)  # the follower's next requests are lost for a while
    pair.advance(6 * LAG // 10, drop_from=1)  # (an ISR-expiry pass runs every LAG / 2)
    assert not [m for m in pair.to_controller if isinstance(m, AlterPartitionRequest)]
    pair.advance(LAG, drop_from=1)
    assert {m.partition for m in pair.to_controller if isinstance(m, AlterPartitionRequest)} == {1}


def test_a_follower_behind_when_it_went_silent_is_not_counted_caught_up(tmp_path) -> None:
    pair = Pair(tmp_path, 5)
    pair.advance(2 * WAIT)
    # the follower stops; the leader appends afterwards: only partition 2 falls behind
    pair.advance(LAG // 4, drop_from=1)
    pair.produce(2, [b"late"])
    pair.advance(2 * LAG, drop_from=1)
    shrunk = {m.partition for m in pair.to_controller if isinstance(m, AlterPartitionRequest)}
    assert 2 in shrunk


def test_a_restarted_leader_refuses_the_old_session_and_the_follower_fetches_in_full(tmp_path) -> None:
    pair = Pair(tmp_path, 10)
    pair.advance(2 * WAIT)
    pair.rms[0].shutdown(clean=True)
    pair.queue.clear()
    pair.rms[0] = pair._rm(0, incarnation=1)
    states = tuple(PartitionState("t", p, (0, 1), 0, 1, (0, 1), 1, 1) for p in range(10))
    pair._post(0, pair.rms[0].handle("controller", LeaderAndIsrRequest(9, 2, states), pair.now))
    # the follower's parked request was lost with the leader; it learns of the new epoch
    pair._post(1, pair.rms[1].handle("controller", LeaderAndIsrRequest(9, 2, states), pair.now))
    pair.deliver()
    # its request, lost with the old leader, is given up once partitions wait to join and it is
    # unanswered for 2 * max_wait + 1 s (no dead-connection notice in process): then a full fetch
    assert len([r for r in pair.requests() if r.session_id == 0]) == 1  # not at once: it may still come
    pair.advance(2 * WAIT + 1_000 + 3 * WAIT)
    assert pair.requests()[-1].session_id != 0
    fulls = [r for r in pair.requests() if r.session_id == 0]
    assert len(fulls) == 2 and len(fulls[-1].partitions) == 10
    pair.produce(7, [b"after"])
    pair.advance(2 * WAIT)
    assert pair.rms[1].partitions[("t", 7)].log_end_offset == 1


def test_an_unknown_session_is_refused_and_answered_with_a_full_fetch(tmp_path) -> None:
    pair = Pair(tmp_path, 4)
    pair.advance(2 * WAIT)
    leader, follower = pair.rms[0], pair.rms[1]
    out = leader.handle(1, ReplicaFetchRequest(1, 0, 999, 12345, 3, ()), pair.now).items
    assert len(out) == 1 and out[0][1].error is FetchSessionIdNotFoundError
    sid = leader.sessions[1].session_id
    out = leader.handle(1, ReplicaFetchRequest(1, 0, 998, sid, 99, ()), pair.now).items
    assert len(out) == 1 and out[0][1].error is InvalidFetchSessionEpochError
    # the follower told so starts again with a full fetch of every partition
    corr = follower.fetchers[0].inflight[0]
    follower.handle(0, ReplicaFetchResponse(corr, 0, error=FetchSessionIdNotFoundError), pair.now)
    pair.advance(2 * WAIT)
    fulls = [r for r in pair.requests() if r.session_id == 0]
    assert len(fulls) == 2 and len(fulls[-1].partitions) == 4
    assert leader.sessions[1].session_id != sid
    pair.produce(1, [b"v"])
    pair.advance(2 * WAIT)
    assert pair.rms[1].partitions[("t", 1)].log_end_offset == 1


def test_a_stale_answer_after_truncation_is_not_appended(tmp_path) -> None:
    """A response for an entry the follower replaced (it left and rejoined the fetcher meanwhile)
    names the offset it was served from: a mismatch is ignored, the new entry is answered."""
    pair = Pair(tmp_path, 2)
    pair.advance(2 * WAIT)
    f = pair.rms[1]
    fetcher = f.fetchers[0]
    tp = ("t", 0)
    stale = ReplicaFetchResponse(fetcher.inflight[0] if fetcher.inflight else -1, fetcher.session_id,
                                 ((5, pair.rms[0].partitions[tp].handle_fetch(fetcher.members[tp], pair.now)[0]),))
    before = f.partitions[tp].log_end_offset
    f.handle(0, stale, pair.now)
    assert f.partitions[tp].log_end_offset == before
    f._check()


@pytest.mark.parametrize("n", [1, 7])
def test_same_messages_same_outcome(tmp_path, n) -> None:
    """Determinism: two runs of the same steps send the same messages in the same order."""
    runs = []
    for i in range(2):
        pair = Pair(tmp_path / f"r{i}", n)
        for p in range(n):
            pair.produce(p, [b"%d" % p] * (p + 1))
            pair.advance(WAIT // 2)
        pair.advance(3 * WAIT)
        runs.append([(s, d, type(m).__name__, getattr(m, "session_epoch", None)) for s, d, m in pair.sent])
        assert all(pair.rms[1].partitions[("t", p)].log_end_offset == p + 1 for p in range(n))
    assert runs[0] == runs[1]


def test_a_failover_of_many_partitions_one_by_one_does_not_refetch_every_partition_each_time(tmp_path) -> None:
    """A controller failover sends a LeaderAndIsr per partition: each new leader epoch must not give
    up the pair's request and start a full fetch (that was O(partitions^2) work for a failover)."""
    n = 60
    pair = Pair(tmp_path, n)
    pair.advance(2 * WAIT)
    for p in range(n):
        st = PartitionState("t", p, (0, 1), 0, 1, (0, 1), 1, 1)
        for b in (0, 1):
            pair._post(b, pair.rms[b].handle("controller", LeaderAndIsrRequest(9, 2, (st,)), pair.now))
        pair.deliver()
        pair.advance(10)
    pair.advance(2 * WAIT + 1_000 + 3 * WAIT)
    fulls = [r for r in pair.requests() if r.session_id == 0]
    assert len(fulls) <= 2, len(fulls)
    listed = sum(len(r.partitions) for r in pair.requests())
    assert listed <= 4 * n, listed  # each partition listed a few times, not once per failover step
    pair.produce(n - 1, [b"v"])
    pair.advance(2 * WAIT)
    assert pair.rms[1].partitions[("t", n - 1)].log_end_offset == 1
