"""kill -9 of a shared-directory owner while (or right after) it deletes a topic: the reopened
directory has the topic whole or not at all - never half - and no leftover partition directories."""
from __future__ import annotations

import os
import time

import pytest

import pylog
from tests.crash.killed_writer import kill_after_lines

OWNER = r"""
import sys, time, pylog
q = pylog.open(sys.argv[1])
q.create_topic("doomed", partitions=3)
q.create_topic("kept")
p = q.producer()
for i in range(30):
    p.send("doomed", b"%d" % i, partition=i % 3).result(30)
p.send("kept", b"k").result(30)
print(1, flush=True)
q.delete_topic("doomed")
print(2, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("kill_after", [1, 2], ids=["racing-the-delete", "after-the-delete-returned"])
def test_owner_killed_during_topic_deletion(tmp_path, kill_after):
    d = str(tmp_path / "q")
    got = kill_after_lines(OWNER, [d], kill_after)
    assert len(got) == kill_after
    broker = os.path.join(d, "broker-0")
    if kill_after == 2:  # delete_topic returned: renamed, removal still pending when killed
        names = os.listdir(broker)
        assert not {"doomed-0", "doomed-1", "doomed-2"} & set(names)
    q = pylog.open(d)
    try:
        assert q.role == "owner"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(n.endswith("-delete") for n in os.listdir(broker)):
            time.sleep(0.05)
        leftovers = sorted(n for n in os.listdir(broker) if n.startswith("doomed"))
        if "doomed" in q.list_topics():
            assert kill_after == 1
            assert sorted(r.high_watermark for r in q.describe("doomed")) == [10, 10, 10]
            assert leftovers == ["doomed-0", "doomed-1", "doomed-2"]
        else:
            assert leftovers == []  # neither the folders nor their renamed copies
            q.create_topic("doomed", partitions=3)  # the name is free again, and empty
            assert [r.high_watermark for r in q.describe("doomed")] == [0, 0, 0]
        assert q.describe("kept")[0].high_watermark == 1
    finally:
        q.close()
