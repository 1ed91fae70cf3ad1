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
