"""Range and round-robin assignors: every subscribed partition assigned exactly once, to a subscriber."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog.client.assignors import RangeAssignor, RoundRobinAssignor, get_assignor
from pylog.errors import InvalidConfigurationError

topics = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 12), min_size=1)


@st.composite
def scenario(draw):
    counts = draw(topics)
    members = draw(st.lists(st.text("xyz0123", min_size=1, max_size=4), min_size=1, max_size=6, unique=True))
    subs = {m: draw(st.lists(st.sampled_from(sorted(counts)), min_size=1, unique=True)) for m in members}
    return counts, subs


def check_exactly_once(counts, subs, plan):
    assert set(plan) == set(subs)
    owned = [tp for parts in plan.values() for tp in parts]
    assert len(owned) == len(set(owned)), "a partition was assigned twice"
    wanted = {(t, p) for ts in subs.values() for t in ts for p in range(counts[t])}
    assert set(owned) == wanted
    for m, parts in plan.items():
        assert all(t in subs[m] for t, _ in parts), f"{m} got a topic it does not subscribe to"


@given(scenario())
def test_range_assigns_every_partition_once(s):
    counts, subs = s
    plan = RangeAssignor().assign(counts, subs)
    check_exactly_once(counts, subs, plan)
    for t, n in counts.items():  # per topic: subscribers' shares differ by at most one, contiguous
        shares = [[p for tt, p in plan[m] if tt == t] for m in sorted(subs) if t in subs[m]]
        if shares:
            sizes = [len(x) for x in shares]
            assert max(sizes) - min(sizes) <= 1
            flat = [p for x in shares for p in x]
            assert flat == sorted(flat)


@given(scenario())
def test_round_robin_assigns_every_partition_once(s):
    counts, subs = s
    check_exactly_once(counts, subs, RoundRobinAssignor().assign(counts, subs))


@given(topics, st.integers(1, 8))
def test_round_robin_balance_within_one_for_identical_subscriptions(counts, n):
    subs = {f"m{i}": sorted(counts) for i in range(n)}
    plan = RoundRobinAssignor().assign(counts, subs)
    check_exactly_once(counts, subs, plan)
    sizes = [len(v) for v in plan.values()]
    assert max(sizes) - min(sizes) <= 1


def test_range_known_layout():
    # Kafka's RangeAssignor javadoc example: two consumers, two topics of three partitions
    plan = RangeAssignor().assign({"t0": 3, "t1": 3}, {"C0": ["t0", "t1"], "C1": ["t0", "t1"]})
    assert plan == {"C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)], "C1": [("t0", 2), ("t1", 2)]}


def test_round_robin_known_layout():
    plan = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, {"C0": ["t0", "t1"], "C1": ["t0", "t1"]})
    assert plan == {"C0": [("t0", 0), ("t0", 2), ("t1", 1)], "C1": [("t0", 1), ("t1", 0), ("t1", 2)]}


def test_unknown_assignor_is_a_configuration_error():
    assert get_assignor("range").name == "range"
    assert get_assignor("sticky").name == "sticky"  # Kafka's eager StickyAssignor (KIP-54)
    with pytest.raises(InvalidConfigurationError, match="'stiky'.*'cooperative-sticky', 'range', 'roundrobin', 'sticky'"):
        get_assignor("stiky")
