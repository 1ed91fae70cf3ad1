"""Partition assignors the group leader runs client-side (Kafka's Range, RoundRobin, Sticky and CooperativeSticky).

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

* ``cooperative-sticky`` (Kafka's CooperativeStickyAssignor, KIP-429): members
  send the partitions they own (and the generation they own them in) in their
  subscription (ConsumerProtocolSubscription v2); the assignment keeps as many
  of them in place as balance allows, and a partition that moves from one
  member to another is *withheld* for one generation: its old owner revokes
  it and rejoins, and the next generation hands it to the new owner. See
  :class:`CooperativeStickyAssignor` for the rules.

* ``sticky`` (Kafka's StickyAssignor, KIP-54): the same balanced, sticky plan
  as cooperative-sticky, for the *eager* protocol. Members give up everything
  before rejoining, so each one sends what it owned in its last assignment,
  and that assignment's generation, as the subscription's *user data*
  (Kafka's StickyAssignorUserData v1: :func:`encode_sticky_user_data`); the
  plan hands moved partitions to their new owner at once (everyone already
  revoked). See :class:`StickyAssignor`.

Range, round robin and sticky support only the *eager* rebalance protocol (a member
gives up every partition before it rejoins); cooperative-sticky supports both
(``rebalance_protocols``). A consumer is cooperative only when every assignor
it lists supports it (Kafka's rule).

Complexity: O(partitions + members) for range per topic, O(partitions x members)
worst case for round robin and for sticky. Thread-safety: pure functions.
Durability: none (the group coordinator stores the plans in ``__consumer_offsets``).
"""
from __future__ import annotations

import logging
import struct
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

logger = logging.getLogger(__name__)

TP = Tuple[str, int]

EAGER = "eager"
COOPERATIVE = "cooperative"
#: generation of a member that owns nothing (Kafka's AbstractStickyAssignor.DEFAULT_GENERATION)
DEFAULT_GENERATION = -1


class Subscription(NamedTuple):
    """One member's JoinGroup metadata as the leader's assignor sees it.

    ``user_data`` is the assignor-specific blob of ConsumerProtocolSubscription
    (the eager ``sticky`` assignor's StickyAssignorUserData), None when null.
    """

    topics: List[str]
    owned_partitions: List[TP] = []
    generation: int = DEFAULT_GENERATION
    user_data: Optional[bytes] = None


# ------------------------------------------------ ConsumerProtocolSubscription
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def _string(v: str) -> bytes:
    b = v.encode("utf-8")
    return _I16.pack(len(b)) + b


def encode_subscription(topics: Sequence[str], owned_partitions: Sequence[TP] = (),
                        generation: int = DEFAULT_GENERATION) -> bytes:
    """Kafka's ConsumerProtocolSubscription v2: v0's topics and (null) user data, then the
    owned partitions (v1: per topic, sorted, its partitions ascending) and the generation (v2).

    Readers of v0 (``offsets_topic.decode_subscription``) read the topics and stop.
    """
    parts = [_I16.pack(2), _I32.pack(len(topics))]
    parts.extend(_string(t) for t in topics)
    parts.append(_I32.pack(-1))  # user_data: null
    by_topic: Dict[str, List[int]] = {}
    for t, p in owned_partitions:
        by_topic.setdefault(t, []).append(p)
    parts.append(_I32.pack(len(by_topic)))
    for t in sorted(by_topic):
        parts.append(_string(t) + _I32.pack(len(by_topic[t])))
        parts.extend(_I32.pack(p) for p in sorted(by_topic[t]))
    parts.append(_I32.pack(generation))
    return b"".join(parts)


