"""``pylog groups`` (kafka-consumer-groups) on a queue directory, as a subprocess talking to the owner process."""
from __future__ import annotations

import subprocess
import sys

import pylog


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", "groups", *args], capture_output=True, text=True, timeout=180)


def test_list_describe_reset_and_delete_groups_through_a_running_owner(tmp_path):
    d = str(tmp_path / "q")
    q = pylog.open(d)
    try:
        q.create_topic("jobs", partitions=2)
        p = q.producer()
        for i in range(6):
            p.send("jobs", b"%d" % i, partition=i % 2).result(30)
        c = q.consumer("billing", ["jobs"], client_id="biller", enable_auto_commit=False)
        got = []
        while len(got) < 6:
            got += c.poll(1.0)
        c.commit({("jobs", 0): 3, ("jobs", 1): 1})

        r = run(d)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "Group: billing State: Stable ProtocolType: consumer\n"
        r = run(d, "--describe", "billing")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("Group: billing State: Stable ProtocolType: consumer Protocol: range Generation: 1 ")
        assert lines[1].startswith("Member: ") and " ClientId: biller Host: " in lines[1]
        assert lines[1].endswith(" Assignment: jobs-0,jobs-1")
        assert lines[2:] == ["Topic: jobs Partition: 0 CommittedOffset: 3 LogEndOffset: 3 Lag: 0",
                             "Topic: jobs Partition: 1 CommittedOffset: 1 LogEndOffset: 3 Lag: 2"]
        r = run(d, "--delete", "billing")
        assert r.returncode == 1 and "ERROR:" in r.stderr and "'billing'" in r.stderr and "members" in r.stderr
        r = run(d, "--reset-offsets", "billing", "--topic", "jobs", "--to-offset", "0")
        assert r.returncode == 1 and "'billing'" in r.stderr  # not while it has a member

        c.close()
        r = run(d, "--reset-offsets", "billing", "--topic", "jobs", "--partition", "1", "--to-offset", "2")
        assert r.returncode == 0, r.stderr  # a dry run by default, as Kafka's tool: the plan, nothing changed
        assert r.stdout.splitlines()[1].split() == ["billing", "jobs", "1", "2"] and "Dry run" in r.stderr
        assert {tp: v.offset for tp, v in q.list_group_offsets("billing").items()} == {("jobs", 0): 3, ("jobs", 1): 1}
        r = run(d, "--reset-offsets", "billing", "--topic", "jobs", "--partition", "1", "--to-offset", "2",
                "--execute")
        assert r.returncode == 0, r.stderr
        assert {tp: v.offset for tp, v in q.list_group_offsets("billing").items()} == {("jobs", 0): 3, ("jobs", 1): 2}
        r = run(d, "--delete-offsets", "billing", "--topic", "jobs")
        assert r.returncode == 0, r.stderr
        assert q.list_group_offsets("billing") == {}
        r = run(d, "--reset-offsets", "billing", "--topic", "jobs", "--to-offset", "1", "--execute")
        assert r.returncode == 0, r.stderr
        r = run(d, "--delete", "billing")
        assert r.returncode == 0, r.stderr
        assert r.stdout == "Deleted group billing\n"
        r = run(d)
        assert r.returncode == 0 and r.stdout == ""
        assert q.list_groups() == []
        r = run(d, "--describe", "billing")
        assert r.returncode == 1 and "'billing' does not exist" in r.stderr
    finally:
        q.close()


def test_groups_needs_a_queue_directory_and_a_topic(tmp_path):
    r = run(str(tmp_path))
    assert r.returncode == 1 and "needs a queue/cluster directory" in r.stderr
    with pylog.open(str(tmp_path / "q")) as q:
        q.create_topic("t")
    r = run(str(tmp_path / "q"), "--delete-offsets", "g")
    assert r.returncode == 2 and "--topic" in r.stderr


def test_describe_shows_static_members_and_the_queue_removes_them(tmp_path):
    d = str(tmp_path / "q")
    q = pylog.open(d)
    try:
        q.create_topic("jobs", partitions=1)
        c = q.consumer("billing", ["jobs"], group_instance_id="host-7", enable_auto_commit=False)
        c.poll(0.2)
        r = run(d, "--describe", "billing")
        assert r.returncode == 0, r.stderr
        member = r.stdout.splitlines()[1]
        assert member.startswith("Member: ") and " InstanceId: host-7 ClientId: " in member
        c.close()  # a static member does not leave its group on close
        assert [m.group_instance_id for m in q.describe_group("billing").members] == ["host-7"]
        q.remove_group_members("billing", ["host-7"])  # pylog.open's facade over GroupAdmin
        assert not q.describe_group("billing").members
        r = run(d, "--describe", "billing")
        assert r.returncode == 0 and "InstanceId" not in r.stdout
    finally:
        q.close()
