"""A simulated network: seeded latency, loss, one-way and two-way partitions, dropped connections.

Every link (src, dst) is FIFO, like a TCP connection: a message is delivered
no earlier than the previous one on the same link (ties keep the sending
order: the scheduler runs equal times in the order they were set), so what
one client sends one broker is handled in the order sent, whatever the
latency. A lost message (``loss``, a partition) is simply never delivered;
the ones after it still arrive in order.

The two directions between two nodes form one *connection* (requests one way,
responses the other, as Kafka's clients and brokers use TCP).
:meth:`SimulatedNetwork.drop_connection` breaks it: everything in flight on it,
both ways, is lost, and nothing more is ever delivered from it. Both ends are
told (their :meth:`~pylog.runtime.transport.base.Transport.on_disconnect`
listeners, at once, before anything sent later can arrive); whatever either
end sends next goes on a new connection, as a Kafka client reconnects.
Latency is drawn from the scheduler's seeded RNG, so a simulation replays exactly.

Complexity: O(1) per message (plus the scheduler's O(log n)).
Thread-safety: none; simulations are single-threaded.
"""
from __future__ import annotations

from typing import Any, Dict, Hashable, Iterable, Optional, Set, Tuple

from pylog.runtime.scheduler import Scheduler
from pylog.runtime.transport.base import Transport

Link = Tuple[Hashable, Hashable]


class SimulatedNetwork(Transport):
    """Latency in ``[min_latency_ms, max_latency_ms]``, loss probability ``loss``.

    ``partition(a, b)`` cuts every link between the groups (both ways, or only
    a -> b with ``one_way=True``); ``heal()`` restores all links. A message
    already in flight when a link is cut is dropped on arrival.
    ``slow(node, extra_ms)`` adds latency to everything a node sends or receives.
    """

    def __init__(self, scheduler: Scheduler, *, min_latency_ms: int = 1, max_latency_ms: int = 5, loss: float = 0.0):
        super().__init__()
        if not 0 <= min_latency_ms <= max_latency_ms:
            raise ValueError(f"need 0 <= min_latency_ms <= max_latency_ms, got {min_latency_ms}, {max_latency_ms}")
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss}")
        self.scheduler = scheduler
        self.min_latency_ms = min_latency_ms
        self.max_latency_ms = max_latency_ms
        self.loss = loss
        self.blocked: Set[Link] = set()
        self.extra: Dict[Hashable, int] = {}
        self._last_arrival: Dict[Link, int] = {}
        #: the incarnation of each connection (key: the two nodes, sorted by repr): bumped when it drops
        self._conn: Dict[Link, int] = {}
        #: connections that carried a message since they were last dropped, in first-use order
        #: (what :meth:`drop_random_connection` picks from)
        self._used: Dict[Link, None] = {}
        self.connections_dropped = 0

    def partition(self, a: Iterable[Hashable], b: Optional[Iterable[Hashable]] = None, *, one_way: bool = False) -> None:
        """Cut links from group ``a`` to group ``b`` (default: every other registered node)."""
        a = set(a)
        b = set(b) if b is not None else set(self.handlers) - a
        for x in a:
            for y in b:
                if x != y:
                    self.blocked.add((x, y))
                    if not one_way:
                        self.blocked.add((y, x))

    def isolate(self, node: Hashable) -> None:
        """Cut ``node`` off from everyone, both ways (clients included)."""
        self.blocked.add((node, "*"))
        self.blocked.add(("*", node))

    def heal(self) -> None:
        self.blocked.clear()

    def slow(self, node: Hashable, extra_ms: int) -> None:
        if extra_ms <= 0:
            self.extra.pop(node, None)
        else:
            self.extra[node] = extra_ms

    def is_blocked(self, src: Hashable, dst: Hashable) -> bool:
        b = self.blocked
        return bool(b) and ((src, dst) in b or (src, "*") in b or ("*", dst) in b)

    @staticmethod
    def _key(a: Hashable, b: Hashable) -> Link:
        return (a, b) if repr(a) <= repr(b) else (b, a)

    def connection(self, a: Hashable, b: Hashable) -> int:
        return self._conn.get(self._key(a, b), 0)

    def drop_connection(self, a: Hashable, b: Hashable) -> None:
        """Break the connection between ``a`` and ``b``: what is in flight on it (both ways) is lost and
        nothing more is delivered from it; both ends' disconnect listeners run now (see the module doc)."""
        key = self._key(a, b)
        lost = self._conn.get(key, 0)
        self._conn[key] = lost + 1
        self._used.pop(key, None)
        self.connections_dropped += 1
        for node, peer in ((a, b), (b, a)):
            listener = self.disconnect_listeners.get(node)
            if listener is not None:
                self.scheduler.call_soon(listener, peer, lost)

    def drop_random_connection(self, rng: Any) -> Optional[Link]:
        """Drop one connection that carried traffic since it was last dropped (chosen with ``rng``);
        returns it, or None when there is none."""
        if not self._used:
            return None
        key = rng.choice(list(self._used))
        self.drop_connection(*key)
        return key

    def send(self, src: Hashable, dst: Hashable, msg: Any) -> None:
        self.sent += 1
        rng = self.scheduler.rng
        latency = rng.randint(self.min_latency_ms, self.max_latency_ms)
        lost = self.loss > 0 and rng.random() < self.loss
        if lost or self.is_blocked(src, dst):
            self.dropped += 1
            return
        now = self.scheduler.clock.now_ms()
        arrive = max(now + latency + self.extra.get(src, 0) + self.extra.get(dst, 0), self._last_arrival.get((src, dst), 0))
        self._last_arrival[(src, dst)] = arrive
        key = self._key(src, dst)
        if src != dst:
            self._used[key] = None
        self.scheduler.call_later(arrive - now, self._arrive, src, dst, msg, self.generation.get(dst, -1),
                                  self._conn.get(key, 0))

    def _arrive(self, src: Hashable, dst: Hashable, msg: Any, generation: int, conn: int = 0) -> None:
        if self.is_blocked(src, dst) or self._conn.get(self._key(src, dst), 0) != conn:
            self.dropped += 1
            return
        self._deliver(src, dst, msg, generation)

    def _check(self) -> None:
        super()._check()
        assert all(v > 0 for v in self.extra.values())
        assert all(v > 0 for v in self._conn.values()) and self.connections_dropped >= len(self._conn)
