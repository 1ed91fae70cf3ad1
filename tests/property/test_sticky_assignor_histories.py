"""The eager sticky assignor over many generations, against a pure-Python model of its promises.

Each example is a group's history: members join, leave, and come back after
being fenced with the user data of the generation they were fenced in. Every
generation goes through the bytes a real group uses (each member's
StickyAssignorUserData v1 inside a ConsumerProtocolSubscription v0, decoded by
the leader), and is checked against the model:

* every partition of the subscribed topics is assigned exactly once;
* identical subscriptions: counts differ by at most one;
* stickiness: a member that was in the previous generation keeps
  ``min(owned, P // C)`` of its partitions at least (all of them when it owned
  no more than ``P // C``), and the number of partitions that change owner is
  the model's minimum: partitions owned last generation minus the most that
  balance lets their owners keep,
  ``sum(min(owned, P // C)) + min(P % C, members owning more than P // C)``;
  a returning member's stale claims count for nothing (the higher generation
  wins);
* different subscriptions: no partition can move to a subscriber of its topic
  with at least two fewer partitions, so members with the same topics differ by
  at most one.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from hypothesis import given
from hypothesis import strategies as st

from pylog.client.assignors import StickyAssignor, Subscription, decode_subscription, encode_sticky_user_data
from pylog.replication import offsets_topic as ot

TP = Tuple[str, int]
S = StickyAssignor()
NAMES = [f"m{i}" for i in range(9)]


def joined(topics: List[str], last: Optional[Tuple[List[TP], int]]) -> Subscription:
    """What the leader decodes from a member's JoinGroup metadata (user data only after a first assignment)."""
    user = None if last is None else encode_sticky_user_data(*last)
    return decode_subscription(ot.encode_subscription(topics, user))


def check_exactly_once(counts: Dict[str, int], topics: Dict[str, List[str]], plan: Dict[str, List[TP]]) -> None:
    given_out = [tp for parts in plan.values() for tp in parts]
    assert len(given_out) == len(set(given_out)), "a partition was assigned twice"
    assert set(given_out) == {(t, p) for ts in topics.values() for t in ts if t in counts for p in range(counts[t])}
    for m, parts in plan.items():
        assert {t for t, _ in parts} <= set(topics[m]), f"{m} got a topic it does not subscribe to"


def model_min_moves(previous: Dict[TP, str], stayed: Dict[str, int], total: int, members: int) -> int:
    """The fewest owner changes balance allows: partitions owned before minus the most their owners keep."""
    lo, extra = divmod(total, members)
    keep = sum(min(n, lo) for n in stayed.values()) + min(extra, sum(1 for n in stayed.values() if n > lo))
    return len(previous) - keep


@st.composite
def histories(draw):
    counts = draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 8), min_size=1))
    first = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
    events = draw(st.lists(st.tuples(st.sampled_from(["join", "leave", "fenced", "return"]), st.sampled_from(NAMES)),
                           min_size=1, max_size=8))
    return counts, first, events


@given(histories())
def test_join_leave_and_stale_return_keep_balance_and_move_the_model_minimum(h):
    counts, first, events = h
    topics = sorted(counts)
    total = sum(counts.values())
    last: Dict[str, Tuple[List[TP], int]] = {}  # each member's (assignment, generation): its user data
    live = list(first)
    fenced: List[str] = []  # members cut off: they come back with the user data of their old generation
    owner: Dict[TP, str] = {}
    generation = 0
    for step, (kind, who) in enumerate([("start", "")] + events):
        if kind == "join" and who not in live and who not in fenced:
            live.append(who)
        elif kind in ("leave", "fenced") and who in live and len(live) > 1:
            live.remove(who)
            if kind == "fenced":
                fenced.append(who)
            else:
                last.pop(who, None)  # a closed consumer; a new one with the same id would have no memory
        elif kind == "return" and fenced:
            back = fenced.pop(0)
            live.append(back)
        elif kind != "start":
            continue
        generation += 1
        subs = {m: joined(topics, last.get(m)) for m in live}
        plan = S.assign_members(counts, subs)
        check_exactly_once(counts, {m: topics for m in live}, plan)
        sizes = sorted(len(v) for v in plan.values())
        assert sizes[-1] - sizes[0] <= 1, f"generation {generation}: unbalanced {plan}"
        # stickiness: only members of the previous generation hold valid claims
        stayed = {m: len([tp for tp, o in owner.items() if o == m]) for m in live if m in set(owner.values())}
        lo = total // len(live)
        for m, n in stayed.items():
            kept = sum(1 for tp in plan[m] if owner.get(tp) == m)
            assert kept >= min(n, lo), f"{m} owned {n}, kept {kept}, quota {lo}"
            if n <= lo:
                assert kept == n, f"{m} owned {n} <= quota {lo} but kept only {kept}"
        moves = sum(1 for m, parts in plan.items() for tp in parts if tp in owner and owner[tp] != m)
        assert moves == model_min_moves(owner, stayed, total, len(live)), (step, owner, plan)
        owner = {tp: m for m, parts in plan.items() for tp in parts}
        for m in live:
            last[m] = (plan[m], generation)


@st.composite
def mixed(draw):
    counts = draw(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 7), min_size=1))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    topics = {m: sorted(draw(st.lists(st.sampled_from(sorted(counts) + ["gone"]), min_size=1, unique=True)))
              for m in names}
    owned: Dict[str, List[TP]] = {m: [] for m in names}
    for t, n in sorted(counts.items()):
        for p in range(n + draw(st.integers(0, 1))):  # p == n: a partition that no longer exists
            who = draw(st.sampled_from(names + [None]))
            if who is not None:
                owned[who].append((t, p))
    gens = {m: draw(st.integers(1, 3)) for m in names}
    return counts, topics, owned, gens


@given(mixed())
def test_different_subscriptions_every_partition_once_and_no_improving_move(g):
    counts, topics, owned, gens = g
    subs = {m: joined(topics[m], (owned[m], gens[m]) if owned[m] else None) for m in topics}
    plan = S.assign_members(counts, subs)
    check_exactly_once(counts, topics, plan)
    for m, parts in plan.items():
        for t, _ in parts:
            for n in plan:
                if t in topics[n]:
                    assert len(plan[n]) >= len(parts) - 1, f"({t}) could move from {m} to {n}: {plan}"
    for m in plan:
        for n in plan:
            if topics[m] == topics[n]:
                assert abs(len(plan[m]) - len(plan[n])) <= 1
