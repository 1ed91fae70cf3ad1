"""The transport interface: nodes register a handler; ``send`` delivers asynchronously.

A node id is a broker id (int) or a client name (str). Delivery happens on the
scheduler's thread, never inside ``send`` (so handlers are never re-entered).
Messages to an unregistered node are dropped, as a connection to a dead
broker would fail; senders rely on their own request timeouts.

Thread-safety: call from the scheduler's thread.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Hashable

Handler = Callable[[Hashable, Any], None]


class Transport:
    """Base class: a registry of handlers plus a ``send`` policy."""

    def __init__(self) -> None:
        self.handlers: Dict[Hashable, Handler] = {}
        #: bumped on every register(): a message sent to an earlier registration of a
        #: node (a process that has since restarted) is dropped, as its TCP connection was.
        self.generation: Dict[Hashable, int] = {}
        self.sent = 0
        self.dropped = 0

    def register(self, node: Hashable, handler: Handler) -> None:
        self.handlers[node] = handler
        self.generation[node] = self.generation.get(node, 0) + 1

    def unregister(self, node: Hashable) -> None:
        self.handlers.pop(node, None)

    def send(self, src: Hashable, dst: Hashable, msg: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _deliver(self, src: Hashable, dst: Hashable, msg: Any, generation: int = -1) -> None:
        handler = self.handlers.get(dst)
        if handler is None or (generation >= 0 and self.generation.get(dst) != generation):
            self.dropped += 1
            return
        handler(src, msg)

    def _check(self) -> None:
        assert self.sent >= 0 and self.dropped >= 0
