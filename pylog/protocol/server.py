"""The Kafka-protocol listener of a cluster: one TCP port per broker, one I/O thread, handlers on the loop.

Threads:

* ``pylog-kafka-io`` (one per cluster): a ``selectors`` loop that accepts
  connections on every broker's listening socket, reads size-prefixed
  frames, decodes requests (:mod:`pylog.protocol.codec`) and writes
  responses. It never touches broker state.
* the cluster's loop thread (``pylog-loop``) runs every handler, so handlers
  read the metadata store and send in-process messages to brokers without
  locks - through the same transport and broker paths as pylog's own clients
  (each listener is a :class:`~pylog.client._node.ClientNode` named
  ``kafka-<broker>``).
* ``pylog-kafka-admin`` workers run the handlers registered ``blocking=True``
  (CreateTopics and friends call the cluster's blocking admin methods, which
  must not run on the loop).

Per connection, requests are served one at a time, in order (Kafka mutes a
channel until its response is queued): the next frame is decoded only after
the current request replied. That keeps responses in request order and makes a
client's pipelined produces append in order.

Bad input (frames over ``socket_request_max_bytes``, a negative size, a frame
too short for a header, an unknown API key, an unsupported version other than
ApiVersions', bytes the schema cannot decode, a client idle for
``connections_max_idle_ms``) closes that connection and is logged once at
INFO on the ``pylog.protocol`` logger; other connections, the broker and its
data are unaffected. An ApiVersions request of an unknown version gets
Kafka's v0 answer with UNSUPPORTED_VERSION and the supported list (KIP-511).

Complexity: O(bytes) per request on the I/O thread. Durability: none here (the
broker's acks decide what is durable). Thread-safety: the public methods may be
called from any thread.
"""
from __future__ import annotations

import collections
import errno
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Counter, Deque, Dict, List, Optional, Tuple

from pylog.errors import InvalidConfigurationError
from pylog.protocol import codec
from pylog.protocol.api import REGISTRY, RequestContext
from pylog.runtime.cluster_context import ServedCluster

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms
_RECV = 1 << 20


def parse_listen(listen: str, brokers: int) -> Tuple[str, List[int]]:
    """``"HOST:PORT"`` -> (host, one port per broker): port 0 gives each broker a free port, a
    fixed port P gives brokers P, P+1, ..."""
    if not isinstance(listen, str) or ":" not in listen:
        raise InvalidConfigurationError(f"listen must be 'HOST:PORT' (e.g. '127.0.0.1:0'), got {listen!r}")
    host, _, port_s = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_s)
    except ValueError:
        raise InvalidConfigurationError(f"listen {listen!r}: port {port_s!r} is not a number") from None
    if not 0 <= port <= 65535 or (port and port + brokers - 1 > 65535):
        raise InvalidConfigurationError(f"listen {listen!r}: port out of range for {brokers} brokers")
    return host, [0 if port == 0 else port + b for b in range(brokers)]


class Connection:
    """One client connection (I/O thread state, except ``busy`` which the reply path clears)."""

    __slots__ = ("sock", "broker_id", "peer", "rbuf", "wbuf", "busy", "closed", "last_active", "ctx",
                 "muted", "requests", "events")

    def __init__(self, sock: socket.socket, broker_id: int, peer: str):
        self.sock = sock
        self.broker_id = broker_id
        self.peer = peer
        self.rbuf = bytearray()
        self.wbuf: Deque[memoryview] = collections.deque()
        self.busy = False  # a request is being served: frames wait in rbuf
        self.closed = False
        self.last_active = time.monotonic()
        self.ctx: Optional[RequestContext] = None
        self.muted = False  # not reading from the socket (rbuf holds a whole frame or more)
        self.requests = 0
        self.events = selectors.EVENT_READ  # what the selector watches (0: unregistered)