def decode_subscription(data: bytes) -> Subscription:
    """Any version (0-3) of ConsumerProtocolSubscription; fields a version lacks take their defaults.

    Raises :class:`~pylog.errors.CorruptRecordError` on truncated or inconsistent bytes.
    """
    from pylog.errors import CorruptRecordError

    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or n > len(data) - pos:
            raise CorruptRecordError(f"subscription: {n} bytes wanted at position {pos} of {len(data)}")
        pos += n
        return data[pos - n:pos]

    def i16() -> int:
        return int(_I16.unpack(take(2))[0])

    def i32() -> int:
        return int(_I32.unpack(take(4))[0])

    def string() -> str:
        return take(i16()).decode("utf-8")

    version = i16()
    n = i32()
    if n < 0 or n > len(data):
        raise CorruptRecordError(f"subscription: bad topic count {n}")
    topics = [string() for _ in range(n)]
    k = i32()
    user_data = take(k) if k >= 0 else None  # the eager sticky assignor's (decode_sticky_user_data)
    owned: List[TP] = []
    generation = DEFAULT_GENERATION
    if version >= 1 and pos < len(data):
        n = i32()
        if n < 0 or n > len(data):
            raise CorruptRecordError(f"subscription: bad owned-topic count {n}")
        for _ in range(n):
            t = string()
            k = i32()
            if k < 0 or k > len(data):
                raise CorruptRecordError(f"subscription: bad partition count {k} for owned topic {t!r}")
            owned.extend((t, i32()) for _ in range(k))
        if version >= 2 and pos < len(data):
            generation = i32()
    return Subscription(topics, owned, generation, user_data)


# ------------------------------------------------ StickyAssignorUserData (KIP-54)
def encode_sticky_user_data(owned_partitions: Sequence[TP], generation: Optional[int]) -> bytes:
    """Kafka's StickyAssignorUserData v1, the eager ``sticky`` assignor's subscription user data.

    Layout (no version field; v0 is the same without the generation)::

        int32 topic count, then per topic (sorted): string topic (int16 length + UTF-8),
              int32 partition count, int32 partition (ascending) ...
        int32 generation                                  (v1 only: omitted when ``generation`` is None)

    Complexity: O(P log P). Thread-safety: pure function.
    """
    by_topic: Dict[str, List[int]] = {}
    for t, p in owned_partitions:
        by_topic.setdefault(t, []).append(p)
    parts = [_I32.pack(len(by_topic))]
    for t in sorted(by_topic):
        parts.append(_string(t) + _I32.pack(len(by_topic[t])))
        parts.extend(_I32.pack(p) for p in sorted(by_topic[t]))
    if generation is not None:
        parts.append(_I32.pack(generation))
    return b"".join(parts)


def decode_sticky_user_data(data: Optional[bytes]) -> Tuple[List[TP], Optional[int]]:
    """(owned partitions, generation) from StickyAssignorUserData v1 or v0 (generation None).

    Kafka's rules (StickyAssignor.memberData): null or empty user data is
    ``([], None)`` (nothing owned); bytes whose topic array parses are v1 when
    four more bytes follow (the generation; anything after it is ignored, as
    Kafka's ``Schema.read`` does), else v0 (the generation absent); bytes that parse as
    neither are ignored: ``([], DEFAULT_GENERATION)``, never an error, so one
    member's bad user data cannot stop the group's assignment.

    Complexity: O(len(data)). Thread-safety: pure function.
    """
    if not data:
        return [], None
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or n > len(data) - pos:
            raise ValueError(n)
        pos += n
        return data[pos - n:pos]

    def i32() -> int:
        return int(_I32.unpack(take(4))[0])

    try:
        owned: List[TP] = []
        n = i32()
        if n < 0:
            raise ValueError(n)
        for _ in range(n):
            t = take(int(_I16.unpack(take(2))[0])).decode("utf-8")
            k = i32()
            if k < 0:
                raise ValueError(k)
            owned.extend((t, i32()) for _ in range(k))
    except (ValueError, UnicodeDecodeError, struct.error):
        return [], DEFAULT_GENERATION
    if len(data) - pos >= 4:
        return owned, i32()  # v1 (as Kafka's Schema.read, bytes after the generation are ignored)
    return owned, None  # v0: no room for the generation


