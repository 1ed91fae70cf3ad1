"""Clocks: wall time for applications, virtual time for simulations.

Every component that needs the time asks a :class:`Clock`; nothing in
``pylog.replication`` reads the wall clock itself.

Thread-safety: :class:`RealClock` is stateless; :class:`SimClock` is only
advanced by its :class:`~pylog.runtime.scheduler.SimScheduler` (one thread).
"""
from __future__ import annotations

import time


class Clock:
    """A source of milliseconds."""

    def now_ms(self) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def __call__(self) -> int:
        return self.now_ms()


class RealClock(Clock):
    """Wall-clock milliseconds since the epoch (record timestamps use it)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class SimClock(Clock):
    """Virtual milliseconds; starts at ``start_ms`` and only moves when the scheduler advances it.

    >>> c = SimClock(1000); c.advance_to(1500); c.now_ms()
    1500
    """

    def __init__(self, start_ms: int = 1_700_000_000_000):
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance_to(self, t_ms: int) -> None:
        if t_ms < self._now:
            raise ValueError(f"virtual time cannot go back: {t_ms} < {self._now}")
        self._now = t_ms

    def _check(self) -> None:
        assert isinstance(self._now, int)
