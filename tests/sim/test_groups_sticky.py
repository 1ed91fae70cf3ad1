"""The eager ``sticky`` assignor on a simulated cluster: churn (joins, a leave, a crash, a member cut off
from its coordinator past its session and healed), compared with ``roundrobin`` under the same churn.

Checked for both: no partition owned by two members in one generation, every acknowledged record
delivered at least once. For sticky: in every generation a member of the previous one keeps
``min(owned, P // C)`` of its partitions (the member that comes back after being fenced claims the
partitions of its old generation in its user data, and loses them to the newer generation's owners), and
far fewer partitions change owner over the run than with round robin: the exact counts the seed gives.
"""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

import pytest

from pylog.cluster import Cluster
from pylog.errors import PylogError
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

from group_churn import drain, harvest, wait_for_sends

TOPIC = "events"
PARTITIONS = 8
EVERY = {(TOPIC, p) for p in range(PARTITIONS)}
OPTS = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, rebalance_timeout_ms=4_000,
            enable_auto_commit=False, fetch_max_wait_ms=100, request_timeout_ms=2_000)
TP = Tuple[str, int]


def owners_by_generation(everyone) -> Dict[int, Dict[TP, int]]:
    """generation -> partition -> index of the consumer that owned it; no partition has two owners."""
    out: Dict[int, Dict[TP, int]] = {}
    for i, c in enumerate(everyone):
        for generation, _member, parts in c.assignment_history:
            gen = out.setdefault(generation, {})
            for tp in parts:
                prev = gen.setdefault(tp, i)
                assert prev == i, f"generation {generation}: {tp} owned by consumers {prev} and {i}"
    return out


def moves(history: Dict[int, Dict[TP, int]]) -> int:
    """Partitions handed to a consumer other than the one that owned them last (over the whole run)."""
    last: Dict[TP, int] = {}
    n = 0
    for generation in sorted(history):
        for tp, who in history[generation].items():
            if tp in last and last[tp] != who:
                n += 1
            last[tp] = who
    return n


def check_sticky(history: Dict[int, Dict[TP, int]]) -> int:
    """Each member of the previous generation keeps min(owned, P // C); returns the generations checked."""
    gens = sorted(history)
    checked = 0
    for prev, gen in zip(gens, gens[1:]):
        members = set(history[gen].values())
        if set(history[gen]) != EVERY:
            continue  # a generation some member never synced (a rebalance overtook it): its plan is not all here
        lo = PARTITIONS // len(members)
        for who in members & set(history[prev].values()):
            owned = {tp for tp, o in history[prev].items() if o == who}
            kept = {tp for tp, o in history[gen].items() if o == who} & owned
            assert len(kept) >= min(len(owned), lo), (prev, gen, who, owned, kept, lo)
        checked += 1
    return checked


def coordinator_of(c: Cluster, group: str) -> int:
    return c.leader_of(OFFSETS_TOPIC, partition_for_group(group, c.store.topics[OFFSETS_TOPIC].partitions))


def churn(tmp_path, strategy: str, seed: int):
    """Run the churn; return (every consumer, the ownership history, the fenced-and-healed consumer)."""
    c = Cluster(tmp_path / strategy, brokers=3, seed=seed)
    try:
        c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, min_insync_replicas=2)
        producer = c.producer(acks="all")
        acked: Set[Tuple[int, int]] = set()
        pending: List = []
        delivered: Set[Tuple[int, int]] = set()
        live: List = []
        everyone: List = []
        n = [0]

        def round_(steps: int) -> None:
            for _ in range(steps):
                for _ in range(2):
                    n[0] += 1
                    pending.append(producer.send(TOPIC, b"v%d" % n[0], key=b"k%d" % n[0]))
                for cons in list(live):
                    recs = cons.poll(0.05)
                    delivered.update((r.partition, r.offset) for r in recs)
                    if recs:
                        try:
                            cons.commit()
                        except PylogError:  # a rebalance fenced the commit: redelivered to the next owner
                            pass
                harvest(pending, acked)

        def settle(limit: int = 200) -> None:
            """Until the live members own every partition in one generation."""
            for _ in range(limit):
                round_(1)
                c.advance(50)
                gens = {cons.generation for cons in live}
                if len(gens) == 1 and set().union(*(set(cons.assignment()) for cons in live)) == EVERY and \
                        sum(len(cons.assignment()) for cons in live) == PARTITIONS:
                    return
            raise AssertionError(f"seed {seed} ({strategy}): the group never settled")

        def add() -> None:
            cons = c.consumer("churn", [TOPIC], partition_assignment_strategy=strategy, **OPTS)
            live.append(cons)
            everyone.append(cons)

        for _ in range(3):
            add()
        settle()
        round_(10)
        add()
        settle()
        round_(10)
        live.pop(1).close()  # leaves at once
        settle()
        round_(10)
        live.pop(0)._crash()  # no LeaveGroup: expired after its session timeout
        settle()
        add()
        settle()
        round_(10)
        cut = live[0]  # cut off from its coordinator past its session, still fetching; then healed
        coord = coordinator_of(c, "churn")
        c.transport.partition([cut._node.node_id], [coord])
        others = live[1:]
        for _ in range(200):
            round_(1)
            c.advance(50)
            if set().union(*(set(o.assignment()) for o in others)) == EVERY and \
                    len({o.generation for o in others}) == 1:
                break
        assert cut.generation < others[0].generation
        c.transport.heal()
        settle()
        round_(10)
        wait_for_sends(pending, acked)
        drain(live, delivered, acked, commit=True)
        missing = sorted(acked - delivered)
        assert not missing, f"seed {seed} ({strategy}): acknowledged records never delivered: {missing[:10]}"
        assert len(acked) > 100
        history = owners_by_generation(everyone)
        for cons in everyone:
            cons._check()
        c._check()
        return everyone, history, everyone.index(cut)
    finally:
        c.close()


