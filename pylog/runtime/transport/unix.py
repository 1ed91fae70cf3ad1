"""A Unix domain socket transport: client processes reach the owner process's brokers.

One process (the *owner*) runs the brokers on a :class:`DirectTransport`
and a :class:`BrokerServer` listening on a Unix socket. Other processes (the
*clients*) connect with a :class:`ClientLink`. In every process, clients
(producers, consumers) register on a :class:`RoutedTransport`, which keeps
local handlers and sends everything else *upstream*: over the socket in a
client process, straight into the server's dispatch in the owner process.

Wire format: each frame is a 4-byte big-endian length followed by that many
bytes of a pickled tuple whose first element names the frame:

* ``("msg", src, dst, message)`` - a transport message. Client to owner:
  ``src`` is the client's local node id (``"producer-1"``), ``dst`` a broker
  id. The server registers ``"<connection>/<src>"`` on the brokers'
  transport the first time it sees ``src``, so node ids of different
  processes never collide, and a response to that id comes back as
  ``("msg", broker, src, response)``. Nothing here looks at the message:
  anything picklable addressed to a broker is forwarded.
* ``("unreg", src)`` - the client closed node ``src``.
* anything else is handed to the ``on_frame`` callback of the server or link
  (the shared-directory layer uses it for hello, metadata, admin calls).

When a connection drops, the server unregisters every node it registered for
it (requests still parked for them are dropped, as for a closed TCP
connection); the link calls ``on_close`` once.

Security: frames are pickles, so only processes of the same user may connect:
the server checks ``SO_PEERCRED`` on Linux and creates path sockets with mode
0600. Socket addresses longer than ``sun_path`` (108 bytes) are replaced by an
abstract socket (Linux) or a short path under the temp directory, both named
by a hash of the directory (:func:`socket_address`).

Complexity: one pickle and one ``sendall`` per message; the server runs one
reader thread per connection plus one writer thread (so a stalled client
never blocks the brokers' loop).
Durability: none - a frame is in memory until its handler runs.
Thread-safety: :meth:`RoutedTransport.send`, :meth:`ClientLink.send` and
:meth:`Peer.send` may be called from any thread.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import queue
import socket
import struct
import sys
import tempfile
import threading
from typing import Any, Callable, Dict, Hashable, Iterable, List, Optional, Set

from pylog.runtime.scheduler import Scheduler
from pylog.runtime.transport.base import Transport

_HEADER = struct.Struct(">I")
#: largest frame accepted (a fetch response carries at most max_bytes of records)
MAX_FRAME_BYTES = 1 << 30
#: a connection whose unsent frames exceed this is dropped (the client stopped reading)
MAX_QUEUED_BYTES = 256 << 20
SOCKET_NAME = "pylog.sock"
_SUN_PATH_MAX = 107  # 108 bytes including the terminating NUL

Frame = tuple
Upstream = Callable[[Frame], None]


class FrameError(ConnectionError):
    """A frame on the socket is malformed (bad length or not a pickled tuple)."""


# --------------------------------------------------------------------- framing
def encode_frame(frame: Frame) -> bytes:
    """``frame`` as length-prefixed pickle bytes. Complexity: O(size)."""
    body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def _recv_exact(sock: socket.socket, n: int) -> Optional[bytearray]:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return buf


def read_frame(sock: socket.socket) -> Optional[Frame]:
    """The next frame, or None at end of stream. Raises :class:`FrameError` on garbage."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    (n,) = _HEADER.unpack(head)
    if n > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {n} bytes exceeds {MAX_FRAME_BYTES}")
    body = _recv_exact(sock, n)
    if body is None:
        return None  # torn frame: the peer died mid-write; nothing partial is delivered
    try:
        frame = pickle.loads(body)
    except Exception as exc:
        raise FrameError(f"undecodable frame of {n} bytes: {exc!r}") from exc
    if not isinstance(frame, tuple) or not frame:
        raise FrameError(f"frame is not a tuple: {type(frame).__name__}")
    return frame


# -------------------------------------------------------------------- addresses
def socket_address(directory: str) -> str:
    """The Unix socket address of the owner of ``directory``.

    ``<directory>/pylog.sock`` when it fits in ``sun_path``; otherwise an
    abstract socket (Linux) or ``<tmp>/pylog-<hash>.sock``, named by a hash of
    the directory's real path so every process derives the same address.
    """
    real = os.path.realpath(directory)
    path = os.path.join(real, SOCKET_NAME)
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        return path
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:32]
    if sys.platform.startswith("linux"):
        return "\0pylog-" + digest
    return os.path.join(tempfile.gettempdir(), f"pylog-{digest}.sock")


def describe_address(address: str) -> str:
    return "@" + address[1:] if address.startswith("\0") else address


def listen(address: str) -> socket.socket:
    """A listening socket on ``address``; a stale path socket is replaced (the caller holds the owner lock)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not address.startswith("\0"):
            try:
                os.unlink(address)
            except FileNotFoundError:
                pass
            old = os.umask(0o177)
            try:
                sock.bind(address)
            finally:
                os.umask(old)
        else:
            sock.bind(address)
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    return sock


def connect(address: str, timeout: float = 5.0) -> socket.socket:
    """A connected socket (raises OSError: ``ConnectionRefusedError`` / ``FileNotFoundError`` when nobody listens)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


