"""Several processes open one directory with ``pylog.open``: the owner runs the broker, the others reach it.

Each test drives real worker processes (one per role, reused across steps)
through JSON commands on stdin; each worker reports events as JSON lines on
stdout. Processes are killed with SIGKILL, so nothing is flushed or closed
on the way out.

* a writer and a reader on one directory: the reader gets every acknowledged
  record, in order, exactly once, whole (no torn batch), and a record written
  while the reader is blocked in ``poll`` wakes that very call (its latency is
  printed for information, never asserted on);
* a consumer killed mid-run and restarted resumes at exactly its committed
  offset (commits are kept by the owner process);
* the owner, which is also the producer, killed mid-stream: every record it
  was told was written is in the directory, and the client process takes the
  directory over and keeps producing and consuming.
"""
from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any, Dict, List, Optional

import pytest

import pylog
from pylog.runtime.transport.unix import socket_address

WORKER = textwrap.dedent(
    """
    import inspect, json, os, random, sys, threading, time
    from pylog.client.consumer import Consumer
    from pylog.local_queue import open as pylog_open

    path = sys.argv[1]
    lock = threading.Lock()

    def emit(**kw):
        kw["t"] = time.time()
        with lock:
            sys.stdout.write(json.dumps(kw) + "\\n")
            sys.stdout.flush()

    q = pylog_open(path)
    emit(ev="open", role=q.role, pid=os.getpid())
    producer = consumer = None
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "create":
            if cmd["topic"] not in q.store.topics:
                q.create_topic(cmd["topic"], partitions=1, replication_factor=1)
            emit(ev="created")
        elif op == "send":
            producer = producer or q.producer(acks="all")
            sent_at = time.time()
            futs = [producer.send(cmd["topic"], v.encode()) for v in cmd["values"]]
            emit(ev="acked", offsets=[f.result(60).offset for f in futs], values=cmd["values"], sent_at=sent_at)
        elif op == "produce_forever":  # batches of random sizes until killed; each batch's acks on one line
            producer = producer or q.producer(acks="all")
            rnd = random.Random(cmd["seed"])
            n = 0
            while True:
                values = ["%s-%d-%s" % (cmd["prefix"], n + i, "x" * rnd.randint(0, 300)) for i in range(rnd.randint(1, 20))]
                n += len(values)
                futs = [producer.send(cmd["topic"], v.encode()) for v in values]
                emit(ev="acked", offsets=[f.result(60).offset for f in futs], values=values)
        elif op == "consumer":
            # Manual commits; a killed member's session ends soon (options of the group consumer).
            accepted = inspect.signature(Consumer).parameters
            opts = {k: v for k, v in dict(enable_auto_commit=False, session_timeout_ms=1500,
                                          heartbeat_interval_ms=300).items() if k in accepted}
            consumer = q.consumer(cmd.get("group"), [cmd["topic"]], **opts)
            if cmd.get("group") is None:
                emit(ev="consumer", position=consumer.position(cmd["topic"], 0))
            else:  # a group member's position is known once it joined (in poll); its commit now
                emit(ev="consumer", committed=consumer.committed(cmd["topic"], 0))
        elif op == "poll":
            emit(ev="polling")
            started = time.time()
            recs = consumer.poll(cmd["timeout"], max_records=cmd.get("max"))
            emit(ev="polled", records=[[r.offset, r.value.decode()] for r in recs], started=started)
        elif op == "poll_until":  # poll until ``n`` records arrived (or ``timeout`` seconds passed)
            got = []
            end = time.time() + cmd["timeout"]
            while len(got) < cmd["n"] and time.time() < end:
                got += [[r.offset, r.value.decode()] for r in consumer.poll(1.0)]
            emit(ev="polled", records=got)
        elif op == "commit":
            consumer.commit()
            emit(ev="committed", offset=consumer.committed(cmd["topic"], 0))
        elif op == "wait_new_owner":  # attached again, to an owner other than ``old``
            end = time.time() + cmd["timeout"]
            while (q.role is None or q.owner_pid in (None, cmd["old"])) and time.time() < end:
                time.sleep(0.01)
            emit(ev="role", role=q.role, takeovers=q.takeovers, owner_pid=q.owner_pid)
        elif op == "wait_role":
            end = time.time() + cmd["timeout"]
            while q.role != cmd["role"] and time.time() < end:
                time.sleep(0.01)
            emit(ev="role", role=q.role, takeovers=q.takeovers)
        elif op == "close":
            q.close()
            emit(ev="closed")
            break
    """
)


