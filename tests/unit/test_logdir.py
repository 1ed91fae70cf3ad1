"""LogDir: the .lock, the clean-shutdown marker, root checkpoints, leftovers cleaned on open."""
from __future__ import annotations

import os

import pytest

import pylog
from pylog.errors import LogDirLockedError
from pylog.storage.logdir import CLEAN_SHUTDOWN_FILE, LOCK_FILE, LOG_START_FILE, RECOVERY_POINT_FILE, parse_partition_dir


def _read(path) -> str:
    with open(path) as f:
        return f.read()


def test_marker_absent_while_open_present_after_close(tmp_path) -> None:
    log = pylog.Log.open(str(tmp_path / "t-0"))
    assert os.path.exists(tmp_path / LOCK_FILE)
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    log.append([b"a", b"b"])
    log.close()
    assert _read(tmp_path / CLEAN_SHUTDOWN_FILE) == '{"version":0,"brokerEpoch":-1}'
    assert _read(tmp_path / RECOVERY_POINT_FILE) == "0\n1\nt 0 2\n"
    assert _read(tmp_path / LOG_START_FILE) == "0\n1\nt 0 0\n"
    log = pylog.Log.open(str(tmp_path / "t-0"))
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)  # removed again while a writer is open
    log.close()


def test_partitions_share_the_log_dir(tmp_path) -> None:
    a = pylog.Log.open(str(tmp_path / "a-0"))
    b = pylog.Log.open(str(tmp_path / "b-1"))
    a.append([b"x"])
    b.append([b"y", b"z"])
    a.close()
    # b still holds the directory: no marker yet, and a reopen of a works.
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    a = pylog.Log.open(str(tmp_path / "a-0"))
    with pytest.raises(LogDirLockedError):
        pylog.Log.open(str(tmp_path / "b-1"))
    a.close()
    b.close()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    assert _read(tmp_path / RECOVERY_POINT_FILE) == "0\n2\na 0 1\nb 1 2\n"


def test_one_crashed_partition_keeps_the_directory_unclean(tmp_path) -> None:
    """A partition that did not close cleanly is recovered on the next open, even
    when another partition of the directory was closed cleanly in between."""
    a = pylog.Log.open(str(tmp_path / "a-0"))
    b = pylog.Log.open(str(tmp_path / "b-0"))
    a.append([b"1"])
    b.append([b"2"])
    b.abandon()  # b "crashes"
    a.close()
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    # Open and cleanly close only a: b has still not been recovered.
    with pylog.Log.open(str(tmp_path / "a-0")) as a:
        assert not a.recovery.clean_shutdown
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    # The marker is per directory (Kafka's format): it comes back once one
    # writer session has recovered every partition of the directory.
    with pylog.Log.open(str(tmp_path / "b-0")) as b, pylog.Log.open(str(tmp_path / "a-0")) as a:
        assert not b.recovery.clean_shutdown and not a.recovery.clean_shutdown
        assert [r.value for r in b.read(0)] == [b"2"]
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    with pylog.Log.open(str(tmp_path / "b-0")) as b:
        assert b.recovery.clean_shutdown and b.recovery.segments_scanned == 0


def test_leftover_temp_and_orphan_files_are_removed(tmp_path) -> None:
    path = tmp_path / "t-0"
    with pylog.Log.open(str(path)) as log:
        log.append([b"a"])
    # (the .swap starts at the log end: a swap is complete by definition and is renamed into
    # place; one at a higher base would leave a hole, which the open refuses)
    leftovers = ["00000000000000000000.log.deleted", "00000000000000000005.log.cleaned",
                 "00000000000000000001.log.swap", "00000000000000000009.index",
                 "00000000000000000009.timeindex", "leader-epoch-checkpoint.tmp"]
    for n in leftovers:
        (path / n).write_bytes(b"junk")
    with pylog.Log.open(str(path)) as log:
        assert [r.value for r in log.read(0)] == [b"a"]
        names = set(os.listdir(path))
        assert not names & set(leftovers)
        assert "00000000000000000000.log" in names


