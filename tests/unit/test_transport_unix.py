"""pylog.runtime.transport.unix: framing, addresses, the routed transport, the server's bridging."""
from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
from typing import Any, List, Tuple

import pytest

from pylog.replication.messages import FetchRequest, FetchResponse
from pylog.runtime.scheduler import RealScheduler
from pylog.runtime.transport.direct import DirectTransport
from pylog.runtime.transport.unix import (
    BrokerServer,
    ClientLink,
    FrameError,
    RoutedTransport,
    encode_frame,
    read_frame,
    socket_address,
)


def test_frames_round_trip_and_a_torn_frame_is_never_delivered() -> None:
    a, b = socket.socketpair()
    try:
        msg = FetchResponse("t", 0, 7, records=b"\x00" * 5000, high_watermark=3)
        a.sendall(encode_frame(("msg", 0, "consumer-1", msg)) + encode_frame(("unreg", "consumer-1")))
        assert read_frame(b) == ("msg", 0, "consumer-1", msg)
        assert read_frame(b) == ("unreg", "consumer-1")
        whole = encode_frame(("msg", 0, "c", msg))
        a.sendall(whole[: len(whole) // 2])  # the writer dies mid-frame
        a.close()
        assert read_frame(b) is None
    finally:
        b.close()


@pytest.mark.parametrize("payload", [
    struct.pack(">I", 3) + b"\xff\xfe\xfd",  # not a pickle
    struct.pack(">I", len(pickle.dumps([1]))) + pickle.dumps([1]),  # not a tuple
    struct.pack(">I", 0xFFFFFFFF),  # absurd length
], ids=["garbage", "not-a-tuple", "too-long"])
def test_malformed_frames_raise(payload: bytes) -> None:
    a, b = socket.socketpair()
    try:
        a.sendall(payload)
        with pytest.raises(FrameError):
            read_frame(b)
    finally:
        a.close()
        b.close()


def test_socket_address_is_derived_from_the_real_path(tmp_path) -> None:
    short = tmp_path / "q"
    short.mkdir()
    os.symlink(short, tmp_path / "link")
    assert socket_address(str(short)) == os.path.join(os.path.realpath(short), "pylog.sock")
    assert socket_address(str(tmp_path / "link")) == socket_address(str(short))  # same directory, same owner
    deep = str(tmp_path / ("x" * 100) / "q")
    addr = socket_address(deep)
    assert len(os.fsencode(addr)) <= 107
    assert addr == socket_address(deep) != socket_address(deep + "2")


def test_routed_transport_refuses_remote_nodes_without_an_upstream() -> None:
    sched = RealScheduler()
    try:
        t = RoutedTransport(sched)
        got: List[Tuple[Any, Any]] = []
        sched.run_sync(lambda: t.register("consumer-1", lambda s, m: got.append((s, m))))
        assert 0 not in t.handlers  # ClientNode sees "connection refused" at once
        sent: List[tuple] = []
        sched.run_sync(lambda: t.set_upstream(sent.append, [0]))
        assert 0 in t.handlers and t.local_nodes() == ["consumer-1"]
        req = FetchRequest(-1, "t", 0, 0, -1, 1)
        t.send("consumer-1", 0, req)
        assert sent == [("msg", "consumer-1", 0, req)]
        t.deliver_remote(0, "consumer-1", "resp")
        sched.wait_until(lambda: bool(got), 5_000)
        assert got == [(0, "resp")]
        sched.run_sync(lambda: t.unregister("consumer-1"))
        assert sent[-1] == ("unreg", "consumer-1")
        sched.run_sync(lambda: t.set_upstream(None, ()))
        assert 0 not in t.handlers
        t.send("consumer-1", 0, req)
        assert t.dropped == 1 and len(sent) == 2
        sched.run_sync(t._check)
    finally:
        sched.close()


def test_server_bridges_a_client_process_node_and_forgets_it_on_disconnect(tmp_path) -> None:
    """A client's node is registered as '<connection>/<node>' on the brokers' transport and answered back."""
    sched = RealScheduler()
    broker = DirectTransport(sched)
    seen: List[Tuple[Any, Any]] = []

    def on_broker(src: Any, msg: Any) -> None:
        seen.append((src, msg))
        broker.send(0, src, ("pong", msg))

    sched.run_sync(lambda: broker.register(0, on_broker))
    other: List[tuple] = []
    server = BrokerServer(socket_address(str(tmp_path)), sched, broker, lambda peer, frame: other.append(frame))
    frames: List[tuple] = []
    closed = threading.Event()
    link = ClientLink(server.address, frames.append, closed.set)
    try:
        link.send(("msg", "producer-1", 0, "ping"))
        link.send(("hello", 123))
        assert sched.wait_until(lambda: bool(frames) and bool(other), 5_000)
        assert frames == [("msg", 0, "producer-1", ("pong", "ping"))]
        assert other == [("hello", 123)]
        (wire,) = [src for src, _ in seen]
        assert wire.endswith("/producer-1") and wire in broker.handlers
        link.close()
        assert closed.wait(5)
        assert sched.wait_until(lambda: wire not in broker.handlers, 5_000)  # the connection's nodes are gone
    finally:
        server.close()
        sched.close()
    assert not os.path.exists(server.address)


@pytest.mark.skipif(not hasattr(os, "fork") or os.getuid() != 0, reason="needs root to act as another user")
def test_server_refuses_another_user(tmp_path) -> None:
    """Frames are pickles: a process of another uid is disconnected before any frame is read."""
    sched = RealScheduler()
    other: List[tuple] = []
    server = BrokerServer(socket_address(str(tmp_path / ("y" * 120))), sched, DirectTransport(sched),
                          lambda peer, frame: other.append(frame))
    assert server.address.startswith("\0")  # abstract: no file permission protects it
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: become nobody, connect, say hello, report what came back
        try:
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(server.address)
            s.sendall(encode_frame(("hello", os.getpid())))
            s.settimeout(10)
            os.write(w, b"eof" if s.recv(1) == b"" else b"data")
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(w, repr(exc).encode()[:200])
        os._exit(0)
    os.close(w)
    try:
        answer = os.read(r, 256)
        os.waitpid(pid, 0)
        # closed before or after the hello was written; never an answer, never a frame handled
        assert answer == b"eof" or answer.startswith((b"ConnectionResetError", b"BrokenPipeError")), answer
        assert other == [] and server.peers == {}
    finally:
        os.close(r)
        server.close()
        sched.close()
