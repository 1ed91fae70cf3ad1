"""Known replication bugs a simulation can switch on (``pylog sim --inject-bug``), to show its checks catch them.

A bug is a *strategy*: a :class:`Bug` names a :class:`~pylog.replication.partition.Partition`
subclass that breaks one rule, and the simulation gives it to the cluster
(``Cluster(partition_factory=...)``, passed down to each broker's replica
manager), which builds its partitions with it. Nothing is patched: two
simulations in one process, one with a bug and one without, do not see each
other's behaviour.

Thread-safety: the bug objects are immutable.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Type

from pylog.errors import InvalidConfigurationError
from pylog.replication.messages import OffsetsForLeaderEpochResponse
from pylog.replication.partition import FETCHING, FOLLOWER, LEADER, TRUNCATING, Partition


class NoEpochTruncationPartition(Partition):
    """A follower that skips the leader-epoch truncation (KIP-101) and fetches from its own log end."""

    def on_offsets_for_leader_epoch(self, resp: OffsetsForLeaderEpochResponse) -> bool:
        if self.role != FOLLOWER or self.follower_state != TRUNCATING or resp.error is not None:
            return False
        self.follower_state = FETCHING
        return True


class HwIgnoresFollowersPartition(Partition):
    """A leader that advances the HW to its own LEO without waiting for the ISR."""

    def maybe_increment_hw(self, now_ms: int) -> bool:
        if self.role == LEADER and self.log.log_end_offset > self.high_watermark:
            self.high_watermark = self.log.log_end_offset
            return True
        return False


@dataclass(frozen=True)
class Bug:
    """One injectable bug: its name, what it breaks, and the partition class that breaks it."""

    name: str
    description: str
    partition_class: Type[Partition]


#: Every known bug, by name.
KNOWN_BUGS: Dict[str, Bug] = {b.name: b for b in (
    Bug("no-epoch-truncation",
        "a follower skips the leader-epoch truncation (KIP-101) and fetches from its own log end",
        NoEpochTruncationPartition),
    Bug("hw-ignores-followers", "the leader advances the HW to its own LEO without waiting for the ISR",
        HwIgnoresFollowersPartition),
)}

#: Test-only bugs ``pylog sim --inject-bug`` can switch on, to show the checks catch them (name -> what it breaks).
BUGS: Dict[str, str] = {name: b.description for name, b in KNOWN_BUGS.items()}


def bug_named(name: Optional[str]) -> Optional[Bug]:
    """The :class:`Bug` called ``name`` (None for None); InvalidConfigurationError for an unknown name."""
    if name is None:
        return None
    bug = KNOWN_BUGS.get(name)
    if bug is None:
        raise InvalidConfigurationError(f"unknown bug {name!r}; known: {', '.join(BUGS)}")
    return bug