def test_read_only_open_leaves_leftovers_and_lock_alone(tmp_path) -> None:
    path = tmp_path / "t-0"
    with pylog.Log.open(str(path)) as log:
        log.append([b"a"])
    (path / "00000000000000000009.index").write_bytes(b"junk")
    before = sorted(os.listdir(path)), sorted(os.listdir(tmp_path))
    with pylog.Log.open(str(path)) as writer:  # a reader can open while a writer holds the lock
        reader = pylog.Log.open(str(path), read_only=True)
        writer.append([b"b"])
        reader.refresh()
        assert [r.value for r in reader.read(0)] == [b"a", b"b"]
        reader.close()
    assert "00000000000000000009.index" not in os.listdir(path)  # the writer cleaned it, not the reader
    assert before[1] == sorted(os.listdir(tmp_path))


@pytest.mark.parametrize(
    "name, want",
    [("orders-0", ("orders", 0)), ("a-b-c-12", ("a-b-c", 12)), ("x-", None), ("-1", None),
     ("x-1a", None), ("x", None), ("__consumer_offsets-49", ("__consumer_offsets", 49))],
)
def test_parse_partition_dir(name: str, want) -> None:
    assert parse_partition_dir("/some/dir/" + name) == want
    assert parse_partition_dir("/some/dir/" + name + "/") == want


def test_partitions_opened_and_flushed_from_threads(tmp_path) -> None:
    """Logs of one directory used from several threads: opening a partition while
    another checkpoints must not break the shared checkpoint maps."""
    import threading

    errors: list = []

    def work(t: int) -> None:
        try:
            for k in range(15):
                with pylog.Log.open(str(tmp_path / f"p{t}-{k}"), recovery_checkpoint_interval_ms=0) as log:
                    log.append([b"x"])
                    log.flush()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    lines = _read(tmp_path / RECOVERY_POINT_FILE).splitlines()
    assert lines[:2] == ["0", "60"]
    assert sorted(lines[2:]) == sorted(f"p{t} {k} 1" for t in range(4) for k in range(15))


# --------------------------------------------------------------------------- discovery (list_log_dirs)


def test_discovery_one_rule_for_cluster_and_log_dirs(tmp_path) -> None:
    """A partition ``broker-0`` of a topic named ``broker`` is a partition, not a broker's log dir.

    The CLI's old rule (any ``broker-*`` folder is a broker) read this log
    directory as a cluster of one broker and missed ``orders-0``; the Spark
    source's rule (``broker-<id>`` holding no segment) did not. Both use
    :func:`list_log_dirs` now.
    """
    from pylog.storage.logdir import list_log_dirs, partition_dirs

    for tp in ("broker-0", "orders-0"):
        log = pylog.Log.open(str(tmp_path / tp))
        log.append([b"a"])
        log.close()
    os.mkdir(tmp_path / "broker-x")  # not broker-<id>: an ordinary folder
    os.mkdir(tmp_path / "orders-1.0a1b-delete")  # a deleted partition
    assert list_log_dirs(str(tmp_path)) == [(None, str(tmp_path))]
    assert partition_dirs(str(tmp_path)) == [str(tmp_path / "broker-0"), str(tmp_path / "orders-0")]

    cluster = tmp_path / "cluster"
    for b in (1, 0, 10):
        os.makedirs(cluster / f"broker-{b}" / "orders-0")
    os.mkdir(cluster / "broker-2x")
    assert list_log_dirs(str(cluster)) == [(0, str(cluster / "broker-0")), (1, str(cluster / "broker-1")),
                                           (10, str(cluster / "broker-10"))]
    with pytest.raises(FileNotFoundError):
        list_log_dirs(str(tmp_path / "missing"))
