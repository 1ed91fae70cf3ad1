"""Kafka's checkpoint text format: exact bytes, round trips, damage, atomic replace."""
from __future__ import annotations

import errno
import os

import pytest

from pylog.errors import CorruptCheckpointError
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO, SimulatedDiskIO

io = FileIO()


def test_offset_checkpoint_exact_layout(tmp_path) -> None:
    """Version line, count line, then "topic partition offset" lines (Kafka's CheckpointFile)."""
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    checkpoint.write_offsets(io, path, {("orders", 1): 7, ("a.b_c-d", 0): 0, ("orders", 0): 123456789012})
    assert open(path, "rb").read() == b"0\n3\na.b_c-d 0 0\norders 0 123456789012\norders 1 7\n"
    assert not os.path.exists(path + ".tmp")


def test_empty_offset_checkpoint(tmp_path) -> None:
    path = str(tmp_path / "cp")
    checkpoint.write_offsets(io, path, {})
    assert open(path, "rb").read() == b"0\n0\n"
    assert checkpoint.read_offsets(io, path) == {}


def test_leader_epoch_checkpoint_exact_layout(tmp_path) -> None:
    """The real Kafka 2.7 file from the research notes (§2.12): b"0\\n1\\n0 38\\n"."""
    path = str(tmp_path / "leader-epoch-checkpoint")
    checkpoint.write_epochs(io, path, [(0, 38)])
    assert open(path, "rb").read() == b"0\n1\n0 38\n"
    checkpoint.write_epochs(io, path, [(0, 0), (3, 17), (9, 1 << 40)])
    assert open(path, "rb").read() == b"0\n3\n0 0\n3 17\n9 1099511627776\n"


def test_reads_a_file_written_by_kafka(tmp_path) -> None:
    path = str(tmp_path / "replication-offset-checkpoint")
    with open(path, "wb") as f:
        f.write(b"0\n3\n__consumer_offsets 29 0\nmyTopic 0 38\n__consumer_offsets 28 2\n")
    assert checkpoint.read_offsets(io, path) == {
        ("__consumer_offsets", 29): 0, ("myTopic", 0): 38, ("__consumer_offsets", 28): 2,
    }


@pytest.mark.parametrize("entries", [{}, {("t", 0): 0}, {("x" * 249, 2**31 - 1): 2**63 - 1, ("y", 5): 3}])
def test_offsets_round_trip(tmp_path, entries) -> None:
    path = str(tmp_path / "cp")
    checkpoint.write_offsets(io, path, entries)
    assert checkpoint.read_offsets(io, path) == entries


def test_epochs_round_trip(tmp_path) -> None:
    path = str(tmp_path / "leader-epoch-checkpoint")
    entries = [(e, e * 10) for e in range(50)]
    checkpoint.write_epochs(io, path, entries)
    assert checkpoint.read_epochs(io, path) == entries


def test_missing_file_is_empty(tmp_path) -> None:
    assert checkpoint.read_offsets(io, str(tmp_path / "nope")) == {}
    assert checkpoint.read_epochs(io, str(tmp_path / "nope")) == []


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "version line"),
        (b"0\n", "version line"),
        (b"1\n0\n", "version"),
        (b"0\nx\n", "count"),
        (b"0\n2\nt 0 1\n", "2 entries"),
        (b"0\n1\nt 0 1\nt 1 2\n", "1 entries"),
        (b"0\n1\nt 0\n", "3 fields"),
        (b"0\n1\nt zero 1\n", "partition"),
        (b"0\n1\nt 0 one\n", "offset"),
        (b"0\n-1\n", "-1"),
        (b"\xff\xfe\n0\n", "UTF-8"),
    ],
)
def test_damaged_offset_checkpoint_names_the_file(tmp_path, content: bytes, why: str) -> None:
    path = str(tmp_path / "log-start-offset-checkpoint")
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.read_offsets(io, path)
    assert info.value.path == path
    assert path in str(info.value) and why in str(info.value)


def test_damaged_epoch_checkpoint(tmp_path) -> None:
    path = str(tmp_path / "leader-epoch-checkpoint")
    for content in (b"0\n1\n3\n", b"0\n1\n3 x\n", b"0\n1\n3 4 5\n"):
        with open(path, "wb") as f:
            f.write(content)
        with pytest.raises(CorruptCheckpointError):
            checkpoint.read_epochs(io, path)


def test_replace_survives_power_loss_once_written(tmp_path) -> None:
    """After write_offsets returns, a crash keeps the new file (fsync + rename + dir fsync)."""
    disk = SimulatedDiskIO()
    path = str(tmp_path / "cp")
    checkpoint.write_offsets(disk, path, {("t", 0): 1})
    checkpoint.write_offsets(disk, path, {("t", 0): 2})
    disk.crash()
    assert checkpoint.read_offsets(FileIO(), path) == {("t", 0): 2}


def test_failed_replace_keeps_the_old_file(tmp_path) -> None:
    """An fsync failure while writing the temp file leaves the previous checkpoint in place."""
    path = str(tmp_path / "cp")
    checkpoint.write_offsets(io, path, {("t", 0): 1})
    disk = SimulatedDiskIO(fail_fsync_after=0, fail_errno=errno.EIO)
    with pytest.raises(OSError):
        checkpoint.write_offsets(disk, path, {("t", 0): 2})
    assert checkpoint.read_offsets(io, path) == {("t", 0): 1}
    disk.crash()
    assert checkpoint.read_offsets(io, path) == {("t", 0): 1}
