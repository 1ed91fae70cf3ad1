"""The group APIs on the wire, request by request (raw frames built and read with kafka-python's schema
classes): versions advertised, the KIP-394 join round trip, batched LeaveGroup, OffsetCommit metadata
and per-partition errors, OffsetFetch of every partition, FindCoordinator, DescribeGroups, ListGroups."""
from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest

from pylog.protocol import codec
from pylog.protocol.api import REGISTRY
from pylog.protocol.handlers import groups
from pylog.replication import offsets_topic as ot

GROUP = "wire"
NONE = 0
CODES = codec.ERROR_CODES


class Conn:
    """One client connection to one broker's listener."""

    def __init__(self, cluster: Any, broker: int):
        self.sock = socket.create_connection(cluster.kafka_server.address_of(broker), timeout=60)
        self.corr = 0

    def call(self, cls: Any, version: int, **fields: Any) -> Any:
        self.corr += 1
        req = cls(version=version, **fields)
        req.with_header(correlation_id=self.corr, client_id="wire-test")
        self.sock.sendall(bytes(req.encode(header=True, framed=True)))
        size = struct.unpack(">i", self._recv(4))[0]
        body = self._recv(size)
        resp_cls = codec.response_class(cls.API_KEY)
        resp = resp_cls.decode(body, version=version, header=True)
        assert resp.header.correlation_id == self.corr
        return resp

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the broker closed the connection"
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def kc(pylog_kafka):
    pylog_kafka.create_topic("t", partitions=3)
    pylog_kafka.ensure_offsets_topic()
    return pylog_kafka


def coordinator(cluster: Any, group: str = GROUP) -> Conn:
    """A connection to ``group``'s coordinator, found with FindCoordinator v0 (no key type)."""
    c = Conn(cluster, 0)
    resp = c.call(FindCoordinatorRequest, 0, key=group)
    c.close()
    assert resp.error_code == NONE
    assert (resp.host, resp.port) == cluster.kafka_server.address_of(resp.node_id)
    return Conn(cluster, resp.node_id)


def join(c: Conn, version: int, member: str = "", meta: bytes = b"sub", instance=None) -> Any:
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    return c.call(JoinGroupRequest, version, group_id=GROUP, session_timeout_ms=10_000, rebalance_timeout_ms=5_000,
                  member_id=member, group_instance_id=instance, protocol_type="consumer",
                  protocols=[proto(name="range", metadata=meta)])


def test_api_versions_advertise_the_group_ranges(kc):
    c = Conn(kc, 0)
    resp = c.call(ApiVersionsRequest, 3, client_software_name="t", client_software_version="1")
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    keys = {"FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13, "SyncGroup": 14,
            "OffsetCommit": 8, "OffsetFetch": 9, "DescribeGroups": 15, "ListGroups": 16}
    assert {name: served[key] for name, key in keys.items()} == groups.VERSIONS
    c.close()


def test_join_v4_needs_the_member_id_round_trip_and_v3_does_not(kc):
    c = coordinator(kc)
    first = join(c, 4)
    assert first.error_code == CODES["MEMBER_ID_REQUIRED"] and first.member_id and first.generation_id == -1
    resp = join(c, 4, member=first.member_id)
    assert resp.error_code == NONE and resp.member_id == first.member_id == resp.leader
    assert [(m.member_id, m.metadata) for m in resp.members] == [(first.member_id, b"sub")]  # opaque bytes
    sync = c.call(SyncGroupRequest, 3, group_id=GROUP, generation_id=resp.generation_id, member_id=resp.member_id,
                  group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                      member_id=resp.member_id, assignment=b"\x00\x01opaque")])
    assert sync.error_code == NONE and sync.assignment == b"\x00\x01opaque"
    hb = c.call(HeartbeatRequest, 3, group_id=GROUP, generation_id=resp.generation_id, member_id=resp.member_id,
                group_instance_id=None)
    assert hb.error_code == NONE
    assert c.call(LeaveGroupRequest, 1, group_id=GROUP, member_id=resp.member_id).error_code == NONE
    c.close()
    c2 = coordinator(kc)
    old = join(c2, 3)  # JoinGroup v3: the member id comes with the (rebalancing) join itself
    assert old.error_code == NONE and old.member_id and old.member_id != first.member_id
    c2.close()


