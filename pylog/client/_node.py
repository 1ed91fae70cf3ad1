"""Shared plumbing of the in-process clients: a transport node with correlated requests and timeouts.

Request timeouts, as Kafka's NetworkClient checks them: not one scheduler
timer per request, but one FIFO of ``(deadline, correlation id)`` per timeout
value (deadlines of one value grow with the sending order) and a single
scheduler timer armed for the earliest live deadline. A response only
removes its entry from ``_pending``; answered entries leave their FIFO when
they reach its head (when a request is added, or when the timer fires), so
a request costs O(1) and the FIFOs hold about what is in flight.

Connections: a request goes on the node's current connection to its broker
(:meth:`Transport.connection`); when the transport drops that connection,
every request still pending on it fails at once with a retriable
:class:`~pylog.errors.NetworkError` (Kafka's NetworkClient on a disconnect)
and the next request goes on a new one. Responses come back on the
connection their request went out on, so a request on a dropped connection
is never answered later.

Owns: one client's transport endpoint, its correlation ids, pending requests and
timeouts. Complexity: O(1) per request and per response. Durability: none.
Thread-safety: every method runs on the cluster's scheduler thread; the
public client classes marshal calls there with ``scheduler.run_sync``.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, Hashable, Optional, Tuple

from pylog.errors import NetworkError, PylogError, RequestTimedOutError
from pylog.runtime.scheduler import Scheduler, Timer
from pylog.runtime.transport.base import Transport

logger = logging.getLogger(__name__)

Callback = Callable[[Optional[Any]], None]  # None means "no answer": timed out, or the connection was lost


class ClientNode:
    """A named transport endpoint; ``request`` calls back with the response, or None on timeout."""

    _ids = 0
    _ids_lock = threading.Lock()

    def __init__(self, kind: str, scheduler: Scheduler, transport: Transport):
        with ClientNode._ids_lock:
            ClientNode._ids += 1
            n = ClientNode._ids
        self.node_id = f"{kind}-{n}"
        self.scheduler = scheduler
        self.transport = transport
        self._corr = 0
        self._pending: Dict[int, Tuple[Callback, Hashable, int]] = {}  # corr -> (callback, broker, connection)
        self._deadlines: Dict[int, Deque[Tuple[int, int]]] = {}  # timeout_ms -> FIFO of (deadline, corr)
        self._timer: Optional[Timer] = None  # armed for the earliest head of _deadlines
        self._timer_when = -1
        self.on_close: list = []
        self.closed = False
        #: why the callback being called now got None: a NetworkError (lost connection), else None (timeout)
        self.failure: Optional[PylogError] = None
        self.disconnects = 0  # requests failed by a lost connection
        transport.register(self.node_id, self._on_message)
        transport.on_disconnect(self.node_id, self._on_disconnect)

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def request(self, dst: Hashable, msg: Any, timeout_ms: int, callback: Callback,
                now_ms: Optional[int] = None) -> None:
        """Send ``msg`` to ``dst``; ``callback(response)`` on the answer, ``callback(None)`` after
        ``timeout_ms`` without one (or soon after, when ``dst`` is down). O(1) amortized.
        ``now_ms``: the scheduler's time, when the caller has just read it."""
        corr = msg.correlation_id
        pending = self._pending
        pending[corr] = (callback, dst, self.transport.connection(self.node_id, dst))
        fifo = self._deadlines.get(timeout_ms)
        if fifo is None:
            fifo = self._deadlines[timeout_ms] = deque()
        while fifo and fifo[0][1] not in pending:  # answered since: drop them from the head
            fifo.popleft()
        deadline = (self.scheduler.clock.now_ms() if now_ms is None else now_ms) + timeout_ms
        fifo.append((deadline, corr))
        if self._timer is None or deadline < self._timer_when:
            self._arm(deadline)
        if dst not in self.transport.handlers:
            # Connection refused: the broker is down (a partitioned one just times out).
            self.scheduler.call_later(1, self._timeout, corr)
            return
        self.transport.send(self.node_id, dst, msg)

    def _arm(self, when: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_when = when
        self._timer = self.scheduler.call_later(max(0, when - self.scheduler.clock.now_ms()), self._expire)

    def _expire(self) -> None:
        """The timer: time out every request past its deadline, then re-arm for the next one."""
        self._timer = None
        now = self.scheduler.clock.now_ms()
        pending = self._pending
        expired = []
        nxt = None
        for fifo in self._deadlines.values():
            while fifo:
                deadline, corr = fifo[0]
                if corr not in pending:
                    fifo.popleft()
                elif deadline <= now:
                    fifo.popleft()
                    expired.append(corr)
                else:
                    nxt = deadline if nxt is None else min(nxt, deadline)
                    break
        if nxt is not None and not self.closed:
            self._arm(nxt)
        for corr in expired:
            self._timeout(corr)

    def disconnected(self, node: Hashable) -> None:
        """``node`` stopped: its connections reset, so requests to it fail now, not at their timeout."""
        for corr, (_, dst, _) in list(self._pending.items()):
            if dst == node:
                self.scheduler.call_later(1, self._timeout, corr)

    def _on_disconnect(self, peer: Hashable, connection: int) -> None:
        """The transport dropped connection ``connection`` to ``peer``: each request pending on it fails
        now with a retriable NetworkError (its outcome is unknown); later requests use a new connection."""
        for corr, (_, dst, conn) in list(self._pending.items()):
            if dst == peer and conn == connection:
                self.disconnects += 1
                self._timeout(corr, NetworkError(f"connection from {self.node_id} to broker {peer} lost with the "
                                                 f"request in flight (correlation id {corr})"))

    def _timeout(self, corr: int, failure: Optional[PylogError] = None) -> None:
        entry = self._pending.pop(corr, None)
        if entry is not None:
            self.failure = failure
            try:
                entry[0](None)
            finally:
                self.failure = None

    def _on_message(self, src: Hashable, msg: Any) -> None:
        entry = self._pending.pop(getattr(msg, "correlation_id", -1), None)
        if entry is None:
            return
        entry[0](msg)

    def close_node(self) -> None:
        """Unregister; every pending request completes now as timed out (callbacks see ``None``)."""
        self.closed = True
        self.transport.unregister(self.node_id)
        pending, self._pending = self._pending, {}
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadlines.clear()
        for cb, _, _ in pending.values():
            cb(None)
        for fn in self.on_close:
            fn()


class ClientFuture:
    """The result of an asynchronous client call.

    ``result()`` blocks: in a simulated cluster it runs virtual time until the
    call completes; in a real one it waits on an event.
    """

    def __init__(self, scheduler: Scheduler):
        self._scheduler = scheduler
        self._event = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._callbacks: list = []

    def done(self) -> bool:
        return self._event.is_set()

    def add_done_callback(self, fn: Callable[["ClientFuture"], None]) -> None:
        if self._event.is_set():
            fn(self)
        else:
            self._callbacks.append(fn)

    def _complete(self) -> None:
        self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def set_result(self, value: Any) -> None:
        if not self._event.is_set():
            self._value = value
            self._complete()

    def set_exception(self, exc: BaseException) -> None:
        if not self._event.is_set():
            self._error = exc
            self._complete()

    def exception(self) -> Optional[BaseException]:
        return self._error

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self._event.is_set():
            if self._scheduler.simulated:
                self._scheduler.wait_until(self.done, None if timeout is None else int(timeout * 1000))
            else:
                self._event.wait(timeout)
        if not self._event.is_set():
            raise RequestTimedOutError(f"no result within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value


def error_from(resp: Any) -> PylogError:
    cls = resp.error
    return cls(resp.message) if cls is not None else PylogError("unknown error")
