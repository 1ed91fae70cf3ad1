"""The controller's metadata persists incrementally (issue 18 item 4, issue 15): a snapshot
(``cluster-metadata.json``) plus one CRC-framed record per change appended to
``cluster-metadata.log``, every byte through the injected file layer.

A crash at any file operation of a change leaves either the state before it or after it
(a torn last record is ignored on load); a change that raised is never loaded later; a
compaction interrupted at any operation loses nothing.
"""
from __future__ import annotations

import os
import random
import sys

import pytest

from pylog.errors import CorruptCheckpointError, MetadataStorageError
from pylog.replication.controller import MetadataStore, TopicConfig, load_metadata, metadata_log_path
from pylog.replication.messages import PartitionState
from pylog.storage.fileio import FileIO, SimulatedDiskIO

BROKERS = [0, 1, 2]


def _store(path: str, io: FileIO) -> MetadataStore:
    return MetadataStore(BROKERS, random.Random(0), path=path, file_io=io)


def _states(topic: str, n: int, epoch: int = 0):
    return [PartitionState(topic, p, (0, 1, 2), p % 3, epoch, (0, 1, 2), epoch, 2) for p in range(n)]


def _snapshot(s: MetadataStore):
    return (s.controller_epoch, dict(s.topics), dict(s.partitions), dict(s.broker_incarnations),
            s.next_producer_id, {k: dict(v) for k, v in s.deleting.items()})


def _loaded(path: str):
    d = load_metadata(path, BROKERS)
    return (d.controller_epoch, d.topics, d.partitions, d.broker_incarnations, d.next_producer_id, d.deleting)


def _changes(s: MetadataStore):
    """A sequence of every kind of change; yields after each one."""
    s.try_claim(0, 0, 1000)
    yield
    s.create_topic(s.controller_epoch, TopicConfig("a", 4, 3, 2), _states("a", 4))
    yield
    s.register(1, 7)
    yield
    s.allocate_producer_ids(1000)
    yield
    st = s.partitions[("a", 2)]
    s.write(s.controller_epoch, PartitionState("a", 2, st.replicas, 0, st.leader_epoch + 1, (0, 2), st.partition_epoch + 1, 2))
    yield
    s.create_topic(s.controller_epoch, TopicConfig("b", 2, 3, 2), _states("b", 2))
    yield
    s.remove_topic("b", {1: [0, 1]})
    yield
    s.replica_deleted("b", 1, 0)
    yield
    cfg = s.topics["a"]
    s.replace_topic(TopicConfig("a", 4, 3, 2, False, {"retention_ms": 1000}))
    yield


def test_each_change_appends_one_record_and_a_reload_gives_the_same_state(tmp_path) -> None:
    path = str(tmp_path / "cluster-metadata.json")
    s = _store(path, FileIO())
    sizes = []
    for _ in _changes(s):
        assert _loaded(path) == _snapshot(s)
        sizes.append(os.path.getsize(metadata_log_path(path)) if os.path.exists(metadata_log_path(path)) else 0)
    # the first change writes the snapshot; every later one appends a record of its own size
    assert sizes[0] == 0 and all(b > a for a, b in zip(sizes[1:], sizes[2:]))
    snap = os.path.getsize(path)
    s.create_topic(s.controller_epoch, TopicConfig("big", 2000, 3, 2), _states("big", 2000))
    grown = os.path.getsize(metadata_log_path(path)) - sizes[-1]
    before = os.path.getsize(metadata_log_path(path))
    s.write(s.controller_epoch, PartitionState("big", 5, (0, 1, 2), 2, 1, (1, 2), 1, 2))
    assert os.path.getsize(metadata_log_path(path)) - before < 400  # one partition's record, not the state
    assert os.path.getsize(path) == snap and grown > 100_000  # the snapshot was not rewritten
    s.close()
    assert not os.path.exists(metadata_log_path(path)) and _loaded(path) == _snapshot(s)


def test_the_log_is_compacted_into_a_snapshot_once_it_outgrows_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(MetadataStore, "COMPACT_MIN_BYTES", 2_000)
    path = str(tmp_path / "cluster-metadata.json")
    s = _store(path, FileIO())
    list(_changes(s))
    for i in range(200):
        st = s.partitions[("a", 0)]
        s.write(s.controller_epoch, PartitionState("a", 0, st.replicas, 0, st.leader_epoch + 1, st.isr,
                                                   st.partition_epoch + 1, 2))
        assert os.path.getsize(metadata_log_path(path)) <= max(2_000, os.path.getsize(path)) + 400
    assert s.compactions >= 3
    assert _loaded(path) == _snapshot(s)


@pytest.mark.parametrize("seed", range(4))
def test_a_crash_at_any_file_operation_loses_no_returned_change_and_loads_no_failed_one(tmp_path, seed) -> None:
    """SimulatedDiskIO fails the Nth file operation (every N), then the machine loses power: the
    reloaded state is exactly the state after the last change that returned."""
    rnd = random.Random(seed)
    n = 1
    while True:
        d = tmp_path / f"n{n}"
        d.mkdir()
        path = str(d / "cluster-metadata.json")
        disk = SimulatedDiskIO()
        s = _store(path, disk)
        if seed % 2:  # half the runs compact often, so the failure also lands inside compactions
            s.COMPACT_MIN_BYTES = 300
        disk.arm(n, rnd.choice([5, 28]), count=None)  # EIO / ENOSPC from the Nth operation on
        durable = _snapshot(s)
        failed = False
        for _ in _changes_tolerant(s):
            if s.write_error is None:
                durable = _snapshot(s)
            else:
                failed = True
                break
        s.close()
        disk.crash()
        if os.path.exists(path):
            assert _loaded(path) == durable, f"fail at op {n}"
        else:
            assert durable == _snapshot(_store(str(d / "fresh.json"), FileIO())), f"fail at op {n}"
        if not failed:
            break
        n += 1
    assert n > 10  # the sweep went through every operation of the whole sequence


