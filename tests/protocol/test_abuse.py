"""Bad input and abuse against a live listener: each bad connection is closed (or answered as Kafka
answers) and logged once; the broker, its other connections and its data are unaffected.

Includes the protocol fuzz test: random and mutated frames (bounded here; longer with
``PYLOG_SOAK=1 PYLOG_PROTOCOL_FUZZ_FRAMES=50000 .venv/bin/python -m pytest tests/protocol/test_abuse.py -m soak``).
"""
from __future__ import annotations

import logging
import os
import random
import socket
import struct
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

import pylog

MAX = 4096


@pytest.fixture
def small(tmp_path):
    c = pylog.Cluster(tmp_path / "c", brokers=1, listen="127.0.0.1:0", socket_request_max_bytes=MAX)
    c.create_topic("t")
    c.producer(acks=1).send("t", b"kept").result()
    try:
        yield c
    finally:
        c.close()


def _addr(c):
    return c.kafka_server.address_of(0)


def _api_versions_frame(corr=1, version=3):
    req = ApiVersionsRequest[version](client_software_name="t", client_software_version="1") if version >= 3 \
        else ApiVersionsRequest[version]()
    req.with_header(correlation_id=corr, client_id="t")
    return bytes(req.encode(header=True, framed=True))


def _read_frame(s):
    def recv(n):
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    head = recv(4)
    if head is None:
        return None
    return recv(struct.unpack(">i", head)[0])


def _closed_by_server(s, timeout=10.0):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def _healthy(c):
    """A new connection is answered, and the data is what it was."""
    with socket.create_connection(_addr(c), timeout=10) as s:
        s.sendall(_api_versions_frame(corr=99))
        body = _read_frame(s)
        assert body is not None and struct.unpack(">i", body[:4])[0] == 99
        assert ApiVersionsResponse.decode(body[4:], version=3).error_code == 0
    con = c.consumer()
    try:
        con.assign([("t", 0)])
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = con.poll(timeout=0.5)
        assert [r.value for r in got][:1] == [b"kept"]
    finally:
        con.close()


def _protocol_logs(caplog):
    return [r for r in caplog.records if r.name.startswith("pylog.protocol")]


@pytest.mark.parametrize("payload,why", [
    (struct.pack(">i", MAX + 1) + b"\0" * 16, "over socket_request_max_bytes"),
    (struct.pack(">i", -5), "negative size"),
    (struct.pack(">i", 4) + b"\0\0\0\0", "shorter than a request header"),
    (struct.pack(">ihhi", 8, 9999, 0, 1), "unknown API key"),
    (struct.pack(">ihhih", 10, 3, 99, 1, -1), "unsupported Metadata version"),
    (struct.pack(">ihhih", 12, 3, 9, 1, -1) + b"\xff\xff", "malformed Metadata body"),
])
def test_bad_frame_closes_connection_logs_once(small, caplog, payload, why):
    caplog.set_level(logging.INFO, logger="pylog.protocol")
    with socket.create_connection(_addr(small), timeout=10) as other:
        with socket.create_connection(_addr(small), timeout=10) as s:
            s.sendall(payload)
            assert _closed_by_server(s), why
        other.sendall(_api_versions_frame(corr=5))  # an open neighbour keeps working
        assert struct.unpack(">i", _read_frame(other)[:4])[0] == 5
    assert len(_protocol_logs(caplog)) == 1, [r.getMessage() for r in _protocol_logs(caplog)]
    _healthy(small)


def test_api_versions_of_unknown_version_is_answered_not_closed(small):
    with socket.create_connection(_addr(small), timeout=10) as s:
        frame = struct.pack(">hhih", 18, 77, 3, 1) + b"t" + b"\0\0"
        s.sendall(struct.pack(">i", len(frame)) + frame)
        body = _read_frame(s)
        assert ApiVersionsResponse.decode(body[4:], version=0).error_code == 35
        s.sendall(_api_versions_frame(corr=4))  # the connection stays usable
        assert struct.unpack(">i", _read_frame(s)[:4])[0] == 4


def test_disconnect_mid_request_and_idle_clients(small, caplog):
    caplog.set_level(logging.INFO, logger="pylog.protocol")
    small.kafka_server.max_idle_s = 0.3  # connections_max_idle_ms=300 (set here only: idle neighbours elsewhere)
    frame = _api_versions_frame()
    s = socket.create_connection(_addr(small), timeout=10)
    s.sendall(frame[:7])  # half a request, then gone
    s.close()
    idle = socket.create_connection(_addr(small), timeout=10)  # connects, never sends
    assert _closed_by_server(idle, timeout=20)
    idle.close()
    small.kafka_server.max_idle_s = 600.0
    _healthy(small)
    msgs = [r.getMessage() for r in _protocol_logs(caplog)]
    assert sum("unfinished request" in m for m in msgs) == 1 and sum("idle" in m for m in msgs) == 1


