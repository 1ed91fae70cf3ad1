"""examples/durable_queue.py runs to completion and reports what it checked.

It starts a producer process (the directory's owner) and a consumer process
on one directory, SIGKILLs and restarts the consumer, SIGKILLs the producer,
and asserts itself that every acknowledged job is consumed and on disk; this
test checks its exit status and that each step really happened.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_durable_queue_example(tmp_path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    res = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "durable_queue.py")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    out = res.stdout
    killed = re.search(r"consumer killed \(SIGKILL\) after committing offset (\d+), having processed up to (\d+)", out)
    resumed = re.search(r"restarted consumer resumed at offset (\d+)", out)
    assert killed and resumed, out
    committed, processed, first = int(killed[1]), int(killed[2]), int(resumed[1])
    assert committed <= first <= processed + 1  # nothing committed comes again, nothing is skipped
    assert "producer (the owner) killed (SIGKILL)" in out
    assert "the consumer took the directory over" in out
    summary = re.search(r"all (\d+) acknowledged jobs are in the directory and were consumed", out)
    assert summary and int(summary[1]) >= 400, out
    assert os.listdir(tmp_path) == [], "the example left its directory behind"