def _changes_tolerant(s: MetadataStore):
    """_changes, but a change that raises MetadataStorageError ends the sequence (it was not applied)."""
    gen = _changes(s)
    while True:
        try:
            next(gen)
        except StopIteration:
            return
        except MetadataStorageError:
            yield
            return
        yield


def test_a_torn_last_record_is_ignored_and_cut_before_the_next_append(tmp_path) -> None:
    path = str(tmp_path / "cluster-metadata.json")
    s = _store(path, FileIO())
    list(_changes(s))
    want = _snapshot(s)
    log = metadata_log_path(path)
    whole = open(log, "rb").read()
    for cut in (1, 9, len(whole.splitlines(keepends=True)[-1]) - 1):
        with open(log, "wb") as f:  # a crash in the middle of appending one more record
            f.write(whole + b'%08x {"next_producer_id": 99999}\n' % 0 if cut == 9 else whole + b"0badc0de {\"ne"[:cut])
        assert _loaded(path) == want
    s2 = _store(path, FileIO())
    assert _snapshot(s2) == want
    with open(log, "ab") as f:
        f.write(b"0badc0de {\"partial\": \"" + b"x" * 500)  # a long torn record: longer than the next one
    s2 = _store(path, FileIO())
    s2.allocate_producer_ids(5)
    assert _loaded(path) == _snapshot(s2)
    # the new record follows the valid prefix: the torn bytes were cut, not left behind it
    assert open(log, "rb").read().startswith(whole) and open(log, "rb").read().count(b"\n") == whole.count(b"\n") + 1
    assert open(log, "rb").read().endswith(b"\n")


def test_a_damaged_record_followed_by_valid_ones_is_refused_naming_the_log(tmp_path) -> None:
    path = str(tmp_path / "cluster-metadata.json")
    s = _store(path, FileIO())
    list(_changes(s))
    log = metadata_log_path(path)
    lines = open(log, "rb").read().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"1", b"2", 1) if b"1" in lines[1][9:] else b"x" + lines[1][1:]
    open(log, "wb").write(b"".join(lines))
    with pytest.raises(CorruptCheckpointError) as info:
        load_metadata(path, BROKERS)
    assert "cluster-metadata.log" in str(info.value)


def test_a_record_that_breaks_a_rule_is_refused_by_the_field_by_field_check(tmp_path) -> None:
    from pylog.replication.controller import _record_line

    path = str(tmp_path / "cluster-metadata.json")
    s = _store(path, FileIO())
    list(_changes(s))
    bad = {"partitions": [{"topic": "a", "partition": 1, "replicas": [0, 1, 2], "leader": 1, "leader_epoch": 3,
                           "isr": [0, 2], "partition_epoch": 3, "min_insync_replicas": 2}]}
    with open(metadata_log_path(path), "ab") as f:
        f.write(_record_line(bad))  # a CRC-valid record whose leader is outside its ISR
    with pytest.raises(CorruptCheckpointError) as info:
        load_metadata(path, BROKERS)
    assert "leader 1 is not in the ISR" in str(info.value) and "cluster-metadata.log" in str(info.value)


def test_persistence_goes_through_the_injected_file_layer_only(tmp_path, monkeypatch) -> None:
    """Every read and write of the store is an operation of its file layer (the fault harnesses see
    all of them): with plain ``open``/``os`` file calls forbidden, the store still works."""
    import builtins

    path = str(tmp_path / "cluster-metadata.json")
    disk = SimulatedDiskIO()
    disk.reset_ops()
    real_open = builtins.open

    def no_open(file, *a, **k):
        caller = sys._getframe(1).f_code.co_filename
        if str(file).startswith(str(tmp_path)) and not caller.endswith(os.path.join("storage", "fileio.py")):
            raise AssertionError(f"direct open of {file}")
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", no_open)
    s = _store(path, disk)
    list(_changes(s))
    s.close()
    s2 = _store(path, disk)
    monkeypatch.setattr(builtins, "open", real_open)
    assert _snapshot(s2) == _snapshot(s)
    kinds = {k for k, p in disk.op_log if "cluster-metadata" in p}
    assert {"pwrite", "fsync", "read_file"} <= kinds


def test_pylog_describe_shows_changes_still_in_the_delta_log(tmp_path, capsys) -> None:
    """A live cluster's latest changes are in the delta log until a compaction: the offline
    ``pylog describe`` reads the snapshot plus the log, not the snapshot alone."""
    from pylog import cli

    path = str(tmp_path / "cluster-metadata.json")
    s = _store(path, FileIO())
    list(_changes(s))
    st = s.partitions[("a", 1)]
    s.write(s.controller_epoch, PartitionState("a", 1, st.replicas, 2, 7, (2,), st.partition_epoch + 1, 1))
    assert os.path.getsize(metadata_log_path(path)) > 0  # not compacted: the change is in the log only
    assert cli.main(["describe", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Topic: a Partition: 1 Leader: 2 LeaderEpoch: 7 Replicas: 0,1,2 Isr: 2" in out
