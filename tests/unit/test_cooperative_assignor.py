"""The cooperative-sticky assignor against Kafka's rules (hypothesis), and its subscription codec."""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.client.assignors import (
    COOPERATIVE,
    EAGER,
    CooperativeStickyAssignor,
    RangeAssignor,
    Subscription,
    decode_subscription,
    encode_subscription,
    get_assignor,
    rebalance_protocol,
)
from pylog.errors import CorruptRecordError
from pylog.replication import offsets_topic as ot

TP = Tuple[str, int]
A = CooperativeStickyAssignor()


@st.composite
def group(draw, identical: bool = True):
    """Topics, members with subscriptions, and what each owned last generation (a real earlier
    assignment: disjoint), some members new (own nothing), perhaps partitions added or topics gone."""
    counts = draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 9), min_size=1))
    names = draw(st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=7, unique=True))
    if identical:
        topics = {m: sorted(counts) for m in names}
    else:
        topics = {m: draw(st.lists(st.sampled_from(sorted(counts) + ["gone"]), min_size=1, unique=True)) for m in names}
    # an earlier assignment over the same (or a few more) partitions: every partition to at most one member
    owned: Dict[str, List[TP]] = {m: [] for m in names}
    for t, n in sorted(counts.items()):
        for p in range(n + draw(st.integers(0, 1))):  # p == n: a partition that no longer exists
            who = draw(st.sampled_from(names + [None]))
            if who is not None:
                owned[who].append((t, p))
    generation = draw(st.integers(1, 5))
    members = {m: Subscription(topics[m], owned[m], generation if owned[m] else -1) for m in names}
    return counts, members


def subscribed(counts, sub: Subscription) -> Set[TP]:
    return {(t, p) for t in sub.topics if t in counts for p in range(counts[t])}


def check_plan_partitions(counts, members, plan) -> None:
    """Every subscribed partition exactly once, to a member subscribing to its topic."""
    assert set(plan) == set(members)
    given_out = [tp for parts in plan.values() for tp in parts]
    assert len(given_out) == len(set(given_out)), "a partition was assigned twice"
    assert set(given_out) == set().union(*(subscribed(counts, s) for s in members.values()))
    for m, parts in plan.items():
        assert set(parts) <= subscribed(counts, members[m]), f"{m} got a topic it does not subscribe to"


def check_cooperative(members, plan, final) -> None:
    """No partition given to a member while another still owns it; nothing else withheld."""
    owners: Dict[TP, Set[str]] = {}
    for m, s in members.items():
        for tp in s.owned_partitions:
            owners.setdefault(tp, set()).add(m)
    for m in plan:
        assert set(final[m]) <= set(plan[m])
        for tp in plan[m]:
            others = owners.get(tp, set()) - {m}
            assert (tp in final[m]) == (not others), (m, tp, others)


@given(group())
def test_identical_subscriptions_balanced_sticky_and_cooperative(g):
    counts, members = g
    plan = A.sticky_plan(counts, members)
    check_plan_partitions(counts, members, plan)
    sizes = [len(v) for v in plan.values()]
    assert max(sizes) - min(sizes) <= 1, f"unbalanced: {sizes}"
    total = sum(counts.values())
    quota = total // len(members)
    for m, s in members.items():
        still = {tp for tp in s.owned_partitions if tp in subscribed(counts, s)}
        kept = still & set(plan[m])
        assert len(kept) >= min(len(still), quota), f"{m} kept {len(kept)} of {len(still)} (quota {quota})"
        if len(kept) < len(still):  # it lost some only because it is full
            assert len(plan[m]) >= quota
    # the number of partitions changing hands is the minimum balance needs:
    # every member keeps min(owned, its final share) and nothing else moves
    moved = sum(len(set(plan[m]) - set(s.owned_partitions)) for m, s in members.items())
    unowned = sum(1 for tp in set().union(*(subscribed(counts, s) for s in members.values()))
                  if not any(tp in s.owned_partitions for s in members.values()))
    excess = sum(max(0, len({tp for tp in s.owned_partitions if tp in subscribed(counts, s)}) - len(plan[m]))
                 for m, s in members.items())
    assert moved == unowned + excess
    final = A.assign_members(counts, members)
    check_cooperative(members, plan, final)


@given(group(identical=False))
def test_different_subscriptions_every_partition_once_and_no_improving_move(g):
    counts, members = g
    plan = A.sticky_plan(counts, members)
    check_plan_partitions(counts, members, plan)
    for m, parts in plan.items():  # balanced: no partition could go to a subscriber with two fewer
        for t, _ in parts:
            for other, s in members.items():
                if t in s.topics:
                    assert len(plan[other]) >= len(parts) - 1, (m, other, t)
    check_cooperative(members, plan, A.assign_members(counts, members))


