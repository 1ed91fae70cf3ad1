"""pylog.replication.group_state: the group states are an enum with Kafka's names, moved only along Kafka's edges."""
from __future__ import annotations

import json
import logging

import pytest

from pylog.replication.group_coordinator import COMPLETING_REBALANCE, EMPTY, STABLE
from pylog.replication.group_state import TRANSITIONS, Group, GroupState


def test_states_are_kafkas_names_wherever_they_are_shown():
    assert [s.value for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert STABLE is GroupState.STABLE and STABLE == "Stable"  # old string comparisons still hold
    assert f"{STABLE}" == str(STABLE) == "Stable" and json.dumps([EMPTY]) == '["Empty"]'
    assert set(TRANSITIONS) == set(GroupState)


def test_transition_follows_kafkas_valid_previous_states(caplog):
    g = Group("g", 0)
    assert g.state is EMPTY
    with caplog.at_level(logging.DEBUG, logger="pylog.replication.group_state"):
        g.transition_to(GroupState.PREPARING_REBALANCE, "member joined")
        g.transition_to(COMPLETING_REBALANCE)
    assert g.state is COMPLETING_REBALANCE
    assert "group 'g': Empty -> PreparingRebalance (member joined)" in caplog.text
    with pytest.raises(AssertionError):
        g.transition_to(EMPTY)  # CompletingRebalance -> Empty: not an edge (members leave through PreparingRebalance)