class Assignor:
    """Base class: ``name`` is the protocol name sent in JoinGroup."""

    name = ""
    #: the rebalance protocols it supports (Kafka's ConsumerPartitionAssignor.supportedProtocols)
    rebalance_protocols: Tuple[str, ...] = (EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Sequence[str]]) -> Dict[str, List[TP]]:  # pragma: no cover - interface
        raise NotImplementedError

    def assign_members(self, partitions_per_topic: Mapping[str, int],
                       members: Mapping[str, Subscription]) -> Dict[str, List[TP]]:
        """The assignment from full subscriptions (owned partitions too); eager assignors ignore ownership."""
        return self.assign(partitions_per_topic, {m: s.topics for m, s in members.items()})

    def subscription_user_data(self, owned_partitions: Sequence[TP], generation: int) -> Optional[bytes]:
        """The user data a member sends in its subscription for this assignor, given its last assignment
        and that assignment's generation (Kafka's ConsumerPartitionAssignor.subscriptionUserData).
        None (the default): null user data."""
        return None


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


class AbstractStickyAssignor(Assignor):
    """The plan both sticky assignors share (Kafka's AbstractStickyAssignor): rules 1-3 of
    :class:`CooperativeStickyAssignor`, balance first, then keep as many valid claims as balance allows.

    Subclasses say where a member's claims come from (the subscription's owned partitions for
    cooperative-sticky, its user data for sticky) and what is done with the plan.
    Complexity: O(P x C) per plan. Thread-safety: stateless; safe from any thread.
    """

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Sequence[str]]) -> Dict[str, List[TP]]:
        """A plan with no claims (every member new)."""
        return self.assign_members(partitions_per_topic, {m: Subscription(list(ts)) for m, ts in subscriptions.items()})

    @staticmethod
    def valid_claims(partitions_per_topic: Mapping[str, int], members: Mapping[str, Subscription]) -> Dict[str, List[TP]]:
        """Rule 1: each member's owned partitions that still count (sorted)."""
        top = max((s.generation for s in members.values()), default=DEFAULT_GENERATION)
        claims: Dict[str, List[TP]] = {}
        seen: Dict[TP, int] = {}
        for m in sorted(members):
            sub = members[m]
            keep: List[TP] = []
            if sub.generation == top:
                subscribed = set(sub.topics)
                for t, p in sorted(set(sub.owned_partitions)):
                    if t in subscribed and 0 <= p < partitions_per_topic.get(t, 0):
                        keep.append((t, p))
                        seen[(t, p)] = seen.get((t, p), 0) + 1
            claims[m] = keep
        return {m: [tp for tp in tps if seen[tp] == 1] for m, tps in claims.items()}

    def sticky_plan(self, partitions_per_topic: Mapping[str, int],
                    members: Mapping[str, Subscription]) -> Dict[str, List[TP]]:
        """Rules 1-3: the balanced, sticky assignment (partitions may still be owned by others)."""
        out: Dict[str, List[TP]] = {m: [] for m in members}
        if not members:
            return out
        claims = self.valid_claims(partitions_per_topic, members)
        subs = {m: sorted({t for t in s.topics if t in partitions_per_topic}) for m, s in members.items()}
        topic_sets = {tuple(v) for v in subs.values()}
        if len(topic_sets) == 1:
            return self._constrained(partitions_per_topic, subs, claims)
        return self._general(partitions_per_topic, subs, claims)

    @staticmethod
    def _constrained(counts: Mapping[str, int], subs: Mapping[str, List[str]],
                     claims: Mapping[str, List[TP]]) -> Dict[str, List[TP]]:
        topics = next(iter(subs.values()))
        every = [(t, p) for t in topics for p in range(counts[t])]
        names = sorted(subs)
        lo, extra = divmod(len(every), len(names))
        out: Dict[str, List[TP]] = {}
        for m in names:  # keep min(owned, quota)
            own = claims[m]
            keep = min(len(own), lo)
            if len(own) > lo and extra > 0:
                keep, extra = lo + 1, extra - 1
            out[m] = list(own[:keep])
        taken = {tp for parts in out.values() for tp in parts}
        free = [tp for tp in every if tp not in taken]
        free.reverse()
        for m in names:  # fill up to the minimum quota
            while len(out[m]) < lo:
                out[m].append(free.pop())
        for m in names:  # the rest: one each, to members at the minimum
            if not free:
                break
            if len(out[m]) == lo and extra > 0:
                out[m].append(free.pop())
                extra -= 1
        assert not free, free
        return out

    @staticmethod
    def _general(counts: Mapping[str, int], subs: Mapping[str, List[str]],
                 claims: Mapping[str, List[TP]]) -> Dict[str, List[TP]]:
        out: Dict[str, List[TP]] = {m: list(claims[m]) for m in subs}
        taken = {tp for parts in out.values() for tp in parts}
        subscribers: Dict[str, List[str]] = {}
        for m in sorted(subs):
            for t in subs[m]:
                subscribers.setdefault(t, []).append(m)
        for t in sorted(subscribers):
            for p in range(counts[t]):
                if (t, p) not in taken:
                    m = min(subscribers[t], key=lambda x: (len(out[x]), x))
                    out[m].append((t, p))
        moved = True
        while moved:  # move partitions towards members with at least two fewer (each move lowers sum of squares)
            moved = False
            for m in sorted(out, key=lambda x: (-len(out[x]), x)):
                for tp in sorted(out[m], reverse=True):
                    to = min(subscribers[tp[0]], key=lambda x: (len(out[x]), x))
                    if len(out[to]) < len(out[m]) - 1:
                        out[m].remove(tp)
                        out[to].append(tp)
                        moved = True
                        break
                if moved:
                    break
        return {m: sorted(parts) for m, parts in out.items()}


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """Kafka's CooperativeStickyAssignor: balanced, sticky, and never moves a partition in one step.

    Rules (Kafka's AbstractStickyAssignor, then CooperativeStickyAssignor):

    1. **Valid claims.** A member's owned partitions count only if its
       generation is the highest among the members (claims of an older
       generation are stale), the topic is still subscribed by it and the
       partition exists. A partition claimed by two members of that generation
       is claimed by neither.
    2. **Identical subscriptions** (the usual case): with P partitions and C
       members, every member gets ``P // C`` or ``P // C + 1`` partitions
       (``P % C`` members get the extra one). Each member keeps its valid
       claims up to ``P // C`` (``P // C + 1`` while extra slots remain, first
       come in member-id order), so a member keeps ``min(owned, quota)``; the
       remaining partitions fill members below ``P // C`` first, then one each
       to members at ``P // C`` until the extra slots are used.
    3. **Different subscriptions**: valid claims are kept, each unowned
       partition goes to the least loaded subscriber, then a partition moves
       from a member to a subscriber of its topic with at least two fewer
       partitions until no such move exists.
    4. **Cooperative.** A partition the plan gives to a member while another
       member (any claim, valid or not) still owns it is left out of this
       generation: its owner, seeing it missing, revokes it and rejoins, and
       the next generation (where nobody claims it) gives it out.

    :meth:`sticky_plan` is the plan before rule 4 (used by the tests).
    Complexity: O(P x C) per assignment; rule 3 O(P x C) per move.
    """

    name = "cooperative-sticky"
    rebalance_protocols = (EAGER, COOPERATIVE)

    def assign_members(self, partitions_per_topic: Mapping[str, int],
                       members: Mapping[str, Subscription]) -> Dict[str, List[TP]]:
        plan = self.sticky_plan(partitions_per_topic, members)
        claimed: Dict[TP, Set[str]] = {}
        for m, sub in members.items():
            for tp in sub.owned_partitions:
                claimed.setdefault(tp, set()).add(m)
        # rule 4: withhold what another member still owns
        return {m: [tp for tp in parts if not (claimed.get(tp, set()) - {m})] for m, parts in plan.items()}


