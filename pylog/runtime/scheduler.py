"""Schedulers: run callbacks at times, in virtual time or on a background thread.

Both implementations run every callback on *one* thread (the simulation's
caller, or the real scheduler's loop thread), so the state machines they drive
need no locks. Code on other threads hands work to the loop with
:meth:`Scheduler.run_sync` or :meth:`Scheduler.call_soon`.

* :class:`SimScheduler` - a heap of timers ordered by (time, sequence); virtual
  time jumps to the next timer; every random choice comes from ``rng``
  (one ``random.Random(seed)``), so a run replays exactly from its seed.
* :class:`RealScheduler` - a daemon loop thread with a heap and a condition
  variable; :meth:`close` stops it and joins it.

Complexity: O(log n) per timer. Durability: none (in memory).
"""
from __future__ import annotations

import heapq
import random
import threading
from collections import deque
from typing import Any, Callable, List, Optional, Tuple

from pylog.errors import RequestTimedOutError
from pylog.runtime.clock import Clock, RealClock, SimClock


_MAX_DUE = 256  # timers the real loop takes from the heap per lock round trip


class Timer:
    """A scheduled callback; :meth:`cancel` stops it from running."""

    __slots__ = ("when", "fn", "args", "cancelled")

    def __init__(self, when: int, fn: Callable[..., Any], args: Tuple[Any, ...]):
        self.when = when
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """Interface shared by the simulated and the real scheduler."""

    clock: Clock
    rng: random.Random
    simulated: bool = False

    def call_later(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> Timer:  # pragma: no cover
        raise NotImplementedError

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> Timer:
        return self.call_later(0, fn, *args)

    def run_sync(self, fn: Callable[[], Any]) -> Any:  # pragma: no cover
        """Run ``fn`` on the scheduler's thread and return its result (or raise its exception)."""
        raise NotImplementedError

    def wait_until(self, predicate: Callable[[], bool], timeout_ms: Optional[int]) -> bool:  # pragma: no cover
        """Block until ``predicate()`` is true (evaluated on the loop); False on timeout."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def on_loop(self) -> bool:
        """True when the caller runs on the scheduler's loop thread (a single-threaded scheduler: always)."""
        return True


class SimScheduler(Scheduler):
    """Virtual time, single thread, deterministic from ``seed``.

    ``wait_until`` *runs* timers (advancing virtual time) until the predicate
    holds, so a blocking client call in a simulation completes without any
    real waiting.

    Thread-safety: none; use from one thread.
    """

    simulated = True

    def __init__(self, seed: int, clock: Optional[SimClock] = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock: SimClock = clock or SimClock()
        self._heap: List[Tuple[int, int, Timer]] = []
        self._seq = 0
        self.events_run = 0

    @property
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def call_later(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> Timer:
        t = Timer(self.clock.now_ms() + max(0, int(delay_ms)), fn, args)
        self._seq += 1
        heapq.heappush(self._heap, (t.when, self._seq, t))
        return t

    def _next_when(self) -> Optional[int]:
        """Time of the next live timer (dropping cancelled ones), or None."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def step(self) -> bool:
        """Run the next timer; False when none is left."""
        if self._next_when() is None:
            return False
        when, _, t = heapq.heappop(self._heap)
        self.clock.advance_to(max(when, self.clock.now_ms()))
        self.events_run += 1
        t.fn(*t.args)
        return True

    def run_for(self, ms: int) -> None:
        """Run every timer due in the next ``ms`` virtual milliseconds, then set the clock there."""
        end = self.clock.now_ms() + ms
        while True:
            nxt = self._next_when()
            if nxt is None or nxt > end:
                break
            self.step()
        self.clock.advance_to(max(end, self.clock.now_ms()))

    def wait_until(self, predicate: Callable[[], bool], timeout_ms: Optional[int]) -> bool:
        deadline = None if timeout_ms is None else self.clock.now_ms() + timeout_ms
        while not predicate():
            nxt = self._next_when()
            if nxt is None:
                return False
            if deadline is not None and nxt > deadline:
                self.clock.advance_to(max(deadline, self.clock.now_ms()))
                return predicate()
            self.step()
        return True

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        return fn()

    def _check(self) -> None:
        assert all(w >= 0 for w, _, _ in self._heap)


class RealScheduler(Scheduler):
    """Wall-clock timers run by one background thread (named ``pylog-loop``).

    Thread-safety: :meth:`call_later`, :meth:`call_soon`, :meth:`run_sync`
    and :meth:`wait_until` may be called from any thread; callbacks run on the
    loop thread one at a time. :meth:`close` joins the loop thread.
    """

    def __init__(self, seed: Optional[int] = None):
        self.rng = random.Random(seed)
        self.clock = RealClock()
        self._heap: List[Tuple[int, int, Timer]] = []
        self._seq = 0
        self._cond = threading.Condition()
        self._closed = False
        self._loop_ident: Optional[int] = None  # the loop thread's id, set when it starts
        self._waiters = 0  # wait_until callers sleeping on _cond (the loop notifies only if any)
        # call_soon's queue: appended to without the lock (deque.append is atomic), FIFO; the loop
        # sets _sleeping (under _cond) before it re-checks the queue and waits, and call_soon
        # notifies only then - see _loop
        self._soon: "deque[Timer]" = deque()
        self._sleeping = False
        #: exceptions raised by callbacks (the loop survives them; ``_check`` reports them)
        self.errors: List[BaseException] = []
        self._thread = threading.Thread(target=self._loop, name="pylog-loop", daemon=True)
        self._thread.start()

    def call_later(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> Timer:
        t = Timer(self.clock.now_ms() + max(0, int(delay_ms)), fn, args)
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (t.when, self._seq, t))
            # The loop re-reads the heap before it sleeps, so a timer added by one of its own
            # callbacks needs no wake-up (a measurable share of a produce on the loop).
            if threading.get_ident() != self._loop_ident:
                self._cond.notify_all()
        return t

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> Timer:
        """Run ``fn(*args)`` on the loop as soon as possible, after everything queued before it.

        O(1) and lock-free unless the loop is asleep (then one notify): this is how every
        in-process message and client wake-up reaches the loop."""
        t = Timer(0, fn, args)
        self._soon.append(t)
        if self._sleeping:
            with self._cond:
                self._cond.notify_all()
        return t

    def on_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def _loop(self) -> None:
        self._loop_ident = threading.get_ident()
        cond, heap, soon, now_ms, pop = self._cond, self._heap, self._soon, self.clock.now_ms, heapq.heappop
        take = soon.popleft
        while True:
            with cond:
                while True:
                    if self._closed:
                        return
                    now = now_ms()
                    due: List[Timer] = []
                    # Timers due now first (one lock round trip, not one per callback; a timer a
                    # callback adds is due no earlier and sorts after these), then what call_soon
                    # queued before this pass (what callbacks queue now waits for the next pass,
                    # so neither source can starve the other).
                    while heap and heap[0][0] <= now and len(due) < _MAX_DUE:
                        due.append(pop(heap)[2])
                    for _ in range(min(len(soon), _MAX_DUE)):
                        due.append(take())
                    if due:
                        break
                    self._sleeping = True
                    if not soon:  # a call_soon that saw _sleeping unset appended before this check
                        cond.wait((heap[0][0] - now) / 1000.0 if heap else None)
                    self._sleeping = False
            for t in due:
                if t.cancelled:
                    continue
                if self._closed:
                    return
                try:
                    t.fn(*t.args)
                except Exception as exc:  # a callback bug must not kill the loop: keep it for _check()
                    import traceback

                    traceback.print_exc()
                    self.errors.append(exc)
            if self._waiters:  # wake wait_until callers (read without the lock: a miss costs them <= 5 ms)
                with cond:
                    cond.notify_all()

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        if self.on_loop():
            return fn()
        done = threading.Event()
        box: List[Any] = [None, None]

        def run() -> None:
            try:
                box[0] = fn()
            except BaseException as exc:  # handed back to the caller
                box[1] = exc
            finally:
                done.set()

        self.call_soon(run)
        while not done.wait(0.05):
            if self._closed:
                raise RequestTimedOutError("the cluster was closed while a call was pending")
        if box[1] is not None:
            raise box[1]
        return box[0]

    def wait_until(self, predicate: Callable[[], bool], timeout_ms: Optional[int]) -> bool:
        import time

        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
        while True:
            if self.run_sync(predicate):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            with self._cond:
                self._waiters += 1
                try:
                    self._cond.wait(0.005 if deadline is None else max(0.0, min(0.005, deadline - time.monotonic())))
                finally:
                    self._waiters -= 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if not self.on_loop():
            self._thread.join()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _check(self) -> None:
        assert not self.errors, f"callbacks raised on the loop thread: {self.errors[:3]!r}"
