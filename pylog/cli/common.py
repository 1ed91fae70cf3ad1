"""Helpers every verb of the ``pylog`` command shares: error lines, byte display, argument types, directories.

Thread-safety: stateless functions.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from pylog.errors import PylogError
from pylog.storage.logdir import CLUSTER_METADATA_FILE as METADATA_FILE  # the name the verbs use
from pylog.storage.logdir import parse_partition_dir, partition_dirs


# --------------------------------------------------------------------------- helpers


def show_bytes(b: Optional[bytes]) -> str:
    """Bytes as UTF-8 text with escapes for what is not printable UTF-8; ``null`` for None."""
    if b is None:
        return "null"
    text = bytes(b).decode("utf-8", errors="backslashreplace")
    out = []
    for ch in text:
        if ch == "\\" or ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def base_offset_of(path: str) -> int:
    stem = os.path.basename(path).split(".", 1)[0]
    if not stem.isdigit():
        raise PylogError("not a segment file name (<20-digit base offset>.log/.index/.timeindex)")
    return int(stem)


def error(msg: str) -> None:
    print(f"ERROR: {msg}", file=sys.stderr, flush=True)


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return n


def partition_dirs_of(log_dir: str) -> List[str]:
    """The partitions of a log directory, or ``[log_dir]`` when it is one partition's directory."""
    if parse_partition_dir(log_dir) is not None and any(n.endswith(".log") for n in os.listdir(log_dir)):
        return [log_dir]
    return partition_dirs(log_dir)


def segment_logs(part_dir: str) -> List[str]:
    return sorted(
        os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(".log") and n[:-4].isdigit()
    )


def is_queue_dir(path: str) -> bool:
    """A directory made by ``pylog.open`` / ``Cluster`` (rather than one broker's log directory)."""
    return os.path.isfile(os.path.join(path, METADATA_FILE))


def open_queue(path: str) -> Optional[object]:
    """``pylog.open(path)`` (a client of the running owner, or the owner), or None after printing why not."""
    from pylog.local_queue import open as open_local_queue

    try:
        return open_local_queue(path)
    except (OSError, PylogError) as exc:
        error(f"{path}: {exc}")
        return None