class StickyAssignor(AbstractStickyAssignor):
    """Kafka's eager StickyAssignor (KIP-54): the sticky plan, handed out in one step.

    Members follow the eager protocol: each gives up all its partitions before
    rejoining, so its JoinGroup subscription lists nothing as owned. What it
    owned travels in the subscription's user data instead: Kafka's
    StickyAssignorUserData v1 (:func:`encode_sticky_user_data`), the
    partitions of the member's last assignment and that assignment's
    generation. The leader decodes it (:func:`decode_sticky_user_data`) and
    runs the plan of :class:`AbstractStickyAssignor` (rules 1-3 of
    :class:`CooperativeStickyAssignor`): claims of a generation older than the
    highest one are stale, a partition claimed twice in the highest generation
    is kept by neither, and balance comes before stickiness. There is no
    cooperative step: every member has already revoked, so a moved partition
    goes to its new owner in this generation (no partition is owned by two
    members in one generation, since the plan is a partition of the topics).

    User data without a generation (v0, written by Kafka clients before 2.3)
    counts as the highest generation present, so its claims are kept unless
    another member claims the same partition (Kafka keeps v0 claims too; which
    member's claims it drops then depends on its HashMap order, pylog's rule
    does not). A member's ``owned_partitions`` and ``generation`` fields (the
    subscription v1+ fields) are ignored, as by Kafka's StickyAssignor: an
    eager member revoked them before joining.

    Complexity: O(P x C) per assignment (rule 3: O(P x C) per move).
    Thread-safety: stateless (the claims are the members'); safe from any thread.
    """

    name = "sticky"
    rebalance_protocols = (EAGER,)

    @staticmethod
    def member_claims(members: Mapping[str, Subscription]) -> Dict[str, Subscription]:
        """Each member's subscription with ``owned_partitions`` and ``generation`` taken from its user data."""
        decoded = {m: decode_sticky_user_data(s.user_data) for m, s in members.items()}
        top = max((g for _, g in decoded.values() if g is not None), default=DEFAULT_GENERATION)
        out: Dict[str, Subscription] = {}
        for m, s in members.items():
            owned, generation = decoded[m]
            out[m] = Subscription(list(s.topics), owned, top if generation is None else generation, s.user_data)
        return out

    def assign_members(self, partitions_per_topic: Mapping[str, int],
                       members: Mapping[str, Subscription]) -> Dict[str, List[TP]]:
        """The sticky plan from the members' user data; every partition of it is handed out now."""
        return self.sticky_plan(partitions_per_topic, self.member_claims(members))

    def subscription_user_data(self, owned_partitions: Sequence[TP], generation: int) -> Optional[bytes]:
        """StickyAssignorUserData v1 of the member's last assignment (Kafka's StickyAssignor.subscriptionUserData)."""
        return encode_sticky_user_data(owned_partitions, generation)


def rebalance_protocol(assignors: Sequence[Assignor]) -> str:
    """The protocol a consumer with ``assignors`` follows: the highest one all of them support (Kafka's rule)."""
    common = set.intersection(*(set(a.rebalance_protocols) for a in assignors)) if assignors else {EAGER}
    return COOPERATIVE if COOPERATIVE in common else EAGER


ASSIGNORS: Dict[str, Assignor] = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(),
                                                      CooperativeStickyAssignor())}


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name`` (``"range"``, ``"roundrobin"``, ``"sticky"`` or ``"cooperative-sticky"``)."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        from pylog.errors import InvalidConfigurationError

        raise InvalidConfigurationError(
            f"unknown partition assignor {name!r}; pylog has {sorted(ASSIGNORS)}") from None


__all__ = ["Assignor", "RangeAssignor", "RoundRobinAssignor", "AbstractStickyAssignor", "StickyAssignor",
           "CooperativeStickyAssignor", "ASSIGNORS", "get_assignor", "encode_sticky_user_data", "decode_sticky_user_data",
           "Subscription", "encode_subscription", "decode_subscription", "rebalance_protocol", "EAGER", "COOPERATIVE",
           "DEFAULT_GENERATION"]