@given(group())
def test_next_generation_completes_the_withheld_moves(g):
    """Owners revoke what they lost and rejoin: the second generation gives out every partition."""
    counts, members = g
    first = A.assign_members(counts, members)
    again = {m: Subscription(s.topics, first[m], 7) for m, s in members.items()}
    second = A.assign_members(counts, again)
    check_plan_partitions(counts, again, second)
    sizes = [len(v) for v in second.values()]
    assert max(sizes) - min(sizes) <= 1
    for m in members:  # nobody loses in the second step what it kept in the first
        assert set(first[m]) <= set(second[m])


def test_stale_generation_and_double_claims_are_not_sticky():
    counts = {"t": 4}
    members = {
        "a": Subscription(["t"], [("t", 0), ("t", 1)], 5),
        "b": Subscription(["t"], [("t", 1), ("t", 2)], 5),  # t-1 claimed twice: neither keeps it for stickiness
        "c": Subscription(["t"], [("t", 3), ("t", 0)], 4),  # an older generation: its claims are stale
    }
    assert A.valid_claims(counts, members) == {"a": [("t", 0)], "b": [("t", 2)], "c": []}
    final = A.assign_members(counts, members)
    # t-1 (claimed by a and b) and t-3/t-0 (claimed by c) go nowhere while another member claims them
    for m, parts in final.items():
        for tp in parts:
            assert not any(tp in s.owned_partitions for o, s in members.items() if o != m), (m, tp)
    assert ("t", 0) in final["a"] or ("t", 0) not in {tp for p in final.values() for tp in p}


def test_kafka_javadoc_example_new_member_takes_only_what_balance_needs():
    """KIP-429's example: C0 and C1 own 3 partitions each; C2 joins. First generation: C0 and C1
    each give up one (withheld); second: C2 gets those two, and nothing else moved."""
    counts = {"t0": 3, "t1": 3}
    first_owned = {"C0": [("t0", 0), ("t0", 1), ("t0", 2)], "C1": [("t1", 0), ("t1", 1), ("t1", 2)]}
    members = {m: Subscription(["t0", "t1"], o, 1) for m, o in first_owned.items()}
    members["C2"] = Subscription(["t0", "t1"])
    gen2 = A.assign_members(counts, members)
    assert gen2["C2"] == []
    assert len(gen2["C0"]) == len(gen2["C1"]) == 2
    assert set(gen2["C0"]) < set(first_owned["C0"]) and set(gen2["C1"]) < set(first_owned["C1"])
    rejoin = {m: Subscription(["t0", "t1"], gen2[m], 2) for m in gen2}
    gen3 = A.assign_members(counts, rejoin)
    assert gen3["C0"] == gen2["C0"] and gen3["C1"] == gen2["C1"]
    assert sorted(gen3["C2"]) == sorted(set(first_owned["C0"] + first_owned["C1"]) - set(gen2["C0"] + gen2["C1"]))


@given(st.lists(st.sampled_from(["a", "b", "orders"]), unique=True),
       st.lists(st.tuples(st.sampled_from(["a", "orders"]), st.integers(0, 100)), unique=True),
       st.integers(-1, 1 << 30))
def test_subscription_round_trip_and_v0_readers(topics, owned, generation):
    data = encode_subscription(topics, owned, generation)
    sub = decode_subscription(data)
    assert sub.topics == topics and sorted(sub.owned_partitions) == sorted(owned) and sub.generation == generation
    assert ot.decode_subscription(data)[0] == topics  # a v0 reader (the coordinator, describe) reads the topics
    v0 = ot.encode_subscription(topics)
    assert decode_subscription(v0) == Subscription(topics, [], -1)


def test_subscription_layout_by_hand():
    data = encode_subscription(["t"], [("t", 2), ("t", 1)], 9)
    assert data == (b"\x00\x02" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
                    + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01\x00\x00\x00\x02"
                    + b"\x00\x00\x00\x09")
    with pytest.raises(CorruptRecordError):
        decode_subscription(data[:-6])


def test_protocol_of_a_consumer_is_the_highest_all_its_assignors_support():
    assert rebalance_protocol([get_assignor("cooperative-sticky")]) == COOPERATIVE
    assert rebalance_protocol([get_assignor("cooperative-sticky"), RangeAssignor()]) == EAGER
    assert rebalance_protocol([RangeAssignor()]) == EAGER
