"""Shared fixtures for the storage benchmarks (pytest-benchmark).

Run them with ``./dev bench`` or ``.venv/bin/python -m pytest benchmarks
--benchmark-only -q``. The default test run never collects this folder
(pyproject's ``testpaths`` is ``tests``).

Files named ``bench_*.py`` that define ``test_`` functions are collected
here (pytest's default pattern is ``test_*.py``); stand-alone scripts such as
``bench_spark.py`` are not. Each benchmark sets ``benchmark.extra_info["bytes"]`` (value
bytes handled per round) so MB/s can be read from the saved JSON; the end of
the run prints MB/s and records/s per benchmark as well.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from benchdata import build_log

_throughput: List[Tuple[str, float, float, float]] = []  # (name, bytes, records, best seconds)


def pytest_collect_file(file_path: Any, parent: Any) -> Any:
    """Collect ``bench_*.py`` files that hold pytest benchmarks (``def test_``); stand-alone scripts are left alone."""
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        if parent.session.isinitpath(file_path):
            return None  # named on the command line: pytest collects it itself (else it would run twice)
        if "\ndef test_" in file_path.read_text(encoding="utf-8"):
            return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def bench_root() -> Iterator[str]:
    """One temporary directory for the whole session (on the same disk as /tmp)."""
    root = tempfile.mkdtemp(prefix="pylog-bench-")
    yield root
    shutil.rmtree(root, ignore_errors=True)


_counter = [0]


@pytest.fixture
def new_log_path(bench_root: str) -> Iterator[Callable[[], str]]:
    """A factory of fresh ``<logdir>/bench-0`` paths; each gets its own log directory."""
    made: List[str] = []

    def make() -> str:
        _counter[0] += 1
        d = os.path.join(bench_root, f"d{_counter[0]}")
        os.makedirs(d)
        made.append(d)
        return os.path.join(d, "bench-0")

    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


_filled: Dict[Tuple[int, int, int, int], str] = {}


@pytest.fixture(scope="session")
def filled_log(bench_root: str) -> Callable[..., str]:
    """``filled_log(n, size, batch, segment_bytes=1 GiB)``: the path of a cleanly closed log, built once per session."""

    def get(n: int, size: int, batch: int, segment_bytes: int = 1 << 30) -> str:
        key = (n, size, batch, segment_bytes)
        if key not in _filled:
            path = os.path.join(bench_root, f"filled-{n}-{size}-{batch}-{segment_bytes}", "bench-0")
            build_log(path, n, size, batch, segment_bytes=segment_bytes)
            _filled[key] = path
        return _filled[key]

    return get


@pytest.fixture
def throughput(request: pytest.FixtureRequest, benchmark: Any) -> Iterator[Callable[[int, int], None]]:
    """Call ``throughput(bytes, records)`` in a benchmark: sets ``extra_info`` and reports MB/s at the end."""
    seen: Dict[str, int] = {}

    def note(nbytes: int, records: int) -> None:
        benchmark.extra_info["bytes"] = nbytes
        benchmark.extra_info["records"] = records
        seen["bytes"], seen["records"] = nbytes, records

    yield note
    stats = getattr(benchmark, "stats", None)
    if stats is not None and seen and getattr(stats, "stats", None) is not None:
        _throughput.append((request.node.name, seen["bytes"], seen["records"], stats.stats.min))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _throughput:
        return
    tr = terminalreporter
    tr.write_sep("-", "throughput (best round; bytes = value bytes handled per round)")
    width = max(len(n) for n, *_ in _throughput)
    tr.write_line(f"{'benchmark':<{width}}  {'best round':>12}  {'MB/s':>10}  {'records/s':>14}")
    for name, nbytes, records, best in _throughput:
        mbs = nbytes / best / 1e6 if best > 0 else float("inf")
        rps = f"{records / best:14,.0f}" if records and best > 0 else ""
        tr.write_line(f"{name:<{width}}  {best * 1e3:9.3f} ms  {mbs:10.1f}  {rps:>14}")
