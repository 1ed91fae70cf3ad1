"""The log-dir lock, and read-only readers in another process while this one appends.

* a second writer - another Log on the same partition in this process, or
  another process opening the same log directory - gets LogDirLockedError;
* a ``read_only`` Log in another process, calling ``refresh()`` in a loop
  while this process appends (with rolls), only ever sees whole batches and
  a prefix of what was written: offsets dense from 0, every value exactly
  the one written at that offset, the log end never moving backwards.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

import pylog
from pylog.errors import LogDirLockedError


def _run(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_second_writer_in_the_same_process_is_refused(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    with pylog.Log.open(path) as log:
        log.append([b"a"])
        with pytest.raises(LogDirLockedError) as info:
            pylog.Log.open(path)
        assert "t-0" in str(info.value)
        # The refused open changed nothing, and the first writer still works.
        assert log.append([b"b"]).base_offset == 1
    with pylog.Log.open(path) as log:  # once closed, it can be opened again
        assert [r.value for r in log.read(0)] == [b"a", b"b"]


OPEN_IN_CHILD = """
    import sys, pylog
    from pylog.errors import LogDirLockedError
    try:
        pylog.Log.open(sys.argv[1])
    except LogDirLockedError as exc:
        print("LOCKED", exc)
        sys.exit(0)
    print("OPENED")
    sys.exit(1)
"""


@pytest.mark.parametrize("partition", ["t-0", "other-3"])
def test_second_writer_process_is_refused(tmp_path, partition: str) -> None:
    """The lock is on the log directory: any partition of it is refused to another process."""
    with pylog.Log.open(str(tmp_path / "t-0")) as log:
        log.append([b"a"])
        res = _run(OPEN_IN_CHILD, str(tmp_path / partition))
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.startswith("LOCKED") and str(tmp_path) in res.stdout
    # Released on close: now the other process may open it.
    res = _run(OPEN_IN_CHILD, str(tmp_path / partition))
    assert res.returncode == 1 and res.stdout.startswith("OPENED"), res.stdout + res.stderr


def test_lock_is_released_when_the_writer_process_dies(tmp_path) -> None:
    res = _run("""
        import os, signal, sys, pylog
        log = pylog.Log.open(sys.argv[1])
        log.append([b"x"])
        os.kill(os.getpid(), signal.SIGKILL)
    """, str(tmp_path / "t-0"))
    assert res.returncode == -9
    with pylog.Log.open(str(tmp_path / "t-0")) as log:
        assert not log.recovery.clean_shutdown
        assert [r.value for r in log.read(0)] == [b"x"]


READER = """
    import json, select, sys, pylog
    path = sys.argv[1]
    log = None
    seen_end, polls, max_batch, stop_at = 0, 0, 0, None
    while True:
        polls += 1
        if log is None:
            try:
                log = pylog.Log.open(path, read_only=True)
            except pylog.errors.KafkaStorageError:
                continue  # the writer has not created the directory yet
        else:
            log.refresh()
        end = log.log_end_offset
        assert end >= seen_end, ("log end went backwards", seen_end, end)
        offset = seen_end
        while offset < end:
            batches = log.read_batches(offset, 1 << 16)
            assert batches, ("no batch at", offset, end)
            for b in batches:
                recs = b.records()
                # A whole batch: its records are exactly base..last.
                assert [r.offset for r in recs] == list(range(b.base_offset, b.last_offset + 1)), b
                n = int(recs[0].key)
                assert len(recs) == n, ("partial batch", b.base_offset, len(recs), n)
                for r in recs:
                    if r.offset < offset:
                        continue
                    assert r.offset == offset, (r.offset, offset)
                    assert r.value == b"v%d:" % offset + b"." * (offset % 97), (offset, r.value[:30])
                    offset += 1
                max_batch = max(max_batch, n)
        if end != seen_end:
            print("end", end, flush=True)
        seen_end = end
        if stop_at is None and select.select([sys.stdin], [], [], 0)[0]:
            stop_at = int(sys.stdin.readline())
        if stop_at is not None and seen_end >= stop_at:
            break
    print("done", json.dumps({"polls": polls, "end": seen_end, "max_batch": max_batch}), flush=True)
