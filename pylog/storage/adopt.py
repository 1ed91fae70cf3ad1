"""Adopting partition folders into a cluster directory that has no cluster metadata.

``pylog.Log.open("/data/orders-0")`` makes ``/data`` a Kafka log directory:
``/data/orders-0/`` holds the segments and ``/data`` the lock and checkpoint
files. ``pylog.open("/data")`` (or ``pylog.Cluster("/data")``) keeps its broker's
log directory in ``/data/broker-0`` and its topics in
``/data/cluster-metadata.json``. Opening such a directory that has partition
folders but no ``cluster-metadata.json`` adopts them, as a Kafka broker adopts
the partitions it finds in its ``log.dirs``, instead of starting an empty queue
beside the data:

1. the partition folders at the top (``/data/<topic>-<p>``, each holding a
   ``.log`` segment) are moved into ``/data/broker-0/`` (one ``rename`` each;
   the log-start offsets of ``/data/log-start-offset-checkpoint`` are merged into
   broker-0's first, so records deleted before stay deleted);
2. every partition folder in ``broker-0/`` becomes a topic of
   ``cluster-metadata.json`` (:meth:`pylog.Cluster` does this with
   :func:`partition_folders` and :func:`latest_epoch`): partitions ``0..max(p)``
   (missing ones start empty), replication factor 1 on broker 0, leader epoch one
   above the highest in the folder's ``leader-epoch-checkpoint``;
3. the top-level checkpoint files (which described the moved folders) are removed;
4. the first open recovers the moved partitions (a full scan: no recovery point
   is carried over), so a torn tail is truncated as after a crash.

A crash between the steps is safe: with no metadata written yet, the next open
adopts what is at the top and what already moved. A writer holding the
directory (an open ``Log``) makes the open fail with LogDirLockedError.

Complexity: O(partition folders) renames plus the recovery scan.
Durability: each rename is made durable (directory fsync) before the metadata
is written. Thread-safety: call before the cluster starts (one caller).
"""
from __future__ import annotations

import os
import re
from typing import Dict, Tuple

from pylog.errors import CorruptCheckpointError, InvalidConfigurationError
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO
from pylog.storage.logdir import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    broker_id_of,
    check_not_locked,
    parse_partition_dir,
)

TP = Tuple[str, int]
_SEGMENT = re.compile(r"^\d{20}\.log$")
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"


def partition_folders(log_dir: str) -> Dict[TP, str]:
    """``<topic>-<p>`` folders directly under ``log_dir`` that hold at least one segment file."""
    found: Dict[TP, str] = {}
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return found
    for name in names:
        path = os.path.join(log_dir, name)
        tp = parse_partition_dir(path)
        if tp is None or not os.path.isdir(path):
            continue
        try:
            if any(_SEGMENT.match(n) for n in os.listdir(path)):
                found[tp] = path
        except OSError:
            continue
    return found


def adoptable(path: str, metadata_file: str) -> bool:
    """True when ``path`` has no ``metadata_file`` but partition folders (at the top or in broker-0)."""
    if os.path.exists(os.path.join(path, metadata_file)):
        return False
    top = {tp for tp, p in partition_folders(path).items() if broker_id_of(path, os.path.basename(p)) is None}
    return bool(top) or bool(partition_folders(os.path.join(path, "broker-0")))


def move_into_broker(path: str, io: FileIO) -> None:
    """Step 1: move the top-level partition folders of ``path`` into ``path/broker-0``."""
    check_not_locked(path)  # an open Log (this process or another) is writing them
    broker_dir = os.path.join(path, "broker-0")
    check_not_locked(broker_dir)
    top = {tp: p for tp, p in partition_folders(path).items() if broker_id_of(path, os.path.basename(p)) is None}
    if not top:
        return
    os.makedirs(broker_dir, exist_ok=True)
    clash = sorted(f"{t}-{p}" for t, p in top if os.path.exists(os.path.join(broker_dir, f"{t}-{p}")))
    if clash:
        raise InvalidConfigurationError(
            f"{path}: cannot adopt partition folders {clash}: {broker_dir} already has folders of the same names")
    try:
        starts = checkpoint.read_offsets(io, os.path.join(path, LOG_START_FILE))
    except CorruptCheckpointError:
        starts = {}
    if any(tp in starts for tp in top):
        target = os.path.join(broker_dir, LOG_START_FILE)
        try:
            merged = checkpoint.read_offsets(io, target)
        except CorruptCheckpointError:
            merged = {}
        for tp in top:
            if tp in starts:
                merged[tp] = max(merged.get(tp, 0), starts[tp])
        checkpoint.write_offsets(io, target, merged)
    for (t, p), src in sorted(top.items()):
        os.rename(src, os.path.join(broker_dir, f"{t}-{p}"))
    io.fsync_dir(broker_dir)
    io.fsync_dir(path)


def latest_epoch(folder: str, io: FileIO) -> int:
    """The highest leader epoch in the folder's ``leader-epoch-checkpoint`` (-1: none or unreadable)."""
    try:
        entries = checkpoint.read_epochs(io, os.path.join(folder, LEADER_EPOCH_FILE))
    except CorruptCheckpointError:
        entries = []
    return max((e for e, _ in entries), default=-1)


def remove_top_checkpoints(path: str) -> None:
    """Step 3: once no partition folder is left at the top of ``path``, remove the checkpoint files
    that described the moved folders (a later Log.open of a same-named folder must not inherit them)."""
    if any(broker_id_of(path, os.path.basename(p)) is None for p in partition_folders(path).values()):
        return
    for name in (LOG_START_FILE, RECOVERY_POINT_FILE, CLEANER_OFFSET_FILE, CLEAN_SHUTDOWN_FILE):
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass


__all__ = ["adoptable", "move_into_broker", "partition_folders", "latest_epoch", "remove_top_checkpoints"]