def test_thousands_of_connections(small):
    socks = []
    try:
        for _ in range(2000):
            socks.append(socket.create_connection(_addr(small), timeout=10))
        for i, s in enumerate(socks[::250]):
            s.sendall(_api_versions_frame(corr=i))
            assert struct.unpack(">i", _read_frame(s)[:4])[0] == i
    finally:
        for s in socks:
            s.close()
    _healthy(small)


def test_pipelined_requests_are_answered_in_order(small):
    with socket.create_connection(_addr(small), timeout=10) as s:
        md = MetadataRequest[9](topics=None, allow_auto_topic_creation=False)
        md.with_header(correlation_id=0, client_id="t")
        frames = []
        for i in range(50):
            if i % 2:
                md.with_header(correlation_id=i, client_id="t")
                frames.append(bytes(md.encode(header=True, framed=True)))
            else:
                frames.append(_api_versions_frame(corr=i))
        s.sendall(b"".join(frames))
        assert [struct.unpack(">i", _read_frame(s)[:4])[0] for _ in range(50)] == list(range(50))


# ------------------------------------------------------------------- fuzzing
def _valid_frames():
    md = MetadataRequest[9](topics=[MetadataRequest[9].MetadataRequestTopic(name="t")], allow_auto_topic_creation=False)
    md.with_header(correlation_id=3, client_id="fuzz")
    from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

    F = FetchRequest[11]
    fe = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
           session_epoch=-1, topics=[F.FetchTopic(topic="t", partitions=[F.FetchTopic.FetchPartition(
               partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)])],
           forgotten_topics_data=[], rack_id="")
    fe.with_header(correlation_id=4, client_id="fuzz")
    L = ListOffsetsRequest[5]
    lo = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="t", partitions=[
        L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    lo.with_header(correlation_id=5, client_id="fuzz")
    return [_api_versions_frame(), bytes(md.encode(header=True, framed=True)),
            bytes(fe.encode(header=True, framed=True)), bytes(lo.encode(header=True, framed=True))]


def _mutate(rng, frame):
    b = bytearray(frame)
    kind = rng.randrange(5)
    if kind == 0:  # flip bytes in the body (sizes and counts included)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(4, len(b))
            b[i] = rng.randrange(256)
    elif kind == 1:  # truncate, keeping the size prefix consistent
        n = rng.randrange(4, len(b))
        b = bytearray(struct.pack(">i", n - 4)) + b[4:n]
    elif kind == 2:  # random API key and version
        struct.pack_into(">hh", b, 4, rng.randrange(-5, 100), rng.randrange(-2, 20))
    elif kind == 3:  # random bytes with a plausible size
        body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        b = bytearray(struct.pack(">i", len(body))) + body
    else:  # insert garbage in the middle
        i = rng.randrange(4, len(b))
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        struct.pack_into(">i", b, 0, len(b) - 4)
    return bytes(b)


def _fuzz(cluster, frames_total, seed):
    rng = random.Random(seed)
    valid = _valid_frames()
    sent = 0
    while sent < frames_total:
        with socket.create_connection(_addr(cluster), timeout=10) as s:
            s.settimeout(2)
            for _ in range(rng.randint(1, 8)):
                frame = _mutate(rng, rng.choice(valid)) if rng.random() < 0.9 else rng.choice(valid)
                sent += 1
                try:
                    s.sendall(frame)
                    if rng.random() < 0.5:
                        if _read_frame(s) is None:
                            break
                except (OSError, socket.timeout):
                    break
    return sent


def test_fuzz_random_and_mutated_frames(small, caplog):
    caplog.set_level(logging.WARNING, logger="pylog.protocol")
    seed = int(os.environ.get("PYLOG_PROTOCOL_FUZZ_SEED", "1"))
    assert _fuzz(small, 400, seed) >= 400
    _healthy(small)
    assert [r.getMessage() for r in _protocol_logs(caplog) if r.levelno >= logging.ERROR] == []  # no handler failed
    assert small.scheduler.errors == []  # no handler raised on the loop
    small._check()


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get("PYLOG_SOAK"), reason="soak run: set PYLOG_SOAK=1")
def test_fuzz_soak(small):
    n = int(os.environ.get("PYLOG_PROTOCOL_FUZZ_FRAMES", "50000"))
    for seed in range(int(os.environ.get("PYLOG_PROTOCOL_FUZZ_SEED", "1")), 10**9):
        n -= _fuzz(small, min(n, 2000), seed)
        _healthy(small)
        if n <= 0:
            break
    assert small.scheduler.errors == []
    small._check()
