"""A process forked from one holding a log directory does not share it.

The LogDir registry is per process: a forked child inherits the parent's
registry in memory but not its fcntl lock (POSIX record locks belong to the
process), so the child must open the directory afresh and get
LogDirLockedError while the parent holds it; and what the child inherited
must not write the parent's checkpoints or clean-shutdown marker (it raises
LogDirLockedError instead). Real
processes (os.fork); the child reports through its exit status.
"""
from __future__ import annotations

import os
import sys
import traceback

import pytest

import pylog
from pylog.errors import LogDirLockedError
from pylog.storage.logdir import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(body) -> int:
    """Run ``body`` in a forked child; its exit status: 0 passed, 1 assertion failed, 2 other error."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 2
        try:
            body()
            code = 0
        except AssertionError:
            traceback.print_exc()
            code = 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"child ended by a signal: {status}"
    return os.WEXITSTATUS(status)


def test_forked_child_cannot_use_the_parents_log_dir_without_the_lock(tmp_path) -> None:
    parent = pylog.Log.open(str(tmp_path / "t-0"))
    parent.append([b"a", b"b"])
    try:
        def child() -> None:
            # Another partition of the same directory: before the fix the child shared the parent's
            # LogDir from the inherited registry and opened it without holding the lock.
            with pytest.raises(LogDirLockedError, match="locked by another process"):
                pylog.Log.open(str(tmp_path / "t-1"))
            # The child never became a writer of t-1.
            assert not os.path.exists(tmp_path / "t-1") or not os.listdir(tmp_path / "t-1")

        assert _in_child(child) == 0
        parent.append([b"c"])
        assert [r.value for r in parent.read(0)] == [b"a", b"b", b"c"]
    finally:
        parent.close()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)


def test_what_a_child_inherited_does_not_write_the_parents_dir_on_close(tmp_path) -> None:
    parent = pylog.Log.open(str(tmp_path / "t-0"))
    parent.append([b"a"])
    try:
        def child() -> None:
            # The inherited handle belongs to the parent: closing it in the child is refused with a
            # clear error instead of writing the parent's checkpoints and clean-shutdown marker.
            with pytest.raises(LogDirLockedError, match="parent of this forked process"):
                parent.close()

        assert _in_child(child) == 0
        assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)  # the parent still has the directory open
        assert not os.path.exists(tmp_path / RECOVERY_POINT_FILE)
        parent.append([b"b"])
        assert [r.value for r in parent.read(0)] == [b"a", b"b"]
        # And the parent still holds the lock: a second opener in another process is refused.
        assert _in_child(lambda: pytest.raises(LogDirLockedError, pylog.Log.open, str(tmp_path / "t-1"))) == 0
    finally:
        parent.close()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