class KafkaServer:
    """Listeners for every broker of ``cluster`` on ``host`` (real-time clusters only)."""

    def __init__(self, cluster: ServedCluster, listen: str, *, socket_request_max_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 connections_max_idle_ms: int = DEFAULT_MAX_IDLE_MS):
        from pylog.protocol import handlers  # noqa: F401 - fills REGISTRY

        self.cluster = cluster
        self.host, ports = parse_listen(listen, len(cluster.brokers))
        self.ports: Dict[int, int] = dict(zip(sorted(cluster.brokers), ports))
        self.max_request_bytes = int(socket_request_max_bytes)
        self.max_idle_s = connections_max_idle_ms / 1000.0
        self.listeners: Dict[int, socket.socket] = {}
        self.conns: Dict[int, Connection] = {}  # fd -> connection
        self.nodes: Dict[int, Any] = {}
        from pylog.protocol.faults import FaultTable

        self.faults = FaultTable()  # cluster.inject_fault
        self._sel = selectors.DefaultSelector()
        self._cmds: Deque[Callable[[], None]] = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._closed = False
        self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pylog-kafka-admin")
        self.stats: Counter[str] = collections.Counter()
        from pylog.client._node import ClientNode

        def make_nodes() -> None:
            for b in cluster.brokers:
                self.nodes[b] = ClientNode(f"kafka-{b}", cluster.scheduler, cluster.transport)

        cluster.scheduler.run_sync(make_nodes)
        try:
            for b in sorted(cluster.brokers):
                self._open_listener(b)
        except BaseException:
            for s in self.listeners.values():
                s.close()
            raise
        self._thread = threading.Thread(target=self._loop, name="pylog-kafka-io", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ addresses
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{self.ports[b]}" for b in sorted(self.ports))

    def address_of(self, broker_id: int) -> Tuple[str, int]:
        return self.host, self.ports[broker_id]

    # ------------------------------------------------------------ listeners
    def _open_listener(self, broker_id: int) -> None:
        s = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.host, self.ports[broker_id]))
        except OSError as exc:
            s.close()
            raise InvalidConfigurationError(
                f"broker {broker_id}: cannot listen on {self.host}:{self.ports[broker_id]}: {exc}") from None
        s.listen(1024)
        s.setblocking(False)
        self.ports[broker_id] = s.getsockname()[1]  # a restart listens on the same port
        self.listeners[broker_id] = s
        self._sel.register(s, selectors.EVENT_READ, ("listen", broker_id))

    def _call_io(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread and wait for it (or run it here when that thread is gone)."""
        if self._closed or threading.current_thread() is self._thread:
            fn()
            return
        done = threading.Event()
        box: List[Optional[BaseException]] = [None]

        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # handed back
                box[0] = exc
            finally:
                done.set()

        self._cmds.append(run)
        self._wake()
        done.wait()
        if box[0] is not None:
            raise box[0]

    def stop_broker(self, broker_id: int) -> None:
        """Close ``broker_id``'s listening socket and every connection to it (the broker stopped)."""

        def run() -> None:
            s = self.listeners.pop(broker_id, None)
            if s is not None:
                self._sel.unregister(s)
                s.close()
            for c in [c for c in self.conns.values() if c.broker_id == broker_id]:
                self._close(c, None)

        self._call_io(run)

    def start_broker(self, broker_id: int) -> None:
        """Listen again for ``broker_id`` on the port it had."""
        if broker_id not in self.listeners:
            self._call_io(lambda: self._open_listener(broker_id))

    # ----------------------------------------------------------------- I/O
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already pending, or closing

    def _loop(self) -> None:
        last_idle_check = time.monotonic()
        while not self._closed:
            try:
                events = self._sel.select(timeout=1.0)
            except OSError:  # pragma: no cover - a socket closed under select
                continue
            for key, mask in events:
                data = key.data
                if data is None:
                    try:
                        self._wake_r.recv(4096)
                    except (BlockingIOError, OSError):
                        pass
                elif data[0] == "listen":
                    self._accept(key.fileobj, data[1])  # type: ignore[arg-type]
                else:
                    conn = data[1]
                    if mask & selectors.EVENT_WRITE and not conn.closed:
                        self._write(conn)
                    if mask & selectors.EVENT_READ and not conn.closed:
                        self._read(conn)
            while self._cmds:
                self._cmds.popleft()()
            now = time.monotonic()
            if now - last_idle_check >= min(1.0, self.max_idle_s / 2):
                last_idle_check = now
                for c in [c for c in self.conns.values()
                          if not c.busy and not c.wbuf and now - c.last_active > self.max_idle_s]:
                    self._close(c, f"idle for more than {self.max_idle_s:.0f} s")

    def _accept(self, lsock: socket.socket, broker_id: int) -> None:
        for _ in range(64):
            try:
                sock, addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: logged, the listener stays
                self.stats["accept_errors"] += 1
                if self.stats["accept_errors"] == 1 or exc.errno != errno.EMFILE:
                    log.warning("broker %d: accept failed: %s", broker_id, exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock, broker_id, f"{addr[0]}:{addr[1]}")
            self.conns[sock.fileno()] = conn
            self.stats["connections"] += 1
            self._sel.register(sock, selectors.EVENT_READ, ("conn", conn))

    def _read(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, None if exc.errno in (errno.ECONNRESET, errno.EPIPE) else f"read failed: {exc}")
            return
        if not chunk:
            why = None if not conn.rbuf and not conn.busy else (
                f"the client disconnected with {len(conn.rbuf)} bytes of an unfinished request")
            self._close(conn, why if conn.rbuf else None)
            return
        conn.last_active = time.monotonic()
        conn.rbuf += chunk
        self._parse(conn)

    def _parse(self, conn: Connection) -> None:
        """Take the next whole frame from ``rbuf`` and dispatch it (unless a request is in progress)."""
        buf = conn.rbuf
        if conn.busy or conn.closed:
            self._mute(conn, len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big", signed=True))
            return
        if len(buf) < 4:
            self._mute(conn, False)
            return
        size = int.from_bytes(buf[:4], "big", signed=True)
        if size < 0 or size > self.max_request_bytes:
            self._close(conn, f"request of {size} bytes refused (socket_request_max_bytes={self.max_request_bytes})")
            return
        if len(buf) < 4 + size:
            self._mute(conn, False)
            return
        frame = bytes(buf[4:4 + size])
        del buf[:4 + size]
        self._mute(conn, False)
        self._dispatch(conn, frame)

    def _mute(self, conn: Connection, mute: bool) -> None:
        """Stop reading while a whole frame waits (back-pressure), resume otherwise."""
        if conn.closed or mute == conn.muted:
            return
        conn.muted = mute
        self._update_events(conn)

    def _update_events(self, conn: Connection) -> None:
        ev = (0 if conn.muted else selectors.EVENT_READ) | (selectors.EVENT_WRITE if conn.wbuf else 0)
        if conn.closed or ev == conn.events:
            return
        try:
            if conn.events == 0:
                self._sel.register(conn.sock, ev, ("conn", conn))
            elif ev == 0:
                self._sel.unregister(conn.sock)
            else:
                self._sel.modify(conn.sock, ev, ("conn", conn))
        except (KeyError, ValueError, OSError):
            pass
        conn.events = ev

    def _dispatch(self, conn: Connection, frame: bytes) -> None:
        if len(frame) < 8:
            self._close(conn, f"request of {len(frame)} bytes is too short for a request header")
            return
        api_key, version, corr = codec.peek_header(frame)
        spec = REGISTRY.get(api_key)
        if spec is not None and spec.available is not None and not spec.available(self.cluster):
            spec = None
        if spec is None:
            self._close(conn, f"unsupported API key {api_key} (correlation id {corr})")
            return
        if not spec.min_version <= version <= spec.max_version:
            if api_key == API_VERSIONS_KEY:
                from pylog.protocol.handlers.core import api_versions_fallback

                conn.busy = True
                self._queue_write(conn, api_versions_fallback(self, corr))
                conn.busy = False
                self._parse(conn)
                return
            self._close(conn, f"{spec.name} v{version} is not supported (v{spec.min_version}-v{spec.max_version})")
            return
        try:
            req = codec.decode_request(api_key, version, frame)
        except Exception as exc:  # whatever the schema decoder raises on bad bytes
            self._close(conn, f"malformed {spec.name} v{version} request (correlation id {corr}): "
                        f"{type(exc).__name__}: {exc}")
            return
        client_id = getattr(req.header, "client_id", None)
        ctx = RequestContext(self, conn, spec, version, corr, client_id)
        conn.busy = True
        conn.ctx = ctx
        conn.requests += 1
        self.stats["requests"] += 1
        fault = self.faults.match(ctx, req) if self.faults is not None else None
        if fault is not None:
            fault.apply(ctx, req, lambda: self._submit(ctx, req))
            return
        self._submit(ctx, req)

    def _submit(self, ctx: RequestContext, req: Any) -> None:
        """Run the handler (on the loop, or a worker for blocking ones)."""
        if ctx.spec.blocking:
            self._workers.submit(self._run_handler, ctx, req)
        else:
            self.cluster.scheduler.call_soon(self._run_handler, ctx, req)

    def submit_worker(self, fn: Callable[[], None]) -> None:
        self._workers.submit(fn)

    def _run_handler(self, ctx: RequestContext, req: Any) -> None:
        # A request read whole is served even if its client has gone since (Kafka processes what it
        # queued): an acks=0 producer closes right after its last send.
        try:
            ctx.spec.handler(ctx, req)
        except Exception as exc:  # a handler bug: answer the request as failed, keep serving
            log.exception("%s v%d from %s (correlation id %d) failed", ctx.spec.name, ctx.api_version, ctx.peer,
                          ctx.correlation_id)
            if ctx.replied:
                return
            if ctx.spec.fail is not None:
                try:
                    ctx.spec.fail(ctx, req, codec.UNKNOWN_SERVER_ERROR)
                    return
                except Exception:
                    pass
            ctx.close_connection(f"{ctx.spec.name} handler failed: {exc!r}")

    # -------------------------------------------------------------- output
    def reply(self, ctx: RequestContext, resp: Any) -> None:
        """Queue ``resp`` (None: no response) for ``ctx``'s connection and read its next request."""
        data = None if resp is None else codec.encode_response(resp, ctx.correlation_id)
        conn = ctx.conn

        def run() -> None:
            if conn.closed or conn.ctx is not ctx:
                return
            conn.ctx = None
            conn.busy = False
            if data is not None:
                self._queue_write(conn, data)
            self._parse(conn)

        if threading.current_thread() is self._thread:
            run()
        else:
            self._cmds.append(run)
            self._wake()

    def _queue_write(self, conn: Connection, data: bytes) -> None:
        conn.wbuf.append(memoryview(data))
        self._write(conn)

    def _write(self, conn: Connection) -> None:
        while conn.wbuf:
            head = conn.wbuf[0]
            try:
                n = conn.sock.send(head)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._close(conn, None if exc.errno in (errno.ECONNRESET, errno.EPIPE) else f"write failed: {exc}")
                return
            if n == len(head):
                conn.wbuf.popleft()
            else:
                conn.wbuf[0] = head[n:]
                break
        conn.last_active = time.monotonic()
        self._update_events(conn)

    def close_connection(self, conn: Connection, why: str) -> None:
        if threading.current_thread() is self._thread:
            self._close(conn, why)
        else:
            self._cmds.append(lambda: self._close(conn, why))
            self._wake()

    def _close(self, conn: Connection, why: Optional[str]) -> None:
        if conn.closed:
            return
        conn.closed = True
        if why is not None:
            self.stats["closed_bad"] += 1
            log.info("broker %d: closed the connection from %s: %s", conn.broker_id, conn.peer, why)
        self.conns.pop(conn.sock.fileno(), None)
        if conn.events:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.events = 0
        try:
            conn.sock.close()
        except OSError:
            pass

    def _check(self) -> None:
        """Invariants (tests call it; they are checked on the I/O thread, which owns the state):
        listeners are brokers' and on their recorded ports; open connections are registered for
        what they wait on; a muted connection holds a whole frame."""
        self._call_io(self._check_io_state)

    def _check_io_state(self) -> None:
        assert set(self.listeners) <= set(self.ports)
        for b, s in self.listeners.items():
            assert s.getsockname()[1] == self.ports[b]
        for c in list(self.conns.values()):
            assert not c.closed
            want = (0 if c.muted else selectors.EVENT_READ) | (selectors.EVENT_WRITE if c.wbuf else 0)
            assert c.events == want, (c.peer, c.events, want)
            assert c.ctx is None or c.busy

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        """Close every listener and connection and join the I/O thread (idempotent)."""
        if self._closed:
            return

        def run() -> None:
            for c in list(self.conns.values()):
                self._close(c, None)
            for s in self.listeners.values():
                try:
                    self._sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()
            self.listeners.clear()

        self._call_io(run)
        self._closed = True
        self._wake()
        self._thread.join()
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def close_nodes(self) -> None:
        """Unregister the listeners' transport nodes (loop thread)."""
        for n in self.nodes.values():
            if not n.closed:
                n.close_node()


__all__ = ["KafkaServer", "parse_listen", "DEFAULT_MAX_REQUEST_BYTES"]
