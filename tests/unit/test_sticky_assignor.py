"""The eager sticky assignor (Kafka's StickyAssignor, KIP-54): its user-data layout, stale and double claims,
Kafka's javadoc example, and the consumer's protocol choice."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from pylog.client.assignors import (
    COOPERATIVE,
    DEFAULT_GENERATION,
    EAGER,
    CooperativeStickyAssignor,
    StickyAssignor,
    Subscription,
    decode_sticky_user_data,
    decode_subscription,
    encode_sticky_user_data,
    get_assignor,
    rebalance_protocol,
)
from pylog.replication import offsets_topic as ot

TP = Tuple[str, int]
S = StickyAssignor()

# Kafka's StickyAssignorUserData v1 for [t1-2, t0-0, t1-0] in generation 7, by hand:
# int32 topic count, per topic (sorted) int16-length string, int32 partition count, int32 partitions
# (ascending), then int32 generation.
VECTOR_V1 = bytes.fromhex(
    "00000002"                                  # 2 topics
    "00027430" "00000001" "00000000"            # "t0": [0]
    "00027431" "00000002" "00000000" "00000002"  # "t1": [0, 2]
    "00000007")                                 # generation 7


def joined(topics: Sequence[str], owned: Optional[Sequence[TP]] = None, generation: Optional[int] = 0,
           raw: Optional[bytes] = None) -> Subscription:
    """A member's subscription as the leader decodes it from the JoinGroup bytes (v0 + user data)."""
    user = raw if raw is not None else (None if owned is None else encode_sticky_user_data(owned, generation))
    return decode_subscription(ot.encode_subscription(list(topics), user))


def test_user_data_v1_matches_kafkas_layout_byte_for_byte():
    assert encode_sticky_user_data([("t1", 2), ("t0", 0), ("t1", 0)], 7) == VECTOR_V1
    assert decode_sticky_user_data(VECTOR_V1) == ([("t0", 0), ("t1", 0), ("t1", 2)], 7)
    # a negative generation (Kafka's DEFAULT_GENERATION) is written as two's complement
    assert encode_sticky_user_data([], -1) == bytes.fromhex("00000000" "ffffffff")
    assert decode_sticky_user_data(bytes.fromhex("00000000" "ffffffff")) == ([], -1)


def test_user_data_v0_null_and_garbage_follow_kafkas_fallbacks():
    v0 = VECTOR_V1[:-4]  # Kafka clients before 2.3: no generation
    assert encode_sticky_user_data([("t1", 2), ("t0", 0), ("t1", 0)], None) == v0
    assert decode_sticky_user_data(v0) == ([("t0", 0), ("t1", 0), ("t1", 2)], None)
    assert decode_sticky_user_data(v0 + b"\x00\x00") == ([("t0", 0), ("t1", 0), ("t1", 2)], None)  # too short for v1
    assert decode_sticky_user_data(None) == ([], None)
    assert decode_sticky_user_data(b"") == ([], None)
    # bytes that are neither layout are ignored (nothing owned), never an error that stops the group
    for bad in (b"\x00", bytes.fromhex("00000001" "0005" "7430"), bytes.fromhex("ffffffff"),
                bytes.fromhex("00000001" "0002" "7430" "ffffffff"), bytes.fromhex("00000001" "0002" "ff30" "00000000")):
        assert decode_sticky_user_data(bad) == ([], DEFAULT_GENERATION), bad


def test_user_data_travels_in_the_v0_subscription_and_v0_readers_still_read_the_topics():
    raw = ot.encode_subscription(["t0", "t1"], VECTOR_V1)
    sub = decode_subscription(raw)
    assert sub.topics == ["t0", "t1"] and sub.user_data == VECTOR_V1
    assert sub.owned_partitions == [] and sub.generation == DEFAULT_GENERATION  # v0: no subscription v1 fields
    assert ot.decode_subscription(raw) == (["t0", "t1"], VECTOR_V1)
    assert S.member_claims({"a": sub})["a"] == Subscription(["t0", "t1"], [("t0", 0), ("t1", 0), ("t1", 2)], 7,
                                                            VECTOR_V1)


def test_member_returning_with_a_stale_generation_loses_the_conflicting_claims():
    """c was fenced in generation 3; a and b took its partitions in generation 5. c's claims are stale:
    a and b keep theirs, c gets what is left."""
    members = {
        "a": joined(["t"], [("t", 0), ("t", 1)], 5),
        "b": joined(["t"], [("t", 2), ("t", 3)], 5),
        "c": joined(["t"], [("t", 0), ("t", 2), ("t", 4)], 3),
    }
    plan = S.assign_members({"t": 5}, members)
    assert {m: sorted(v) for m, v in plan.items()} == {"a": [("t", 0), ("t", 1)], "b": [("t", 2), ("t", 3)],
                                                       "c": [("t", 4)]}
    # the same claims in the same generation conflict: t-0 and t-2 are kept by nobody (they are handed out
    # afresh, here to a and b again), each member keeps its undisputed claims
    same = dict(members, c=joined(["t"], [("t", 0), ("t", 2), ("t", 4)], 5))
    assert S.valid_claims({"t": 5}, S.member_claims(same)) == {"a": [("t", 1)], "b": [("t", 3)], "c": [("t", 4)]}
    plan = S.assign_members({"t": 5}, same)
    assert {m: sorted(v) for m, v in plan.items()} == {"a": [("t", 0), ("t", 1)], "b": [("t", 2), ("t", 3)],
                                                       "c": [("t", 4)]}
    # the higher generation wins whichever member has it: now a's and b's claims are the stale ones;
    # 5 partitions over 3 members: c keeps two of its three (the extra slots go in member-id order)
    newer = dict(members, c=joined(["t"], [("t", 0), ("t", 2), ("t", 4)], 6))
    plan = S.assign_members({"t": 5}, newer)
    assert {m: sorted(v) for m, v in plan.items()} == {"a": [("t", 1), ("t", 4)], "b": [("t", 3)],
                                                       "c": [("t", 0), ("t", 2)]}


