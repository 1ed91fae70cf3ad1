"""ApiVersions and Metadata against real clients and raw frames."""
from __future__ import annotations

import socket
import struct

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from pylog.protocol import codec


def _roundtrip(addr, payload: bytes) -> bytes:
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(payload)
        size = struct.unpack(">i", _recv(s, 4))[0]
        return _recv(s, size)


def _recv(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def _addr(c, b=0):
    host, port = c.kafka_server.address_of(b)
    return host, port


def test_bootstrap_servers_one_port_per_broker(kcluster):
    servers = kcluster.bootstrap_servers.split(",")
    assert len(servers) == 3 and len({s.split(":")[1] for s in servers}) == 3
    assert all(s.startswith("127.0.0.1:") for s in servers)


def test_api_versions_lists_what_is_served(kcluster1):
    req = ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
    req.with_header(correlation_id=42, client_id="raw")
    body = _roundtrip(_addr(kcluster1), bytes(req.encode(header=True, framed=True)))
    assert struct.unpack(">i", body[:4])[0] == 42  # v0 response header: correlation id only (KIP-511)
    resp = ApiVersionsResponse.decode(body[4:], version=3)
    assert resp.error_code == 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[18] == (0, 4) and keys[3] == (0, 11)


def test_api_versions_unknown_version_gets_v0_unsupported(kcluster1):
    # version 99: header v2 layout; the answer is a v0 body with UNSUPPORTED_VERSION and the list
    frame = struct.pack(">hhih", 18, 99, 7, 3) + b"raw" + b"\x00" + b"\x00"
    body = _roundtrip(_addr(kcluster1), struct.pack(">i", len(frame)) + frame)
    assert struct.unpack(">i", body[:4])[0] == 7
    resp = ApiVersionsResponse.decode(body[4:], version=0)
    assert resp.error_code == codec.UNSUPPORTED_VERSION
    assert 18 in {k.api_key for k in resp.api_keys}


def test_kafka_python_admin_sees_brokers_and_topics(kcluster):
    from kafka import KafkaAdminClient

    kcluster.create_topic("orders", partitions=2)
    a = KafkaAdminClient(bootstrap_servers=kcluster.bootstrap_servers)
    try:
        desc = a.describe_cluster()
        assert sorted(b["broker_id"] for b in desc["brokers"]) == [0, 1, 2]
        assert desc["controller_id"] == kcluster.store.controller_id
        (t,) = a.describe_topics(["orders"])
        assert t["error_code"] == 0
        leaders = {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
        assert leaders == {p: kcluster.leader_of("orders", p) for p in range(2)}
    finally:
        a.close()


def _fetch_frame(corr, offset, max_wait_ms, min_bytes=1, isolation=1):
    from kafka.protocol.consumer import FetchRequest

    F = FetchRequest[12]
    req = F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=isolation,
            session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic="t", partitions=[F.FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    req.with_header(correlation_id=corr, client_id="raw")
    return bytes(req.encode(header=True, framed=True))


def test_fetch_long_poll_wakes_on_append_and_lso_is_hw(kcluster1):
    import threading

    from kafka.protocol.consumer import FetchResponse

    kcluster1.create_topic("t")
    p = kcluster1.producer(acks=1)
    p.send("t", b"first").result()
    with socket.create_connection(_addr(kcluster1), timeout=60) as s:
        s.sendall(_fetch_frame(1, 1, max_wait_ms=30_000))  # at the end: parks in the purgatory
        later = threading.Timer(0.3, lambda: p.send("t", b"second").result())
        later.start()
        body = _recv(s, struct.unpack(">i", _recv(s, 4))[0])
        later.join()
    resp = FetchResponse.decode(body[5:], version=12)  # header v1: correlation id + tagged fields
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 2 and part.last_stable_offset == 2
    assert part.aborted_transactions == []  # read_committed: an empty list, not null
    assert b"second" in bytes(part.records)  # answered by the append, not by the 30 s timeout


def test_fetch_mid_batch_offset_returns_the_whole_batch(kcluster1):
    from kafka.protocol.consumer import FetchResponse


    kcluster1.create_topic("t")
    p = kcluster1.producer(acks=1, linger_ms=50)
    futs = [p.send("t", f"r{i}".encode()) for i in range(10)]
    p.flush()
    assert [f.result().offset for f in futs] == list(range(10))
    with socket.create_connection(_addr(kcluster1), timeout=30) as s:
        s.sendall(_fetch_frame(2, 5, max_wait_ms=0, isolation=0))
        body = _recv(s, struct.unpack(">i", _recv(s, 4))[0])
    part = FetchResponse.decode(body[5:], version=12).responses[0].partitions[0]
    recs = bytes(part.records)
    assert struct.unpack(">q", recs[:8])[0] == 0  # the batch holding offset 5 starts at 0 and comes whole
    assert part.aborted_transactions is None  # read_uncommitted: null


def test_fetch_v12_reports_a_diverging_epoch(kcluster):
    """KIP-320: a consumer whose last fetched epoch ended (on the leader) before its fetch offset is told
    where that epoch ends, with no records, instead of silently reading another history."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    kcluster.create_topic("t", partitions=1, replication_factor=3)
    p = kcluster.producer(acks="all")
    for i in range(5):
        p.send("t", f"e0-{i}".encode()).result()  # offsets 0-4 in epoch 0
    old = kcluster.leader_of("t", 0)
    kcluster.stop_broker(old, clean=True)  # leadership moves: epoch 1
    for i in range(5):
        p.send("t", f"e1-{i}".encode()).result()  # offsets 5-9 in epoch 1
    leader = kcluster.leader_of("t", 0)
    F = FetchRequest[12]

    def fetch(offset, last_epoch):
        req = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic="t", partitions=[F.FetchTopic.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=last_epoch,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        req.with_header(correlation_id=1, client_id="raw")
        with socket.create_connection(_addr(kcluster, leader), timeout=30) as s:
            s.sendall(bytes(req.encode(header=True, framed=True)))
            body = _recv(s, struct.unpack(">i", _recv(s, 4))[0])
        return FetchResponse.decode(body[5:], version=12).responses[0].partitions[0]

    part = fetch(7, 0)  # "my offset 6 came from epoch 0": epoch 0 ended at 5
    assert part.error_code == 0 and (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 5)
    assert not part.records
    ok = fetch(5, 0)  # consistent with the leader: records, no divergence
    assert (ok.diverging_epoch is None or ok.diverging_epoch.epoch == -1) and ok.records
    kcluster.start_broker(old)
