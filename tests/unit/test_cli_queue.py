"""``pylog produce`` / ``pylog consume`` on a queue directory (made by ``pylog.open``): a producer and a
group consumer, through the process that owns the directory when one is running."""
from __future__ import annotations

import subprocess
import sys
from typing import Optional

import pylog


def run(*args: str, stdin: Optional[bytes] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", *args], input=stdin, capture_output=True, timeout=180)


def test_produce_and_group_consume_through_a_running_owner(tmp_path):
    d = str(tmp_path / "q")
    q = pylog.open(d)  # this process owns the directory: the commands are clients over its socket
    try:
        q.create_topic("jobs", partitions=2)
        r = run("produce", d, "--topic", "jobs", "--partition", "1", "--key-separator", ":",
                stdin=b"k1:a\nk2:b\nc\nk4:d\n")
        assert r.returncode == 0, r.stderr
        assert b"Produced 4 records to jobs-1 (offsets 0..3)" in r.stderr
        # The owner sees them at once.
        cons = q.consumer(None, auto_offset_reset="earliest")
        cons.assign([("jobs", 1)])
        got = []
        while len(got) < 4:
            got += cons.poll(timeout=5.0)
        assert [(x.key, x.value) for x in got] == [(b"k1", b"a"), (b"k2", b"b"), (None, b"c"), (b"k4", b"d")]
        cons.close()

        # A group reads two, commits exactly what it printed, and the next run resumes there.
        # (--timeout-ms: the default 1 s without a record can pass during the group join on a loaded machine)
        r = run("consume", d, "--topic", "jobs", "--group", "g", "--from-beginning", "--max-messages", "2",
                "--print-key", "--key-separator", "=", "--timeout-ms", "30000")
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"k1=a\nk2=b\n"
        # (--max-messages ends the run; the long timeout only covers a slow group join on a loaded machine)
        r = run("consume", d, "--topic", "jobs", "--group", "g", "--max-messages", "2", "--timeout-ms", "30000")
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"c\nd\n"
        r = run("consume", d, "--topic", "jobs", "--group", "g", "--timeout-ms", "500")
        assert r.stdout == b"" and b"Processed a total of 0 messages" in r.stderr
        # One partition without a group, bounded by --offset and --to-offset.
        r = run("consume", d, "--topic", "jobs", "--partition", "1", "--offset", "1", "--to-offset", "3")
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"b\nc\n"
    finally:
        q.close()


def test_queue_commands_without_a_running_owner(tmp_path):
    d = str(tmp_path / "q")
    with pylog.open(d) as q:
        q.create_topic("t")
    r = run("produce", d, "--topic", "t", "--acks", "1", stdin=b"x\ny\n")
    assert r.returncode == 0, r.stderr
    r = run("consume", d, "--topic", "t", "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"x\ny\n"
    # An unknown topic is a named error and a non-zero exit.
    r = run("produce", d, "--topic", "nope", stdin=b"z\n")
    assert r.returncode == 1 and b"nope" in r.stderr


def test_log_dir_to_offset_and_group_refused(tmp_path):
    log = pylog.Log.open(str(tmp_path / "t-0"))
    log.append([b"a", b"b", b"c", b"d"])
    log.close()
    r = run("consume", str(tmp_path), "--topic", "t", "--from-beginning", "--to-offset", "2")
    assert r.returncode == 0 and r.stdout == b"a\nb\n"
    r = run("consume", str(tmp_path), "--topic", "t", "--group", "g")
    assert r.returncode == 2 and b"--group needs a queue/cluster directory" in r.stderr