def _same_user(sock: socket.socket) -> bool:
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return True  # path sockets are created 0600 there
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i")))
    return uid == os.getuid()


# ------------------------------------------------------------------ owner side
class Peer:
    """One connected client process, as the server sees it (or the owner process's own clients)."""

    def __init__(self, peer_id: str):
        self.peer_id = peer_id
        #: wire node ids registered on the brokers' transport for this peer
        self.nodes: Set[str] = set()
        self.closed = False

    def send(self, frame: Frame) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        self.closed = True


class LocalPeer(Peer):
    """The owner process's own clients: frames are handed to ``deliver`` without pickling."""

    def __init__(self, deliver: Callable[[Frame], None]):
        super().__init__("local")
        self._deliver = deliver

    def send(self, frame: Frame) -> None:
        if not self.closed:
            self._deliver(frame)


class SocketPeer(Peer):
    """A client process on a socket: frames are queued to a writer thread."""

    def __init__(self, peer_id: str, sock: socket.socket):
        super().__init__(peer_id)
        self.sock = sock
        self._queue: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self._queued = 0
        self._lock = threading.Lock()
        self.writer = threading.Thread(target=self._write_loop, name=f"pylog-unix-w-{peer_id}", daemon=True)
        self.writer.start()

    def send(self, frame: Frame) -> None:
        if self.closed:
            return
        data = encode_frame(frame)
        with self._lock:
            self._queued += len(data)
            over = self._queued > MAX_QUEUED_BYTES
        if over:
            self.close()
            return
        self._queue.put(data)

    def _write_loop(self) -> None:
        while True:
            data = self._queue.get()
            if data is None:
                return
            with self._lock:
                self._queued -= len(data)
            try:
                self.sock.sendall(data)
            except OSError:
                self.close()
                return

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._queue.put(None)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread
        except OSError:
            pass


