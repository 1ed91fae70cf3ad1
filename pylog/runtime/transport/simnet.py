"""A simulated network: seeded latency, loss, one-way and two-way partitions.

Every link (src, dst) is FIFO, like a TCP connection: a message is delivered
no earlier than the previous one on the same link. Latency is drawn from the
scheduler's seeded RNG, so a simulation replays exactly.

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
        self.scheduler.call_later(arrive - now, self._arrive, src, dst, msg, self.generation.get(dst, -1))

    def _arrive(self, src: Hashable, dst: Hashable, msg: Any, generation: int) -> None:
        if self.is_blocked(src, dst):
            self.dropped += 1
            return
        self._deliver(src, dst, msg, generation)

    def _check(self) -> None:
        super()._check()
        assert all(v > 0 for v in self.extra.values())