def test_v0_user_data_counts_as_the_highest_generation():
    members = {"a": joined(["t"], [("t", 0), ("t", 1)], None), "b": joined(["t"], [("t", 2), ("t", 3)], 9),
               "c": joined(["t"])}
    plan = S.assign_members({"t": 4}, members)
    # 4 over 3: one member keeps 2 (a, first in member-id order with more than 1), b keeps 1, c gets the rest
    assert {m: sorted(v) for m, v in plan.items()} == {"a": [("t", 0), ("t", 1)], "b": [("t", 2)], "c": [("t", 3)]}
    # with a newer generation elsewhere the v0 claims still count (they take the highest generation)
    members["b"] = joined(["t"], [("t", 2), ("t", 3)], 12)
    assert S.member_claims(members)["a"].generation == 12


def test_subscription_fields_are_ignored_only_user_data_counts():
    """An eager member revoked before joining: Kafka's StickyAssignor reads claims from user data only."""
    members = {"a": Subscription(["t"], [("t", 0), ("t", 1)], 4), "b": Subscription(["t"], [], DEFAULT_GENERATION,
                                                                                      encode_sticky_user_data([("t", 1)], 4))}
    plan = S.assign_members({"t": 2}, members)
    assert plan == {"a": [("t", 0)], "b": [("t", 1)]}


def test_kafkas_javadoc_example_a_member_leaves_and_the_others_keep_everything():
    """StickyAssignor javadoc: C0 [t0-0, t1-1, t3-0], C1 [t0-1, t2-0, t3-1], C2 [t1-0, t2-1]; C1 leaves.
    Round robin moves partitions of C0 and C2; sticky keeps all five and spreads C1's three."""
    counts = {t: 2 for t in ("t0", "t1", "t2", "t3")}
    before = {"C0": [("t0", 0), ("t1", 1), ("t3", 0)], "C1": [("t0", 1), ("t2", 0), ("t3", 1)],
              "C2": [("t1", 0), ("t2", 1)]}
    members = {m: joined(sorted(counts), before[m], 1) for m in ("C0", "C2")}
    plan = S.assign_members(counts, members)
    assert set(before["C0"]) < set(plan["C0"]) and set(before["C2"]) < set(plan["C2"])
    assert len(plan["C0"]) == len(plan["C2"]) == 4
    rr = get_assignor("roundrobin").assign(counts, {m: sorted(counts) for m in ("C0", "C2")})
    assert not set(before["C0"]) <= set(rr["C0"])  # what sticky avoids


def test_fresh_assignment_is_balanced_and_complete():
    plan = S.assign({"a": 3, "b": 4}, {"m1": ["a", "b"], "m2": ["a", "b"], "m3": ["a", "b"]})
    assert sorted(len(v) for v in plan.values()) == [2, 2, 3]
    assert sorted(tp for v in plan.values() for tp in v) == [("a", p) for p in range(3)] + [("b", p) for p in range(4)]


def test_sticky_is_eager_and_joins_the_protocol_rule():
    assert isinstance(get_assignor("sticky"), StickyAssignor) and S.rebalance_protocols == (EAGER,)
    assert rebalance_protocol([S]) == EAGER
    assert rebalance_protocol([CooperativeStickyAssignor(), S]) == EAGER  # the upgrade path: eager until all agree
    assert rebalance_protocol([CooperativeStickyAssignor()]) == COOPERATIVE
    assert S.subscription_user_data([("t", 1)], 3) == encode_sticky_user_data([("t", 1)], 3)
    assert get_assignor("range").subscription_user_data([("t", 1)], 3) is None


def test_cooperative_sticky_and_sticky_make_the_same_plan():
    """One algorithm: the eager assignor's plan is cooperative-sticky's before its withholding step."""
    owned: Dict[str, List[TP]] = {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)], "c": []}
    coop = {m: Subscription(["t"], o, 2 if o else -1) for m, o in owned.items()}
    eager = {m: joined(["t"], o, 2) if o else joined(["t"]) for m, o in owned.items()}
    assert S.assign_members({"t": 6}, eager) == CooperativeStickyAssignor().sticky_plan({"t": 6}, coop)
