"""Shared plumbing of the in-process clients: a transport node with correlated requests and timeouts.

Thread-safety: every method runs on the cluster's scheduler thread; the
public client classes marshal calls there with ``scheduler.run_sync``.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Hashable, Optional, Tuple

from pylog.errors import PylogError, RequestTimedOutError
from pylog.runtime.scheduler import Scheduler, Timer
from pylog.runtime.transport.base import Transport

Callback = Callable[[Optional[Any]], None]  # None means "timed out"


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
        self._pending: Dict[int, Tuple[Callback, Timer, Hashable]] = {}
        self.on_close: list = []
        self.closed = False
        transport.register(self.node_id, self._on_message)

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def request(self, dst: Hashable, msg: Any, timeout_ms: int, callback: Callback) -> None:
        corr = msg.correlation_id
        timer = self.scheduler.call_later(timeout_ms, self._timeout, corr)
        self._pending[corr] = (callback, timer, dst)
        if dst not in self.transport.handlers:
            # Connection refused: the broker is down (a partitioned one just times out).
            self.scheduler.call_later(1, self._timeout, corr)
            return
        self.transport.send(self.node_id, dst, msg)

    def disconnected(self, node: Hashable) -> None:
        """``node`` stopped: its connections reset, so requests to it fail now, not at their timeout."""
        for corr, (_, _, dst) in list(self._pending.items()):
            if dst == node:
                self.scheduler.call_later(1, self._timeout, corr)

    def _timeout(self, corr: int) -> None:
        entry = self._pending.pop(corr, None)
        if entry is not None:
            entry[0](None)

    def _on_message(self, src: Hashable, msg: Any) -> None:
        entry = self._pending.pop(getattr(msg, "correlation_id", -1), None)
        if entry is None:
            return
        entry[1].cancel()
        entry[0](msg)

    def close_node(self) -> None:
        """Unregister; every pending request completes now as timed out (callbacks see ``None``)."""
        self.closed = True
        self.transport.unregister(self.node_id)
        pending, self._pending = self._pending, {}
        for cb, timer, _ in pending.values():
            timer.cancel()
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