def test_join_v5_static_member_and_sync_v5_names_the_protocol(kc):
    c = coordinator(kc)
    resp = join(c, 5, instance="host-1")
    assert resp.error_code == NONE and resp.member_id.startswith("host-1")
    assert [m.group_instance_id for m in resp.members] == ["host-1"]
    bad = c.call(SyncGroupRequest, 5, group_id=GROUP, generation_id=resp.generation_id, member_id=resp.member_id,
                 group_instance_id="host-1", protocol_type="consumer", protocol_name="roundrobin", assignments=[])
    assert bad.error_code == CODES["INCONSISTENT_GROUP_PROTOCOL"]
    ok = c.call(SyncGroupRequest, 5, group_id=GROUP, generation_id=resp.generation_id, member_id=resp.member_id,
                group_instance_id="host-1", protocol_type="consumer", protocol_name="range", assignments=[])
    assert (ok.error_code, ok.protocol_type, ok.protocol_name) == (NONE, "consumer", "range")
    d = c.call(DescribeGroupsRequest, 5, groups=[GROUP], include_authorized_operations=False).groups[0]
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (NONE, "Stable", "consumer", "range")
    assert [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.member_metadata)
            for m in d.members] == [(resp.member_id, "host-1", "wire-test", "/127.0.0.1", b"sub")]
    c.close()


def test_leave_group_v3_removes_a_batch_and_reports_each_member(kc):
    c = coordinator(kc)
    a = join(c, 3)
    c2 = coordinator(kc)
    # b joins; a must rejoin for the rebalance to complete: a on one connection, b on another
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("b", join(c2, 3)))
    t.start()
    for _ in range(600):  # b's join is in when the group rebalances
        if kc.describe_group(GROUP).state == "PreparingRebalance":
            break
        time.sleep(0.05)
    a2 = join(c, 3, member=a.member_id)
    t.join(60)
    b = box["b"]
    assert a2.error_code == b.error_code == NONE and a2.generation_id == b.generation_id == 2
    resp = c.call(LeaveGroupRequest, 3, group_id=GROUP, members=[
        LeaveGroupRequest.MemberIdentity(member_id=a.member_id, group_instance_id=None),
        LeaveGroupRequest.MemberIdentity(member_id=b.member_id, group_instance_id=None),
        LeaveGroupRequest.MemberIdentity(member_id="nobody", group_instance_id=None)])
    assert resp.error_code == NONE
    assert [(m.member_id, m.error_code) for m in resp.members] == [
        (a.member_id, NONE), (b.member_id, NONE), ("nobody", CODES["UNKNOWN_MEMBER_ID"])]
    assert kc.describe_group(GROUP).state == "Empty"
    v0 = c.call(LeaveGroupRequest, 0, group_id=GROUP, member_id="nobody")
    assert v0.error_code == CODES["UNKNOWN_MEMBER_ID"]
    c.close()
    c2.close()


def _commit(c: Conn, version: int, rows, generation: int = -1, member: str = "") -> dict:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic.OffsetCommitRequestPartition
    by_topic = {}
    for t, p, off, meta in rows:
        by_topic.setdefault(t, []).append(part(partition_index=p, committed_offset=off, committed_leader_epoch=-1,
                                               committed_metadata=meta))
    resp = c.call(OffsetCommitRequest, version, group_id=GROUP, generation_id_or_member_epoch=generation,
                  member_id=member, group_instance_id=None, retention_time_ms=-1,
                  topics=[topic(name=t, partitions=ps) for t, ps in by_topic.items()])
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def test_offset_commit_round_trips_metadata_and_reports_bad_partitions(kc):
    c = coordinator(kc)
    errors = _commit(c, 8, [("t", 0, 7, "ckpt-7 \u00e9"), ("t", 1, 3, None), ("t", 2, 9, "x" * 4097),
                            ("t", 5, 1, ""), ("nope", 0, 1, "")])
    assert errors == {("t", 0): NONE, ("t", 1): NONE, ("t", 2): CODES["OFFSET_METADATA_TOO_LARGE"],
                      ("t", 5): CODES["UNKNOWN_TOPIC_OR_PARTITION"], ("nope", 0): CODES["UNKNOWN_TOPIC_OR_PARTITION"]}
    offsets = kc.list_group_offsets(GROUP)
    assert {tp: (v.offset, v.metadata) for tp, v in offsets.items()} == {("t", 0): (7, "ckpt-7 \u00e9"),
                                                                          ("t", 1): (3, "")}
    # OffsetFetch v7 with null topics: every partition the group has an offset for
    allp = c.call(OffsetFetchRequest, 7, group_id=GROUP, topics=None, require_stable=False)
    assert allp.error_code == NONE
    assert {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in allp.topics for p in t.partitions} == {("t", 0): (7, "ckpt-7 \u00e9", NONE),
                                                            ("t", 1): (3, "", NONE)}
    # OffsetFetch v1 names partitions; one never committed is -1
    some = c.call(OffsetFetchRequest, 1, group_id=GROUP, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name="t", partition_indexes=[0, 2])])
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in some.topics[0].partitions] == [
        (0, 7, "ckpt-7 \u00e9"), (2, -1, "")]
    # a commit naming a generation of a group without members is refused
    assert _commit(c, 2, [("t", 0, 8, "")], generation=3, member="ghost") == {("t", 0): CODES["UNKNOWN_MEMBER_ID"]}
    assert kc.list_group_offsets(GROUP)[("t", 0)].offset == 7
    c.close()