class BrokerServer:
    """Accepts client processes on ``address`` and bridges them to the brokers' ``transport``.

    ``on_frame(peer, frame)`` receives every frame that is not ``msg``/``unreg``
    (on the connection's reader thread); ``on_disconnect(peer)`` runs on the
    scheduler's loop after the peer's nodes are unregistered.

    Thread-safety: :meth:`dispatch` may be called from any thread; node
    registration happens on ``scheduler``'s loop.
    """

    def __init__(self, address: str, scheduler: Scheduler, transport: Transport,
                 on_frame: Callable[[Peer, Frame], None],
                 on_disconnect: Optional[Callable[[Peer], None]] = None):
        self.address = address
        self.scheduler = scheduler
        self.transport = transport
        self.on_frame = on_frame
        self.on_disconnect = on_disconnect
        self.peers: Dict[str, Peer] = {}
        self._ids = 0
        self._lock = threading.Lock()
        self._closed = False
        self.sock = listen(address)
        self._accept_thread = threading.Thread(target=self._accept_loop, name="pylog-unix-accept", daemon=True)
        self._accept_thread.start()

    # connections
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._closed or not _same_user(conn):
                conn.close()
                continue
            with self._lock:
                self._ids += 1
                peer = SocketPeer(f"c{self._ids}", conn)
                self.peers[peer.peer_id] = peer
            threading.Thread(target=self._read_loop, args=(peer,), name=f"pylog-unix-r-{peer.peer_id}",
                             daemon=True).start()

    def _read_loop(self, peer: SocketPeer) -> None:
        try:
            while True:
                frame = read_frame(peer.sock)
                if frame is None:
                    break
                self.dispatch(peer, frame)
        except (OSError, FrameError):
            pass
        finally:
            peer.close()
            try:
                peer.sock.close()
            except OSError:
                pass
            with self._lock:
                self.peers.pop(peer.peer_id, None)
            if not self._closed:
                try:
                    self.scheduler.call_soon(self._drop, peer)
                except Exception:  # the loop is gone: the cluster is closing
                    pass

    def local_peer(self, deliver: Callable[[Frame], None]) -> LocalPeer:
        """A peer for the owner process's own clients (no socket)."""
        peer = LocalPeer(deliver)
        self.peers[peer.peer_id] = peer
        return peer

    # frames
    def dispatch(self, peer: Peer, frame: Frame) -> None:
        """Handle one frame from ``peer`` (any thread)."""
        kind = frame[0]
        if kind == "msg":
            _, src, dst, msg = frame
            self.scheduler.call_soon(self._forward, peer, src, dst, msg)
        elif kind == "unreg":
            self.scheduler.call_soon(self._unregister, peer, frame[1])
        else:
            self.on_frame(peer, frame)

    def _forward(self, peer: Peer, src: Hashable, dst: Hashable, msg: Any) -> None:
        if peer.closed:
            return
        wire = f"{peer.peer_id}/{src}"
        if wire not in peer.nodes:
            peer.nodes.add(wire)

            def deliver(s: Hashable, m: Any, peer: Peer = peer, node: Hashable = src) -> None:
                peer.send(("msg", s, node, m))

            self.transport.register(wire, deliver)
        self.transport.send(wire, dst, msg)

    def _unregister(self, peer: Peer, src: Hashable) -> None:
        wire = f"{peer.peer_id}/{src}"
        if wire in peer.nodes:
            peer.nodes.discard(wire)
            self.transport.unregister(wire)

    def _drop(self, peer: Peer) -> None:
        for wire in peer.nodes:
            self.transport.unregister(wire)
        peer.nodes.clear()
        if self.on_disconnect is not None:
            self.on_disconnect(peer)

    def broadcast(self, frame: Frame) -> None:
        with self._lock:
            peers = list(self.peers.values())
        for p in peers:
            p.send(frame)

    def close(self) -> None:
        """Stop accepting and drop every connection (their processes see the socket close)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._accept_thread.join(5)
        with self._lock:
            peers = list(self.peers.values())
        for p in peers:
            p.close()
        if not self.address.startswith("\0"):
            try:
                os.unlink(self.address)
            except OSError:
                pass


# ----------------------------------------------------------------- client side
class ClientLink:
    """A client process's connection to the owner.

    ``on_frame(frame)`` runs on the link's reader thread for every frame;
    ``on_close()`` runs once when the connection ends (owner died or closed,
    or :meth:`close` was called).

    Thread-safety: :meth:`send` may be called from any thread (one lock).
    """

    def __init__(self, address: str, on_frame: Callable[[Frame], None], on_close: Callable[[], None]):
        self.address = address
        self.sock = connect(address)
        self.on_frame = on_frame
        self.on_close = on_close
        self.closed = False
        self._lock = threading.Lock()
        self._close_once = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, name="pylog-unix-link", daemon=True)
        self._reader.start()

    def send(self, frame: Frame) -> None:
        """Write one frame (into the kernel's socket buffer before returning); dropped if closed."""
        data = encode_frame(frame)
        with self._lock:
            if self.closed:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self._shutdown()

    def _shutdown(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_loop(self) -> None:
        try:
            while True:
                frame = read_frame(self.sock)
                if frame is None:
                    break
                self.on_frame(frame)
        except (OSError, FrameError):
            pass
        finally:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass
            self.on_close()

    def close(self) -> None:
        with self._lock:
            self._shutdown()
        if threading.current_thread() is not self._reader:
            self._reader.join(5)


# ------------------------------------------------------------------ transport
class RoutedTransport(Transport):
    """The clients' transport in a shared-directory process: local handlers, everything else upstream.

    ``set_upstream(fn, remote_nodes)`` (on the scheduler's loop) installs the
    function that carries frames to the owner and marks ``remote_nodes`` (the
    broker ids) as reachable, so :class:`ClientNode` sees them in
    ``handlers``; ``set_upstream(None, ())`` removes them, so requests fail at
    once (connection refused) until an owner is reachable again.

    Thread-safety: ``send`` from any thread; ``register``/``unregister``/
    ``set_upstream`` on the scheduler's loop.
    """

    def __init__(self, scheduler: Scheduler):
        super().__init__()
        self.scheduler = scheduler
        self.upstream: Optional[Upstream] = None
        self._remote: Set[Hashable] = set()

    def set_upstream(self, upstream: Optional[Upstream], remote_nodes: Iterable[Hashable]) -> None:
        for n in self._remote:
            self.handlers.pop(n, None)
        self.upstream = upstream
        self._remote = set(remote_nodes) if upstream is not None else set()
        for n in self._remote:
            self.handlers[n] = self._remote_handler

    @staticmethod
    def _remote_handler(src: Hashable, msg: Any) -> None:  # pragma: no cover - never called
        raise AssertionError("messages to a remote node go upstream")

    def send(self, src: Hashable, dst: Hashable, msg: Any) -> None:
        self.sent += 1
        up = self.upstream
        if dst in self._remote and up is not None:
            up(("msg", src, dst, msg))
        elif dst in self.handlers and dst not in self._remote:
            self.scheduler.call_soon(self._deliver, src, dst, msg, self.generation.get(dst, -1))
        else:
            self.dropped += 1

    def deliver_remote(self, src: Hashable, dst: Hashable, msg: Any) -> None:
        """A message from upstream for local node ``dst`` (any thread)."""
        self.scheduler.call_soon(self._deliver, src, dst, msg)

    def unregister(self, node: Hashable) -> None:
        super().unregister(node)
        up = self.upstream
        if up is not None and node not in self._remote:
            up(("unreg", node))

    def local_nodes(self) -> List[Hashable]:
        return [n for n in self.handlers if n not in self._remote]

    def _check(self) -> None:
        super()._check()
        assert all(self.handlers.get(n) == self._remote_handler for n in self._remote)


__all__ = [
    "BrokerServer",
    "ClientLink",
    "FrameError",
    "LocalPeer",
    "Peer",
    "RoutedTransport",
    "SocketPeer",
    "connect",
    "describe_address",
    "encode_frame",
    "listen",
    "read_frame",
    "socket_address",
]
