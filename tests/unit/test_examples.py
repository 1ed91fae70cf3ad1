"""Every script in examples/ runs to completion (exit code 0) as a user would run it."""
from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))


def _needs_spark(path: str) -> bool:
    with open(path) as f:
        return "pyspark" in f.read()


def test_there_are_examples() -> None:
    assert any(p.endswith("quickstart.py") for p in EXAMPLES)


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=[pytest.mark.spark] if _needs_spark(p) else [], id=os.path.basename(p)) for p in EXAMPLES],
)
def test_example_runs(path: str, tmp_path) -> None:
    if _needs_spark(path):
        if importlib.util.find_spec("pyspark") is None:
            pytest.skip("pyspark is not installed (pip install 'pylog-kafka[spark]')")
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            pytest.skip("Spark needs Java 17+ on PATH or JAVA_HOME")
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the examples' scratch directories go here
    res = subprocess.run([sys.executable, path], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{path} exited {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    with open(path) as f:
        doc = f.read()
    assert doc.lstrip().startswith(('"""', "'''", "#!")), f"{path} needs a docstring saying what it shows"
    if path.endswith("quickstart.py"):
        assert "acknowledged records are present" in res.stdout
        line = next(line for line in res.stdout.splitlines() if "acknowledged records are present" in line)
        assert line.startswith("all ")
    if path.endswith("consumer_groups.py"):
        assert res.stdout.rstrip().endswith("0 missing")
        # a joining member takes partitions only from others' revocations (cooperative-sticky)
        assert "bob: assigned [3, 4, 5]" in res.stdout and "alice: revoked  [3, 4, 5]" in res.stdout
