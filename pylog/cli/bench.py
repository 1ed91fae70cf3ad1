"""``pylog bench``: runs ``benchmarks/compare.py`` from a source checkout.

Thread-safety: a command-line entry point; one thread.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any, Sequence

from pylog.cli.common import error


def cmd_bench(args: argparse.Namespace, extra: Sequence[str]) -> int:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # pylog/cli/ -> checkout
    script = os.path.join(here, "benchmarks", "compare.py")
    if not os.path.exists(script):
        error(
            f"{script} not found: `pylog bench` needs a source checkout of pylog "
            "(benchmarks/ is not part of an installed package)"
        )
        return 1
    return subprocess.call([sys.executable, script, *extra])


def add_parser(sub: Any) -> None:
    """Register the ``bench`` verb on the ``pylog`` command's subparsers."""
    sub.add_parser("bench", help="run benchmarks/compare.py (a source checkout only); other arguments go to it",
                   description="Run benchmarks/compare.py with the given arguments and print its ratio table.",
                   add_help=False)
