"""In-process delivery through the scheduler, with no latency and no loss."""
from __future__ import annotations

from typing import Any, Hashable

from pylog.runtime.scheduler import Scheduler
from pylog.runtime.transport.base import Transport


class DirectTransport(Transport):
    """``send`` queues the handler call on the scheduler (FIFO, no faults).

    Complexity: O(1) per message. Thread-safety: ``send`` may be called from
    any thread (the scheduler's queue is thread-safe); delivery is on its loop.
    """

    def __init__(self, scheduler: Scheduler):
        super().__init__()
        self.scheduler = scheduler

    def send(self, src: Hashable, dst: Hashable, msg: Any) -> None:
        self.sent += 1
        self.scheduler.call_soon(self._deliver, src, dst, msg, self.generation.get(dst, -1))
