"""Every ```python block of README.md runs, twice in a row on the same directories, as a user would paste it.

Paths in the snippets (``/data/...``, ``/var/lib/myapp/...``) are moved under a temporary directory; each
block runs in its own interpreter with ``import pylog`` and a no-op ``handle`` defined. The Spark block
needs a SparkSession (``spark``) and Java: ``examples/spark_read.py`` is its runnable twin (test_examples).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _id(code: str) -> str:
    first = next(line for line in code.splitlines() if line.strip() and not line.startswith("import"))
    return re.sub(r"\W+", "_", first.split("#")[0].strip()).strip("_")[:40]


PYTHON_BLOCKS = [b for b in blocks() if "spark" not in b]


def test_readme_has_the_blocks_this_test_runs():
    assert len(blocks()) == len(PYTHON_BLOCKS) + 1  # + the Spark block (see the module docstring)
    assert len(PYTHON_BLOCKS) >= 4


@pytest.mark.parametrize("code", PYTHON_BLOCKS, ids=[_id(b) for b in PYTHON_BLOCKS])
def test_readme_block_runs_twice_on_the_same_directory(code, tmp_path):
    root = str(tmp_path)
    body = re.sub(r'"/(data|var/lib/myapp)/', lambda m: f'"{root}/{m.group(1).replace("/", "_")}/', code)
    assert body != code or "/data" not in code
    script = "import pylog\n\ndef handle(rec):\n    pass\n\n" + body
    for attempt in (1, 2):
        r = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"run {attempt} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