"""


def test_read_only_reader_in_another_process_sees_only_whole_batches(tmp_path) -> None:
    """The writer keeps appending until the reader has observed 30 different log ends."""
    import selectors

    path = str(tmp_path / "t-0")
    rnd = random.Random(7)
    log = pylog.Log.open(path, segment_bytes=16 * 1024, index_interval_bytes=512)
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(READER), path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    assert reader.stdout is not None and reader.stdin is not None
    sel = selectors.DefaultSelector()
    sel.register(reader.stdout, selectors.EVENT_READ)
    ends_seen = set()
    try:
        while len(ends_seen) < 30 and reader.poll() is None:
            start = log.log_end_offset
            n = rnd.randint(1, 40)
            log.append([pylog.Record(value=b"v%d:" % (start + i) + b"." * ((start + i) % 97), key=b"%d" % n)
                        for i in range(n)])
            if rnd.random() < 0.05:
                log.flush()
            while sel.select(timeout=0):
                line = reader.stdout.readline()
                if not line:
                    break
                ends_seen.add(int(line.split()[1]))
        final = log.log_end_offset
        reader.stdin.write(f"{final}\n")
        reader.stdin.flush()
        out, err = reader.communicate(timeout=300)
    finally:
        if reader.poll() is None:
            reader.kill()
        log.close()
    assert reader.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1].split(" ", 1)[1])
    assert result["end"] == final
    assert len(ends_seen) >= 30  # it really read while the writer appended
    assert result["max_batch"] > 1
    assert len([n for n in os.listdir(path) if n.endswith(".log")]) > 1  # rolls happened meanwhile


def test_reader_of_a_missing_partition_gets_a_storage_error(tmp_path) -> None:
    with pytest.raises(pylog.errors.KafkaStorageError) as info:
        pylog.Log.open(str(tmp_path / "nope-0"), read_only=True)
    assert "nope-0" in str(info.value)
    assert not os.path.exists(tmp_path / "nope-0")


def test_read_only_log_refuses_writes_and_writes_nothing(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    with pylog.Log.open(path) as log:
        log.append([b"a", b"b"])
    before = {n: os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)}
    root_before = sorted(os.listdir(tmp_path))
    reader = pylog.Log.open(path, read_only=True)
    with pytest.raises(pylog.errors.KafkaStorageError):
        reader.append([b"c"])
    with pytest.raises(pylog.errors.KafkaStorageError):
        reader.truncate_to(0)
    assert [r.value for r in reader.read(0)] == [b"a", b"b"]
    reader.close()
    assert {n: os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)} == before
    assert sorted(os.listdir(tmp_path)) == root_before


RETENTION_READER = """
    import json, sys, pylog
    from pylog.errors import OffsetOutOfRangeError
    log = pylog.Log.open(sys.argv[1], read_only=True)
    reads = out_of_range = 0
    starts = set()
    for i in range(int(sys.argv[2])):
        log.refresh()
        start = log.log_start_offset
        starts.add(start)
        try:
            recs = list(log.read(start, 4096))
        except OffsetOutOfRangeError:
            out_of_range += 1  # the writer moved the log start since refresh(): allowed
            continue
        for r in recs:
            assert r.value == b"r%d" % r.offset, (r.offset, r.value)
        reads += 1
    print(json.dumps({"reads": reads, "starts": len(starts), "out_of_range": out_of_range}))
"""


def test_reader_survives_the_writer_deleting_segments(tmp_path) -> None:
    """refresh() while the writer deletes old segments (delete_records_before, retention):
    a segment that vanishes between listing and opening is skipped, not an error."""
    path = str(tmp_path / "t-0")
    log = pylog.Log.open(path, segment_bytes=2048, index_interval_bytes=256)
    log.append([b"r0"])
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(RETENTION_READER), path, "1500"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while reader.poll() is None:
            start = log.log_end_offset
            log.append([b"r%d" % (start + i) for i in range(5)])
            if log.log_end_offset % 50 < 5:
                log.delete_records_before(log.log_end_offset - 20)
        out, err = reader.communicate(timeout=300)
    finally:
        if reader.poll() is None:
            reader.kill()
        log.close()
    assert reader.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result["reads"] > 0
    assert result["starts"] > 1  # the log start really moved under the reader
