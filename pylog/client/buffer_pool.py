"""The producer's buffer pool (Kafka's ``BufferPool``): ``buffer_memory`` and the senders waiting for room.

Owns: the count of ``buffer_memory`` bytes held by open and unacknowledged
batches (each holds ``batch_size``, a larger record its own size), the queue
of ``send`` calls blocked for room (first come, first served; a completed
batch wakes only the head, and only once its need plus a slack is free), and
the wait counters. pylog allocates no pooled buffers: like Kafka's pool it
only accounts for memory, which is what bounds a producer's footprint.

It is one of the parts :class:`~pylog.client.producer.Producer` is built
from (with :class:`~pylog.client.sender.Sender`): the producer inherits it,
and its methods work on the producer's own attributes; what it uses from the
other parts is declared under ``TYPE_CHECKING``. A completing
:class:`~pylog.client.accumulator.ProducerBatch` gives its share back through
``_give_back``.

Complexity: O(1) per reservation and release; O(waiting senders) to leave
the queue. Durability: none (memory accounting). Thread-safety: every method
runs under the producer's ``_lock``; ``_wait_for_room`` releases it while it
waits (a condition on the same lock) and holds it again when it returns.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, List, Optional, Set, Tuple

from pylog.client.accumulator import PartitionState, ProducerBatch
from pylog.errors import BufferExhaustedError, ProducerClosedError

if TYPE_CHECKING:
    from pylog.client._node import ClientNode
    from pylog.runtime.cluster_context import MetadataView
    from pylog.runtime.scheduler import Scheduler
    from pylog.client.partitioner import StickyPartitioner

logger = logging.getLogger(__name__)


class _RoomWaiter:
    """A ``send()`` blocked until ``need`` bytes of buffer_memory are free; ``wake`` is a condition
    on the producer's lock, notified when it is this waiter's turn (or on close)."""

    __slots__ = ("need", "wake")

    def __init__(self, need: int, wake: threading.Condition) -> None:
        self.need = need
        self.wake = wake


class BufferPool:
    """``buffer_memory`` accounting and the senders waiting for room (a part of :class:`Producer`)."""

    if TYPE_CHECKING:  # provided by the facade and the other parts
        scheduler: Scheduler
        max_block_ms: int
        _lock: Any  # threading.Lock, or the C send path's look-alike
        _realtime: bool
        _closed: bool
        _node: ClientNode
        _sticky_part: StickyPartitioner
        _incomplete: Set[ProducerBatch]

        def _wake_locked(self) -> None: ...

    def _init_buffer_pool(self, buffer_memory: int, batch_size: int) -> None:
        self.buffer_memory = buffer_memory
        # Senders blocked for buffer_memory, first come first served (Kafka's BufferPool waiters; under _lock).
        self._room_queue: Deque[_RoomWaiter] = deque()
        # A completion wakes the head only once this much more than it needs is free: one wake-up per
        # several completed batches, not one per batch (measured: docs/producer.md "buffer_memory").
        self._room_slack = max(buffer_memory // 4, batch_size)
        self._reserved = 0  # bytes of buffer_memory held by open and unacknowledged batches (under _lock)
        self.buffer_waits = 0  # times a send() blocked for room (Kafka's bufferpool-wait; under _lock)
        self.buffer_wait_seconds = 0.0  # wall time send() spent blocked for room (under _lock)

    def _wait_for_room(self, topic: str, parts: List[PartitionState], partition: Optional[int],
                       reserve: int) -> Tuple[PartitionState, Optional[ProducerBatch]]:
        """Block (under the lock, which waiting releases) until this send may go on: the partition
        it picks has an open batch to join, or ``reserve`` bytes of buffer_memory are free and no
        earlier sender still waits for room. Returns the partition's state and its open batch (None:
        the caller opens one). Raises BufferExhaustedError after ``max_block_ms`` without room (with
        room at that point it goes on even out of turn), ProducerClosedError on close().

        Fairness (Kafka's BufferPool): waiting senders queue first come first served; a sender that
        finds room while others wait queues behind them; a completed batch wakes only the head,
        and only once ``reserve`` plus ``_room_slack`` bytes are free, and the head passes the turn
        on when it leaves. Thread-safety: called with ``_lock`` held, returns with it held.
        Complexity: O(waiting senders) to leave the queue.
        """
        queue = self._room_queue
        sticky = partition is None
        deadline: Optional[float] = None
        me: Optional[_RoomWaiter] = None
        try:
            while True:
                if self._closed:
                    raise ProducerClosedError("send() after the producer was closed")
                part = self._sticky_part.partition(topic, len(parts)) if sticky else partition
                ps = parts[part]  # type: ignore[index]
                if ps.open is not None:
                    return ps, ps.open
                room = self._reserved + reserve <= self.buffer_memory
                if room and (not queue or queue[0] is me):
                    return ps, None
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.max_block_ms / 1000.0
                on_loop = self._realtime and self.scheduler.on_loop()
                if now >= deadline or on_loop or self._node.closed:
                    if room and not on_loop:
                        return ps, None  # max_block_ms is up and the room is there: go on out of turn
                    raise BufferExhaustedError(
                        f"{topic}-{part}: no room for a new batch of {reserve} bytes in buffer_memory="
                        f"{self.buffer_memory} ({self._reserved} bytes held by {len(self._incomplete)} "
                        f"unacknowledged batches)" + (" after waiting max_block_ms=%d" % self.max_block_ms
                                                      if not on_loop else
                                                      "; send() in a producer callback cannot wait for room"))
                if self._realtime:
                    if me is None:
                        me = _RoomWaiter(reserve, threading.Condition(self._lock))
                        queue.append(me)
                    self.buffer_waits += 1
                    me.wake.wait(deadline - now)
                    self.buffer_wait_seconds += time.monotonic() - now
                    continue
                # Simulated: one thread, virtual time runs on it, so let go of the lock while it runs.
                self.buffer_waits += 1
                self._wake_locked()
                self._lock.release()
                try:
                    want = self.buffer_memory - reserve
                    done = self.scheduler.wait_until(lambda: self._reserved <= want or self._closed,
                                                     self.max_block_ms)
                finally:
                    self._lock.acquire()
                if not done and self._reserved > want:
                    deadline = now  # virtual time passed max_block_ms: the next round raises
        finally:
            if me is not None:
                queue.remove(me)
                self._wake_head(0)  # the next sender's turn, if its room is there now

    def _wake_head(self, slack: int) -> None:
        """Wake the first waiting sender if its reservation plus ``slack`` bytes fits (under the lock).

        The slack is capped so that an empty buffer always wakes it. O(1).
        """
        head = self._room_queue[0] if self._room_queue else None
        if head is not None and self._reserved + head.need + min(slack, self.buffer_memory - head.need) \
                <= self.buffer_memory:
            head.wake.notify()

    def _give_back(self, reserved: int) -> None:
        """A batch completed: its share of buffer_memory is free again (under the lock)."""
        self._reserved -= reserved
        if self._room_queue:
            self._wake_head(self._room_slack)

    def _wake_all_waiters(self) -> None:
        """Wake every sender waiting for room, to see the producer closed (under the lock)."""
        for waiter in self._room_queue:
            waiter.wake.notify()



__all__ = ["BufferPool"]
