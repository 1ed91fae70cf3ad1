"""``pylog describe``: the open transactions, decoded from ``__transaction_state`` for a directory
(a closed cluster; a hand-written log) and asked of the running owner's coordinators when a process
owns the directory (real directories; a subprocess as the describing process)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any, Dict, List

import pytest

import pylog
from pylog import Log, Record
from pylog.cli import describe as describe_mod
from pylog.cli import main
from pylog.cluster import Cluster
from pylog.replication.txn_log import TransactionState, TxnLogValue, encode_key, encode_value

LINE = re.compile(r"^Transaction: (\S+) State: (\S+) ProducerId: (-?\d+) ProducerEpoch: (-?\d+) TimeoutMs: (\d+) "
                  r"StartTime: (\S+) Partitions: (\S+)$", re.M)


def describe(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", "describe", path, *args], capture_output=True, timeout=120)


def txn_rows(out: str) -> Dict[str, tuple]:
    return {m.group(1): (m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6), m.group(7))
            for m in LINE.finditer(out)}


def test_a_closed_cluster_directory_shows_only_its_open_transactions(tmp_path: Any) -> None:
    path = str(tmp_path / "cluster")
    with Cluster(path, brokers=3, seed=9) as c:
        c.create_topic("out", partitions=2, replication_factor=3, min_insync_replicas=2)
        c.create_topic("audit", partitions=1, replication_factor=3, min_insync_replicas=2)
        open_ = c.producer(transactional_id="open-1", transaction_timeout_ms=120_000)
        open_.init_transactions()
        open_.begin_transaction()
        open_.send("out", b"a", partition=0).result()
        open_.send("out", b"b", partition=1).result()
        other = c.producer(transactional_id="open-2")
        other.init_transactions()
        other.begin_transaction()
        other.send("audit", b"c", partition=0).result()
        done = c.producer(transactional_id="done")
        done.init_transactions()
        done.begin_transaction()
        done.send("out", b"d", partition=0).result()
        done.commit_transaction()
        idle = c.producer(transactional_id="idle")
        idle.init_transactions()
        expected = c.describe_transactions(["open-1", "open-2"])
        c.advance(1_000)  # the commit's markers and Complete record
        assert c.describe_transactions(["done"])["done"].state == "CompleteCommit"
    r = describe(path)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    rows = txn_rows(out)
    assert set(rows) == {"open-1", "open-2"}
    for tid, d in expected.items():
        parts = ",".join(f"{t}-{p}" for t, p in d.topic_partitions)
        assert rows[tid] == ("Ongoing", d.producer_id, d.producer_epoch, d.transaction_timeout_ms,
                             str(d.transaction_start_time_ms), parts)
    assert rows["open-1"][3] == 120_000 and rows["open-1"][5] == "out-0,out-1"
    r = describe(path, "--topic", "audit")  # only the transactions writing to audit
    assert r.returncode == 0 and set(txn_rows(r.stdout.decode())) == {"open-2"}


def write_state_log(path: str, records: List[tuple]) -> None:
    log = Log.open(path)
    try:
        for tid, value in records:
            log.append([Record(None if value is None else encode_value(value), key=encode_key(tid))])
        log.flush()
    finally:
        log.close()


def v(state: TransactionState, pid: int, partitions: frozenset = frozenset(), start: int = -1) -> TxnLogValue:
    return TxnLogValue(pid, 0, 60_000, state, partitions, 1000, start)


def test_a_log_directory_keeps_the_last_value_per_id(tmp_path: Any) -> None:
    """A lone ``__transaction_state-0`` log: later values win, a tombstone removes the id, the Prepare
    states are open, Empty and Complete ones are not."""
    part = str(tmp_path / "__transaction_state-0")
    write_state_log(part, [
        ("a", v(TransactionState.ONGOING, 1, frozenset({("t", 0)}), 500)),
        ("b", v(TransactionState.ONGOING, 2, frozenset({("t", 1)}), 600)),
        ("a", v(TransactionState.PREPARE_COMMIT, 1, frozenset({("t", 0), ("u", 3)}), 500)),
        ("c", v(TransactionState.ONGOING, 3, frozenset({("t", 2)}), 700)),
        ("c", None),  # tombstone
        ("d", v(TransactionState.PREPARE_ABORT, 4, frozenset({("u", 0)}), 800)),
        ("e", v(TransactionState.ONGOING, 5, frozenset({("t", 0)}), 900)),
        ("e", v(TransactionState.COMPLETE_ABORT, 5)),
        ("f", v(TransactionState.EMPTY, 6)),
    ])
    r = describe(str(tmp_path))
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert txn_rows(out) == {
        "a": ("PrepareCommit", 1, 0, 60_000, "500", "t-0,u-3"),
        "b": ("Ongoing", 2, 0, 60_000, "600", "t-1"),
        "d": ("PrepareAbort", 4, 0, 60_000, "800", "u-0"),
    }


def test_a_record_that_does_not_decode_is_named(tmp_path: Any) -> None:
    part = str(tmp_path / "__transaction_state-0")
    write_state_log(part, [("a", v(TransactionState.ONGOING, 1, frozenset({("t", 0)}), 5))])
    log = Log.open(part)
    log.append([Record(b"\x00\x01garbage", key=encode_key("b"))])
    log.flush()
    log.close()
    r = describe(str(tmp_path))
    err = r.stderr.decode()
    assert r.returncode == 1
    assert "__transaction_state-0 offset 1" in err and "open transactions" in err


def test_a_running_owner_is_asked(tmp_path: Any, capsys: Any, monkeypatch: Any) -> None:
    """A process owns the queue directory: its coordinator answers (the describing process is a client).
    In process with the directory reader disabled (so the lines can only come from the owner), then
    from a separate process."""
    path = str(tmp_path / "queue")
    q = pylog.open(path)
    try:
        assert q.role == "owner"
        q.create_topic("jobs", partitions=2)
        p = q.producer(transactional_id="worker-1", transaction_timeout_ms=90_000)
        p.init_transactions()
        p.begin_transaction()
        p.send("jobs", b"j", partition=1).result()
        d = q.describe_transactions(["worker-1"])["worker-1"]

        def no_disk(*args: Any) -> Any:
            raise AssertionError("read the directory although an owner runs")

        with monkeypatch.context() as m:
            m.setattr(describe_mod, "_logged_open_transactions", no_disk)
            assert main(["describe", path]) == 0
        rows = txn_rows(capsys.readouterr().out)
        want = ("Ongoing", d.producer_id, d.producer_epoch, 90_000, str(d.transaction_start_time_ms), "jobs-1")
        assert rows == {"worker-1": want}
        r = describe(path)
        assert r.returncode == 0, r.stderr.decode()
        assert txn_rows(r.stdout.decode()) == {"worker-1": want}
        p.commit_transaction()
        for _ in range(50):
            if q.describe_transactions(["worker-1"])["worker-1"].state == "CompleteCommit":
                break
            q.advance(100)
        r = describe(path)
        assert r.returncode == 0 and txn_rows(r.stdout.decode()) == {}
        p.close()
    finally:
        q.close()
    assert not describe_mod.running_owner(path)  # closed: the next describe reads the directory