@pytest.mark.parametrize("seed", [5, 6])
def test_sticky_moves_far_fewer_partitions_than_roundrobin_under_the_same_churn(tmp_path, seed):
    _, sticky, cut = churn(tmp_path, "sticky", seed)
    _, rr, _ = churn(tmp_path, "roundrobin", seed)
    assert check_sticky(sticky) == 6  # six settled generations after the first, each kept what balance allows
    sticky_moves, rr_moves = moves(sticky), moves(rr)
    # Sticky moves only what leaves or what balance needs, the minimum for this churn: a join (3 -> 4
    # members: 2), the leave (2), the crash (3), a join (2), the cut-off member's partitions (3) and its
    # return (2). Round robin reshuffles on every change (its count is recorded per seed: it depends on
    # the exact message sequence, re-recorded when followers began fetching per broker pair, issue 18).
    assert (sticky_moves, rr_moves) == (14, {5: 32, 6: 31}[seed]), (sticky_moves, rr_moves)
    assert sticky_moves < rr_moves
    # the member that came back after being fenced claimed its old generation's partitions: stale, so the
    # newer generation's owners kept theirs (check_sticky above) and it got two of the ones balance freed
    gens = sorted(sticky)
    back = gens[-1]
    before_cut = gens[-3]
    old = {tp for tp, o in sticky[before_cut].items() if o == cut}
    new = {tp for tp, o in sticky[back].items() if o == cut}
    assert len(old) == 3 and len(new) == 2 and not old & new, (old, new)


def test_members_send_their_last_assignment_and_generation_in_the_sticky_protocol_only(tmp_path):
    """``["sticky", "range"]``: the group picks sticky; each member's sticky metadata carries its last
    assignment and generation as StickyAssignorUserData v1 (null before its first assignment), its range
    metadata none."""
    from pylog.client.assignors import decode_sticky_user_data, decode_subscription

    c = Cluster(tmp_path, brokers=3, seed=9)
    try:
        c.create_topic(TOPIC, partitions=4, replication_factor=3)
        a = c.consumer("g", [TOPIC], partition_assignment_strategy=["sticky", "range"], **OPTS)
        for _ in range(100):
            a.poll(0.05)
            if len(a.assignment()) == 4:
                break
        group = c.brokers[coordinator_of(c, "g")].coordinator.groups["g"]
        assert group.protocol == "sticky"
        (first,) = group.members.values()
        metas = dict(first.protocols)
        assert decode_subscription(metas["sticky"]).user_data is None  # its first JoinGroup: never assigned
        assert decode_subscription(metas["range"]).user_data is None
        gen_a = a.generation
        b = c.consumer("g", [TOPIC], partition_assignment_strategy=["sticky", "range"], **OPTS)
        for _ in range(100):
            a.poll(0.05)
            b.poll(0.05)
            if len(a.assignment()) == 2 and len(b.assignment()) == 2 and a.generation == b.generation:
                break
        assert a.generation > gen_a
        group = c.brokers[coordinator_of(c, "g")].coordinator.groups["g"]
        metas = dict(group.members[a.member_id].protocols)
        # a rejoined for b's arrival: it claimed the four partitions of its previous generation
        assert decode_sticky_user_data(decode_subscription(metas["sticky"]).user_data) == \
            ([(TOPIC, p) for p in range(4)], gen_a)
        assert decode_subscription(metas["range"]).user_data is None
        assert len(a.assignment()) == len(b.assignment()) == 2
        assert not set(a.assignment()) & set(b.assignment())
    finally:
        c.close()