def test_group_requests_to_a_broker_that_is_not_the_coordinator_get_not_coordinator(kc):
    c = coordinator(kc)
    node = [b for b, p in kc.kafka_server.ports.items() if kc.kafka_server.address_of(b) == c.sock.getpeername()]
    c.close()
    other = Conn(kc, next(b for b in kc.brokers if b not in node))
    assert join(other, 3).error_code == CODES["NOT_COORDINATOR"]
    assert _commit(other, 8, [("t", 0, 1, "")]) == {("t", 0): CODES["NOT_COORDINATOR"]}
    fetched = other.call(OffsetFetchRequest, 3, group_id=GROUP, topics=None)
    assert fetched.error_code == CODES["NOT_COORDINATOR"]
    assert other.call(JoinGroupRequest, 3, group_id="", session_timeout_ms=10_000, rebalance_timeout_ms=1_000,
                      member_id="", protocol_type="consumer", protocols=[]).error_code == CODES["INVALID_GROUP_ID"]
    other.close()


def test_describe_and_list_groups(kc):
    c = coordinator(kc)
    join(c, 3)
    d = c.call(DescribeGroupsRequest, 5, groups=[GROUP], include_authorized_operations=False).groups[0]
    assert (d.error_code, d.group_state) == (NONE, "CompletingRebalance")
    unknown = coordinator(kc, "never-seen")  # described by its own coordinator
    d = unknown.call(DescribeGroupsRequest, 5, groups=["never-seen"], include_authorized_operations=False).groups[0]
    assert (d.error_code, d.group_state, d.members) == (NONE, "Dead", [])
    unknown.close()
    listed = []
    for b in kc.brokers:  # as clients do: every broker lists the groups it coordinates
        conn = Conn(kc, b)
        resp = conn.call(ListGroupsRequest, 4, states_filter=[])
        assert resp.error_code == NONE
        listed += [(g.group_id, g.protocol_type, g.group_state) for g in resp.groups]
        filtered = conn.call(ListGroupsRequest, 4, states_filter=["stable"])
        assert filtered.groups == []
        conn.close()
    assert listed == [(GROUP, "consumer", "CompletingRebalance")]
    c.close()


def test_later_versions_batch_coordinator_keys_and_offset_fetch_groups(kc, monkeypatch):
    """FindCoordinator v4+ and OffsetFetch v8+ (Kafka 3.0, not advertised yet): served once the range allows."""
    for key, top in ((10, 6), (9, 9), (11, 9), (13, 5), (8, 9), (15, 6), (16, 5)):
        monkeypatch.setitem(REGISTRY, key, dataclasses.replace(REGISTRY[key], max_version=top))
    c = Conn(kc, 0)
    resp = c.call(FindCoordinatorRequest, 4, key_type=0, coordinator_keys=[GROUP, "other"])
    rows = {r.key: (r.error_code, r.node_id, r.host, r.port) for r in resp.coordinators}
    for key in (GROUP, "other"):
        code, node, host, port = rows[key]
        assert code == NONE and (host, port) == kc.kafka_server.address_of(node)
        assert node == kc.leader_of(ot.OFFSETS_TOPIC, ot.partition_for_group(key, kc.store.topics[ot.OFFSETS_TOPIC].partitions))
    txn = c.call(FindCoordinatorRequest, 4, key_type=1, coordinator_keys=["tx"])
    # key type 1: the first lookup creates __transaction_state (tests/protocol/test_txn_wire.py goes on)
    assert txn.coordinators[0].error_code == CODES["COORDINATOR_NOT_AVAILABLE"]
    share = c.call(FindCoordinatorRequest, 4, key_type=2, coordinator_keys=["s"])
    assert share.coordinators[0].error_code == CODES["INVALID_REQUEST"]
    c.close()
    co = coordinator(kc)
    assert _commit(co, 9, [("t", 1, 4, "m")]) == {("t", 1): NONE}
    g = OffsetFetchRequest.OffsetFetchRequestGroup
    resp = co.call(OffsetFetchRequest, 8, groups=[g(group_id=GROUP, topics=None)], require_stable=False)
    (grp,) = resp.groups
    assert grp.error_code == NONE
    assert [(t.name, p.partition_index, p.committed_offset, p.metadata) for t in grp.topics for p in t.partitions] == [
        ("t", 1, 4, "m")]
    joined = join(co, 9)
    assert joined.error_code == CODES["MEMBER_ID_REQUIRED"]
    co.close()
    unknown = coordinator(kc, "never-seen")
    d = unknown.call(DescribeGroupsRequest, 6, groups=["never-seen"], include_authorized_operations=False).groups[0]
    assert (d.error_code, d.group_state) == (CODES["GROUP_ID_NOT_FOUND"], "Dead")
    unknown.close()