class Worker:
    """One worker process; ``cmd`` sends a command, ``expect`` waits for an event."""

    def __init__(self, path: str):
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        self.err: List[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()  # type: ignore[arg-type]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:  # a line cut short by SIGKILL was never reported
                pass
        self.events.put(None)

    def cmd(self, **kw: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(kw) + "\n")
        self.proc.stdin.flush()

    def expect(self, ev: str, timeout: float = 60.0) -> Dict[str, Any]:
        while True:
            try:
                e = self.events.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {ev!r} event within {timeout} s; stderr:\n{''.join(self.err)[-3000:]}")
            if e is None:
                self.proc.wait(10)
                raise AssertionError(f"worker exited {self.proc.returncode} before {ev!r}:\n{''.join(self.err)[-3000:]}")
            if e["ev"] == ev:
                return e

    def drain(self) -> List[Dict[str, Any]]:
        """Every event still queued after the process ended."""
        self.proc.wait(30)
        out = []
        while True:
            e = self.events.get(timeout=30)
            if e is None:
                return out
            out.append(e)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        assert self.proc.returncode == -signal.SIGKILL

    def close(self) -> None:
        if self.proc.poll() is None:
            self.cmd(op="close")
            self.expect("closed")
            self.proc.wait(30)
            assert self.proc.returncode == 0, "".join(self.err)[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def workers():
    started: List[Worker] = []

    def start(path: str) -> Worker:
        w = Worker(path)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


def test_writer_and_reader_processes_share_a_directory(tmp_path, workers) -> None:
    path = str(tmp_path / "q")
    writer = workers(path)
    assert writer.expect("open")["role"] == "owner"
    writer.cmd(op="create", topic="t")
    writer.expect("created")
    reader = workers(path)
    assert reader.expect("open")["role"] == "client"
    reader.cmd(op="consumer", topic="t")
    assert reader.expect("consumer")["position"] == 0

    # Bulk: batches of random sizes; the reader sees each acknowledged record once, in offset order.
    rnd = random.Random(5)
    acked: Dict[int, str] = {}
    n = 0
    for _ in range(30):
        values = [f"v{n + i}-" + "y" * rnd.randint(0, 500) for i in range(rnd.randint(1, 60))]
        n += len(values)
        writer.cmd(op="send", topic="t", values=values)
        e = writer.expect("acked")
        acked.update(zip(e["offsets"], e["values"]))
    assert sorted(acked) == list(range(n))  # one writer, acks=all: dense offsets
    reader.cmd(op="poll_until", n=n, timeout=60)
    got = reader.expect("polled")["records"]
    assert [tuple(r) for r in got] == sorted(acked.items())

    # Wakeup: the reader blocks in poll(20 s); a record written meanwhile ends that call.
    latencies = []
    for i in range(10):
        reader.cmd(op="poll", topic="t", timeout=20)
        reader.expect("polling")
        writer.cmd(op="send", topic="t", values=[f"ping-{i}"])
        a = writer.expect("acked")
        e = reader.expect("polled")
        assert e["records"] == [[a["offsets"][0], f"ping-{i}"]], "the blocked poll did not return the record"
        latencies.append((e["t"] - a["sent_at"]) * 1000)
    print(f"send -> blocked poll returns, ms: min {min(latencies):.2f} max {max(latencies):.2f}")
    reader.close()
    writer.close()


def test_consumer_killed_and_restarted_resumes_at_its_committed_offset(tmp_path, workers) -> None:
    path = str(tmp_path / "q")
    owner = workers(path)
    assert owner.expect("open")["role"] == "owner"
    owner.cmd(op="create", topic="t")
    owner.expect("created")
    values = [f"r{i}" for i in range(100)]
    owner.cmd(op="send", topic="t", values=values)
    assert owner.expect("acked")["offsets"] == list(range(100))

    consumed = []
    committed = 0
    for round_ in range(2):
        c = workers(path)
        assert c.expect("open")["role"] == "client"
        c.cmd(op="consumer", topic="t", group="billing")
        assert (c.expect("consumer")["committed"] or 0) == committed, f"round {round_}: commit {committed} lost"
        for _ in range(3):
            c.cmd(op="poll", topic="t", timeout=30, max=7)
            recs = c.expect("polled")["records"]
            assert recs and recs[0][0] == committed, f"first record after offset {committed}: {recs[:1]}"
            consumed += recs
            c.cmd(op="commit", topic="t")
            committed = c.expect("committed")["offset"]
            assert committed == recs[-1][0] + 1
        # Polled past the commit, then killed: those records come again to the next process.
        c.cmd(op="poll", topic="t", timeout=30, max=5)
        assert c.expect("polled")["records"][0][0] == committed
        c.kill()
    assert [tuple(r) for r in consumed] == [(i, f"r{i}") for i in range(len(consumed))]
    owner.close()


def test_killed_owner_loses_no_acknowledged_record_and_a_client_takes_over(tmp_path, workers) -> None:
    path = str(tmp_path / "q")
    producer = workers(path)
    assert producer.expect("open")["role"] == "owner"
    producer.cmd(op="create", topic="t")
    producer.expect("created")
    client = workers(path)
    assert client.expect("open")["role"] == "client"
    client.cmd(op="consumer", topic="t")
    client.expect("consumer")

    producer.cmd(op="produce_forever", topic="t", prefix="p", seed=3)
    acked: Dict[int, str] = {}
    want = random.Random(9).randint(20, 60)
    for _ in range(want):
        e = producer.expect("acked")
        acked.update(zip(e["offsets"], e["values"]))
    producer.kill()
    for e in producer.drain():  # acknowledgements printed before the kill count too
        if e["ev"] == "acked":
            acked.update(zip(e["offsets"], e["values"]))

    client.cmd(op="wait_role", role="owner", timeout=60)
    e = client.expect("role")
    assert e["role"] == "owner" and e["takeovers"] == 1
    client.cmd(op="send", topic="t", values=["after-takeover"])  # its producer works on the new owner
    after = client.expect("acked")["offsets"][0]
    assert after >= max(acked) + 1
    client.cmd(op="poll_until", n=after + 1, timeout=60)
    got = dict(tuple(r) for r in client.expect("polled")["records"])  # type: ignore[misc]
    missing = {o: v for o, v in acked.items() if got.get(o) != v}
    assert not missing, f"acknowledged records lost or changed: {list(missing)[:5]}"
    assert got[after] == "after-takeover"
    client.close()

    # The directory itself, read with no broker running.
    log = pylog.Log.open(os.path.join(path, "broker-0", "t-0"), read_only=True)
    try:
        on_disk = {r.offset: r.value.decode() for r in _read_all(log)}
    finally:
        log.close()
    assert all(on_disk.get(o) == v for o, v in acked.items())
    assert on_disk[after] == "after-takeover"


def _read_all(log: pylog.Log) -> List[pylog.Record]:
    out: List[pylog.Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        recs = list(log.read(offset))
        assert recs, f"no record at offset {offset} below the log end {log.log_end_offset}"
        out += recs
        offset = recs[-1].offset + 1
    return out


@pytest.mark.parametrize("deep", [False, True], ids=["short-path", "path-longer-than-sun_path"])
def test_second_open_in_one_process_is_a_client_of_the_first(tmp_path, deep: bool) -> None:
    """Within one process too, the second open() reaches the first over the socket, and takes over on close."""
    path = str(tmp_path / ("d" * 60) / ("e" * 60) / "q") if deep else str(tmp_path / "q")
    address = socket_address(path)
    if deep:
        assert len(os.path.join(path, "pylog.sock").encode()) > 108 and not address.startswith(path)
    else:
        assert address == os.path.join(os.path.realpath(path), "pylog.sock")
    before = set(threading.enumerate())
    a = pylog.open(path)
    b = pylog.open(path)
    try:
        assert (a.role, b.role) == ("owner", "client")
        a.create_topic("t")
        assert "t" in b.store.topics  # found on the owner if the pushed metadata has not arrived yet
        with pytest.raises(pylog.errors.TopicAlreadyExistsError):  # the owner's error, raised in the client
            b.create_topic("t")
        with pytest.raises(pylog.errors.UnknownTopicOrPartitionError, match="nope"):
            b.describe("nope")
        assert [(r.topic, r.leader, r.high_watermark) for r in b.describe("t")] == [("t", 0, 0)]
        p = b.producer()
        assert p.send("t", b"one").result(30).offset == 0
        a.close()
        assert p.send("t", b"two").result(60).offset == 1  # retried until b took over
        assert b.role == "owner" and b.takeovers == 1
        c = b.consumer(None, ["t"])
        got: List[Any] = []
        while len(got) < 2:
            got += c.poll(5.0)
        assert [(r.offset, r.value) for r in got] == [(0, b"one"), (1, b"two")]
        b._check()
        with open(os.path.join(path, "pylog.owner")) as f:
            assert json.load(f)["pid"] == os.getpid()
    finally:
        a.close()
        b.close()
    assert not os.path.exists(os.path.join(path, "pylog.owner"))
    leftover = [t for t in threading.enumerate() if t not in before]
    for t in leftover:
        t.join(10)  # socket reader/writer threads end as their sockets close
    assert not [t for t in leftover if t.is_alive()], f"threads left after close(): {leftover}"


def test_client_producer_streams_across_the_owners_death(tmp_path, workers) -> None:
    """A client's producer keeps sending while the owner is killed: its in-flight batches fail, are retried
    on the client itself once it took over, and every acknowledged record is in the log exactly once."""
    _stream_rounds(str(tmp_path / "q"), workers, rounds=1, seed=4)


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(not os.environ.get("PYLOG_SOAK"), reason="soak run: set PYLOG_SOAK=1")
def test_client_producer_streams_across_owner_deaths_soak(tmp_path, workers) -> None:
    """PYLOG_SOAK=1 PYLOG_CRASH_ROUNDS=50 .venv/bin/python -m pytest tests/crash/test_shared_dir.py -m soak"""
    rounds = int(os.environ.get("PYLOG_CRASH_ROUNDS", "50"))
    _stream_rounds(str(tmp_path / "q"), workers, rounds=rounds, seed=int(os.environ.get("PYLOG_CRASH_SEED", "1")))


def _stream_rounds(path: str, workers: Any, rounds: int, seed: int) -> None:
    """Each round: an owner (recovering the last round's crash) and a streaming client producer; the owner
    is killed after a random number of acknowledgements, the producer (now the owner) after some more."""
    rnd = random.Random(seed)
    acked: Dict[int, str] = {}
    for r in range(rounds):
        owner = workers(path)
        assert owner.expect("open")["role"] == "owner"
        owner.cmd(op="create", topic="t")
        owner.expect("created")
        producer = workers(path)
        assert producer.expect("open")["role"] == "client"
        producer.cmd(op="produce_forever", topic="t", prefix=f"s{r}", seed=rnd.randrange(1 << 30))
        for _ in range(rnd.randint(1, 20)):
            e = producer.expect("acked")
            acked.update(zip(e["offsets"], e["values"]))
        owner.kill()
        before = len(acked)
        for _ in range(rnd.randint(1, 20)):  # acknowledgements keep coming: the producer is the owner now
            e = producer.expect("acked")
            acked.update(zip(e["offsets"], e["values"]))
        assert len(acked) > before, f"round {r}: no acknowledgement after the takeover"
        producer.kill()
        for e in producer.drain():
            if e["ev"] == "acked":
                acked.update(zip(e["offsets"], e["values"]))

    q = pylog.open(path)  # one more owner: recovers the last crash
    try:
        assert q.role == "owner"
        c = q.consumer(None, ["t"])
        got: Dict[int, str] = {}
        end = max(acked) + 1
        while len(got) < end:
            recs = c.poll(5.0)
            assert recs, f"no record after offset {max(got, default=-1)} (log should reach {end})"
            got.update((rec.offset, rec.value.decode()) for rec in recs)
    finally:
        q.close()
    missing = {o: v for o, v in acked.items() if got.get(o) != v}
    assert not missing, f"acknowledged records lost or changed: {list(missing)[:5]}"
    values = [got[o] for o in sorted(got)]
    dupes = len(values) - len(set(values))
    assert dupes == 0, f"{dupes} records written twice (idempotent retries across the takeover)"


def test_open_next_to_a_process_not_sharing_the_directory_fails_cleanly(tmp_path) -> None:
    """A plain Cluster in another process holds the broker's lock: open() gives up with the reason, no thread left."""
    path = str(tmp_path / "q")
    code = ("import sys, pylog; c = pylog.Cluster(sys.argv[1], brokers=1); c.create_topic('t'); "
            "print('up', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        before = set(threading.enumerate())
        with pytest.raises(pylog.errors.BrokerNotAvailableError, match="not sharing it"):
            pylog.open(path, open_timeout_ms=300)
        assert not os.path.exists(os.path.join(path, "pylog.owner"))
        assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []
    finally:
        proc.kill()
        proc.wait(30)
    q = pylog.open(path)  # the other process is gone: this one owns the directory now
    try:
        assert q.role == "owner"
    finally:
        q.close()


def test_open_next_to_a_plain_cluster_in_the_same_process_fails_cleanly(tmp_path) -> None:
    path = str(tmp_path / "q")
    c = pylog.Cluster(path, brokers=1)
    try:
        c.create_topic("t")
        with pytest.raises(pylog.errors.BrokerNotAvailableError, match="not sharing it"):
            pylog.open(path, open_timeout_ms=200)
        assert c.producer().send("t", b"still mine").result(30).offset == 0  # its lock was not disturbed
        probe = ("import sys, pylog\ntry:\n    pylog.Log.open(sys.argv[1])\nexcept pylog.errors.LogDirLockedError:\n"
                 "    print('locked')\n")
        out = subprocess.run([sys.executable, "-c", probe, os.path.join(path, "broker-0", "t-0")],
                             capture_output=True, text=True, timeout=60)
        assert out.stdout == "locked\n", out.stderr[-2000:]  # the fcntl lock is still held for other processes
    finally:
        c.close()


def test_one_of_several_clients_takes_over_and_the_others_follow_it(tmp_path, workers) -> None:
    path = str(tmp_path / "q")
    owner = workers(path)
    assert owner.expect("open")["role"] == "owner"
    owner.cmd(op="create", topic="t")
    owner.expect("created")
    clients = [workers(path) for _ in range(3)]
    for c in clients:
        assert c.expect("open")["role"] == "client"
    old = owner.proc.pid
    owner.kill()
    for c in clients:  # each is attached again: to itself or to the winner
        c.cmd(op="wait_new_owner", old=old, timeout=60)
    roles = [c.expect("role") for c in clients]
    winners = [i for i, e in enumerate(roles) if e["role"] == "owner"]
    assert len(winners) == 1, roles
    assert {e["owner_pid"] for e in roles} == {clients[winners[0]].proc.pid}
    assert [e["takeovers"] for e in roles].count(1) == 1 and sum(e["takeovers"] for e in roles) == 1
    offsets = []
    for i, c in enumerate(clients):
        c.cmd(op="send", topic="t", values=[f"from-{i}"])
        offsets += c.expect("acked")["offsets"]
    assert sorted(offsets) == [0, 1, 2]  # one log, one writer: the winner's broker
    with open(os.path.join(path, "pylog.owner")) as f:
        assert json.load(f)["pid"] == clients[winners[0]].proc.pid
    for i, c in enumerate(clients):  # the winner last: closing an owner hands the directory over again
        if i != winners[0]:
            c.close()
    clients[winners[0]].close()


def test_open_on_a_multi_broker_directory_raises_and_releases_the_directory(tmp_path) -> None:
    path = str(tmp_path / "c3")
    pylog.Cluster(path, brokers=3).close()
    for _ in range(2):  # the second attempt also becomes the would-be owner: the first one let go of the lock
        with pytest.raises(pylog.errors.InvalidConfigurationError, match="brokers"):
            pylog.open(path, open_timeout_ms=60_000)
    assert not os.path.exists(os.path.join(path, "pylog.owner"))



@pytest.mark.skipif(not hasattr(pylog.Cluster, "metrics"), reason="Cluster.metrics() not in this tree yet")
def test_metrics_of_a_client_come_from_the_owner_plus_its_own_clients(tmp_path) -> None:
    path = str(tmp_path / "q")
    a = pylog.open(path)
    b = pylog.open(path)
    try:
        a.create_topic("t")
        b.producer().send("t", b"v").result(30)
        ms = b.metrics()
        hw = [m for m in ms if m.name == "pylog_partition_high_watermark" and dict(m.labels).get("topic") == "t"]
        assert [m.value for m in hw] == [1]  # the owner's broker, asked over the socket
        assert any(m.name.startswith("pylog_producer") for m in ms)  # this process's producer
        assert not any(m.name.startswith("pylog_producer") for m in a.metrics())  # not the owner's
    finally:
        b.close()
        a.close()
