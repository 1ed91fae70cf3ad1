"""Kafka's checkpoint files: a version line, a count line, then one entry per line.

* offset checkpoints (``replication-offset-checkpoint``,
  ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``cleaner-offset-checkpoint``) hold ``topic partition offset`` lines;
* ``leader-epoch-checkpoint`` (one per partition directory) holds
  ``epoch startOffset`` lines.

Files are replaced atomically through :meth:`FileIO.write_file_atomic` (temp
file, fsync, rename, fsync of the directory), as Kafka's CheckpointFile does.

Durability: a write that returned survives power loss; a crash during a
write leaves the previous file. Thread-safety: functions are stateless;
callers serialise writers of the same file.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from pylog.errors import CorruptCheckpointError
from pylog.storage.fileio import FileIO

VERSION = 0
TopicPartition = Tuple[str, int]


def _parse(data: bytes, path: str, fields: int) -> List[List[str]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"checkpoint is not UTF-8 text: {exc}", path=path) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CorruptCheckpointError("checkpoint needs a version line and a count line", path=path)
    if lines[0].strip() != str(VERSION):
        raise CorruptCheckpointError(f"unsupported checkpoint version {lines[0]!r}", path=path)
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"bad entry count line {lines[1]!r}", path=path) from None
    entries = lines[2:]
    if count < 0 or count != len(entries):
        raise CorruptCheckpointError(f"count line says {count} entries but the file has {len(entries)}", path=path)
    out = []
    for n, line in enumerate(entries, start=3):
        parts = line.split(" ")
        if len(parts) != fields:
            raise CorruptCheckpointError(f"line {n}: expected {fields} fields, got {line!r}", path=path)
        out.append(parts)
    return out


def _int(value: str, path: str, what: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise CorruptCheckpointError(f"{what} {value!r} is not an integer", path=path) from None
    return v


def read_offsets(io: FileIO, path: str) -> Dict[TopicPartition, int]:
    """Read an offset checkpoint; a missing file is empty. Raises CorruptCheckpointError."""
    if not io.exists(path):
        return {}
    out: Dict[TopicPartition, int] = {}
    for topic, part, off in _parse(io.read_file(path), path, 3):
        out[(topic, _int(part, path, "partition"))] = _int(off, path, "offset")
    return out


def write_offsets(io: FileIO, path: str, offsets: Dict[TopicPartition, int]) -> None:
    """Atomically replace an offset checkpoint (entries sorted for stable files)."""
    lines = [str(VERSION), str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    io.write_file_atomic(path, ("\n".join(lines) + "\n").encode())


def read_epochs(io: FileIO, path: str) -> List[Tuple[int, int]]:
    """Read a leader-epoch-checkpoint as ``[(epoch, start_offset), ...]``."""
    if not io.exists(path):
        return []
    return [(_int(e, path, "epoch"), _int(o, path, "start offset")) for e, o in _parse(io.read_file(path), path, 2)]


def write_epochs(io: FileIO, path: str, entries: List[Tuple[int, int]]) -> None:
    lines = [str(VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    io.write_file_atomic(path, ("\n".join(lines) + "\n").encode())
