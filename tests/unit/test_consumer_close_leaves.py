"""Issue 14 item 9: ``Consumer.close()`` waits for the LeaveGroup answer (Kafka's ``close(Duration)``).

Before, close() sent LeaveGroup without waiting (it waited only on a simulated cluster), so when the
directory's owner shut down right after, the member was still in the group's metadata; after a reopen
the next consumer of the group waited for the ghost's session timeout. The coordinator is made slow to
handle LeaveGroup here (the loaded machine of the issue, made deterministic), and the test asserts on
the group's membership, never on time.
"""
from __future__ import annotations

import pytest

import pylog
from pylog.client.admin import GroupAdmin
from pylog.replication import group_messages as gm
from pylog.runtime.broker import Broker

SLOW_LEAVE_MS = 300


@pytest.fixture
def slow_leave_group(monkeypatch):
    """The broker handles a LeaveGroup SLOW_LEAVE_MS after it arrives."""
    orig = Broker._on_message

    def on_message(self, src, msg):
        if isinstance(msg, gm.LeaveGroupRequest) and not getattr(msg, "_delayed", False):
            object.__setattr__(msg, "_delayed", True)
            self.scheduler.call_later(SLOW_LEAVE_MS, orig, self, src, msg)
            return
        orig(self, src, msg)

    monkeypatch.setattr(Broker, "_on_message", on_message)


@pytest.mark.parametrize("shared", [False, True])
def test_closed_consumer_is_not_in_the_group_after_reopen(tmp_path, slow_leave_group, shared):
    path = tmp_path / "q"
    q = pylog.open(path, shared=shared)
    try:
        q.create_topic("t", partitions=1, replication_factor=1)
        with q.producer() as p:
            p.send("t", b"one").result(30)
            p.send("t", b"two").result(30)
        c = q.consumer(group_id="g", topics=["t"], max_poll_records=1)
        got = []
        while not got:
            got = c.poll(1.0)
        c.commit()
        assert [m.member_id for m in GroupAdmin(q).describe_group("g").members] == [c.member_id]
        c.close()
    finally:
        q.close()
    q = pylog.open(path, shared=shared)
    try:
        # The closed member is gone from the reloaded group (before the fix: still a member).
        assert GroupAdmin(q).describe_group("g").members == ()
        c2 = q.consumer(group_id="g", topics=["t"])
        records = []
        while not records:
            records = c2.poll(1.0)
        assert records[0].value == b"two"  # from the committed offset
        assert [m.member_id for m in GroupAdmin(q).describe_group("g").members] == [c2.member_id]
        c2.close()
    finally:
        q.close()
