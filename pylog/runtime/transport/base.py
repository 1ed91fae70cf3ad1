"""The transport interface: nodes register a handler; ``send`` delivers asynchronously.

A node id is a broker id (int) or a client name (str). Delivery happens on the
scheduler's thread, never inside ``send`` (so handlers are never re-entered).
Messages to an unregistered node are dropped, as a connection to a dead
broker would fail; senders rely on their own request timeouts.

Connections: the messages between two nodes travel on one connection (as a
Kafka client's requests and a broker's responses share one TCP connection),
delivered in the order sent. :meth:`Transport.connection` names its current
incarnation; a transport that can drop connections (the simulated network)
calls the endpoints' :meth:`on_disconnect` listeners with the incarnation that
was lost, so a client fails exactly the requests it sent on it.

Thread-safety: call from the scheduler's thread.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Hashable

Handler = Callable[[Hashable, Any], None]
#: ``listener(peer, connection)``: the connection (incarnation) between this node and ``peer`` was lost
DisconnectListener = Callable[[Hashable, int], None]


class Transport:
    """Base class: a registry of handlers plus a ``send`` policy."""

    def __init__(self) -> None:
        self.handlers: Dict[Hashable, Handler] = {}
        #: bumped on every register(): a message sent to an earlier registration of a
        #: node (a process that has since restarted) is dropped, as its TCP connection was.
        self.generation: Dict[Hashable, int] = {}
        self.sent = 0
        self.dropped = 0
        self.disconnect_listeners: Dict[Hashable, DisconnectListener] = {}

    def register(self, node: Hashable, handler: Handler) -> None:
        self.handlers[node] = handler
        self.generation[node] = self.generation.get(node, 0) + 1

    def unregister(self, node: Hashable) -> None:
        self.handlers.pop(node, None)
        self.disconnect_listeners.pop(node, None)

    def on_disconnect(self, node: Hashable, listener: DisconnectListener) -> None:
        """Call ``listener(peer, connection)`` when a connection of ``node`` is lost (until unregistered)."""
        self.disconnect_listeners[node] = listener

    def connection(self, a: Hashable, b: Hashable) -> int:
        """The incarnation of the connection between ``a`` and ``b`` (0 here: connections never drop)."""
        return 0

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
