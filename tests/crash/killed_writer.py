"""Run a writer script in a subprocess, read the lines it prints for each acknowledged write, and
SIGKILL it after ``lines`` of them (or when it stops printing): the shared half of the kill -9
tests in this directory."""
from __future__ import annotations

import signal
import subprocess
import sys
from typing import List, Sequence


def kill_after_lines(script: str, args: Sequence[str], lines: int) -> List[List[int]]:
    """Start ``python -c script *args``; return the integers of each stdout line read before the kill.

    Asserts the writer died of the SIGKILL (not of an error of its own; its stderr is shown)."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got: List[List[int]] = []
    try:
        assert proc.stdout is not None
        while len(got) < lines:
            line = proc.stdout.readline()
            if not line:
                break
            got.append([int(x) for x in line.split()])
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")[-2000:]
    return got
