"""Injected errors on the group APIs (``cluster.inject_fault``): every API at every version it speaks
answers with the injected code where that version carries one (each handler's ``fail``), and real clients
recover from Kafka's retriable group errors as they do against Kafka."""
from __future__ import annotations

import dataclasses
import time

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
from kafka.protocol.metadata import FindCoordinatorRequest

from pylog.protocol import codec
from pylog.protocol.api import REGISTRY

from .group_clients import Clients
from .test_groups_wire import Conn

CODE = codec.ERROR_CODES["COORDINATOR_LOAD_IN_PROGRESS"]
#: (request class, Kafka 4.0's top version the handlers speak, request fields, where the error code is)
_OC = OffsetCommitRequest.OffsetCommitRequestTopic
_OF = OffsetFetchRequest.OffsetFetchRequestTopic
CASES = [
    (FindCoordinatorRequest, 6, dict(key="g", key_type=0, coordinator_keys=["g"]),
     lambda r, v: r.coordinators[0].error_code if v >= 4 else r.error_code),
    (JoinGroupRequest, 9, dict(group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
                               group_instance_id=None, protocol_type="consumer", protocols=[], reason=None),
     lambda r, v: r.error_code),
    (SyncGroupRequest, 5, dict(group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                               protocol_type=None, protocol_name=None, assignments=[]), lambda r, v: r.error_code),
    (HeartbeatRequest, 4, dict(group_id="g", generation_id=1, member_id="m", group_instance_id=None),
     lambda r, v: r.error_code),
    (LeaveGroupRequest, 5, dict(group_id="g", member_id="m", members=[LeaveGroupRequest.MemberIdentity(
        member_id="m", group_instance_id=None, reason=None)]), lambda r, v: r.error_code),
    (OffsetCommitRequest, 9, dict(group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                                  retention_time_ms=-1, topics=[_OC(name="t", partitions=[
                                      _OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                                       committed_leader_epoch=-1, committed_metadata="")])]),
     lambda r, v: r.topics[0].partitions[0].error_code),
    (OffsetFetchRequest, 9, dict(group_id="g", topics=[_OF(name="t", partition_indexes=[0])], require_stable=False,
                                 groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", member_id=None,
                                                                                    member_epoch=-1, topics=None)]),
     lambda r, v: r.groups[0].error_code if v >= 8 else (r.error_code if v >= 2 else r.topics[0].partitions[0].error_code)),
    (DescribeGroupsRequest, 6, dict(groups=["g"], include_authorized_operations=False),
     lambda r, v: r.groups[0].error_code),
    (ListGroupsRequest, 5, dict(states_filter=[], types_filter=[]), lambda r, v: r.error_code),
]


def test_every_group_api_and_version_answers_an_injected_error(pylog_kafka, monkeypatch):
    c = Conn(pylog_kafka, 0)
    try:
        for cls, top, fields, where in CASES:
            spec = REGISTRY[cls.API_KEY]
            monkeypatch.setitem(REGISTRY, cls.API_KEY, dataclasses.replace(spec, max_version=top))
            for v in range(spec.min_version, top + 1):
                with pylog_kafka.inject_fault(api=cls.API_KEY, error="COORDINATOR_LOAD_IN_PROGRESS") as fault:
                    resp = c.call(cls, v, **fields)
                assert fault.hits == 1 and where(resp, v) == CODE, (cls.__name__, v, resp)
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["kafka-python", "confluent-kafka", "aiokafka"])
def test_real_clients_ride_out_retriable_group_errors(pylog_kafka, kind):
    """NOT_COORDINATOR on a heartbeat and on a commit, COORDINATOR_LOAD_IN_PROGRESS on the first
    FindCoordinator: the member rediscovers its coordinator, retries, and its commit lands."""
    cluster = pylog_kafka
    cluster.create_topic("flaky", partitions=2)
    p = cluster.producer(acks="all")
    for f in [p.send("flaky", b"x", partition=i % 2) for i in range(10)]:
        f.result(30)
    cluster.inject_fault(api="FindCoordinator", error="COORDINATOR_LOAD_IN_PROGRESS", count=1)
    clients = Clients(kind, cluster.bootstrap_servers)
    try:
        m = clients.member("flaky-group", "flaky", "m", threaded=False)
        got = []
        deadline = time.monotonic() + 60  # a liveness bound only
        while len(got) < 10:
            got += m.poll()
            assert time.monotonic() < deadline
        hb = cluster.inject_fault(api="Heartbeat", error="NOT_COORDINATOR", count=1)
        commit = cluster.inject_fault(api="OffsetCommit", error="NOT_COORDINATOR", count=1)
        deadline = time.monotonic() + 60
        while True:
            ok = m.commit()
            offsets = {tp: v.offset for tp, v in cluster.list_group_offsets("flaky-group").items()}
            if ok and offsets == {("flaky", 0): 5, ("flaky", 1): 5} and hb.hits:
                break
            m.poll()
            assert time.monotonic() < deadline, (ok, offsets, hb.hits, commit.hits)
        assert commit.hits == 1
    finally:
        clients.close_all()
