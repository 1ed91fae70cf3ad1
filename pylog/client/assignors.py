"""Partition assignors the group leader runs client-side (Kafka's RangeAssignor and RoundRobinAssignor).

An assignor maps ``partitions_per_topic`` ({topic: partition count}) and
``subscriptions`` ({member_id: [topic, ...]}) to {member_id: [(topic, partition), ...]}.
Both assignors are deterministic: every member that ran them on the same input
would get the same answer.

* ``range`` (Kafka's default before 3.0): per topic, the members subscribed to
  it in member-id order each get a contiguous range; the first
  ``partitions % members`` get one extra.
* ``roundrobin``: every subscribed (topic, partition), in order, goes to the
  next member (in member-id order) that subscribes to its topic. With
  identical subscriptions, counts differ by at most one.

(cooperative-sticky is not implemented: pylog's groups use the eager protocol,
every member gives up its partitions when a rebalance starts.)

Complexity: O(partitions + members) for range per topic, O(partitions x members)
worst case for round robin. Thread-safety: pure functions.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

TP = Tuple[str, int]


class Assignor:
    """Base class: ``name`` is the protocol name sent in JoinGroup."""

    name = ""

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Sequence[str]]) -> Dict[str, List[TP]]:  # pragma: no cover - interface
        raise NotImplementedError


class RangeAssignor(Assignor):
    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Sequence[str]]) -> Dict[str, List[TP]]:
        out: Dict[str, List[TP]] = {m: [] for m in subscriptions}
        topics = sorted({t for ts in subscriptions.values() for t in ts if t in partitions_per_topic})
        for t in topics:
            members = sorted(m for m, ts in subscriptions.items() if t in ts)
            n = partitions_per_topic[t]
            each, extra = divmod(n, len(members))
            start = 0
            for i, m in enumerate(members):
                count = each + (1 if i < extra else 0)
                out[m].extend((t, p) for p in range(start, start + count))
                start += count
        return out


class RoundRobinAssignor(Assignor):
    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Sequence[str]]) -> Dict[str, List[TP]]:
        out: Dict[str, List[TP]] = {m: [] for m in subscriptions}
        members = sorted(subscriptions)
        if not members:
            return out
        subs = {m: set(subscriptions[m]) for m in members}
        topics = sorted({t for ts in subs.values() for t in ts if t in partitions_per_topic})
        i = 0
        for t in topics:
            for p in range(partitions_per_topic[t]):
                for _ in range(len(members)):  # the next member subscribed to t
                    m = members[i % len(members)]
                    i += 1
                    if t in subs[m]:
                        out[m].append((t, p))
                        break
        return out


ASSIGNORS: Dict[str, Assignor] = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor())}


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name`` (``"range"`` or ``"roundrobin"``)."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        from pylog.errors import InvalidConfigurationError

        raise InvalidConfigurationError(
            f"unknown partition assignor {name!r}; pylog has {sorted(ASSIGNORS)}") from None


__all__ = ["Assignor", "RangeAssignor", "RoundRobinAssignor", "ASSIGNORS", "get_assignor"]
