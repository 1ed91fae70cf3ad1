"""The pylog.testing pytest plugin as a user's suite gets it (issue 19, item 9): run in a subprocess pytest
through the installed entry point: seeds in the header and in failures with a replay command that replays,
the real-time fixture, and the broker-count and topic options."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys

pytest_plugins = ["pytester"]

SUITE = '''
import pytest

def test_fails_with_the_default_seed(pylog_cluster):
    assert pylog_cluster.seed == 0
    assert False, "boom"

@pytest.mark.pylog_seed(7)
def test_fails_with_a_marker_seed(pylog_cluster):
    assert pylog_cluster.seed == 7
    assert False, "bang"

@pytest.mark.pylog_seed(8)
def test_passes_with_a_marker_seed(pylog_cluster):
    assert pylog_cluster.seed == 8

def test_without_the_fixture_fails_without_a_seed():
    assert False
'''


def _run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_failures_print_their_seed_and_a_replay_command(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = _run(pytester, "--pylog-seed", "0")
    out = result.stdout.str()
    assert result.ret == 1
    assert "pylog: pylog_cluster simulations use seed 0 (--pylog-seed), except tests marked" in out
    assert re.search(r"pylog: seeds from @pytest.mark.pylog_seed: \S+::test_fails_with_a_marker_seed seed 7, "
                     r"\S+::test_passes_with_a_marker_seed seed 8", out)
    lines = [ln for ln in out.splitlines() if "seed " in ln and "; replay: " in ln]
    summary = [ln for ln in lines if ln.startswith("test_suite.py::")]
    assert summary == [
        "test_suite.py::test_fails_with_the_default_seed: seed 0; replay: "
        "python -m pytest test_suite.py::test_fails_with_the_default_seed --pylog-seed 0",
        "test_suite.py::test_fails_with_a_marker_seed: seed 7; replay: "
        "python -m pytest test_suite.py::test_fails_with_a_marker_seed",
    ]
    assert "----- pylog -----" in out or "- pylog -" in out  # the section in each failure's report
    assert "test_without_the_fixture_fails_without_a_seed: seed" not in out

    # The replay command replays: same test, same seed, same failure.
    cmd = shlex.split(summary[0].split("; replay: ", 1)[1])
    assert cmd[:3] == ["python", "-m", "pytest"]
    again = subprocess.run([sys.executable, *cmd[1:], "-p", "no:cacheprovider"], cwd=str(pytester.path),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "1 failed" in again.stdout and "AssertionError: boom" in again.stdout
    assert "seed 0; replay: " in again.stdout


def test_another_seed_on_the_command_line(pytester):
    pytester.makepyfile(test_suite='''
def test_seed(pylog_cluster):
    assert pylog_cluster.seed == 5
    assert False
''')
    result = _run(pytester, "--pylog-seed", "5")
    out = result.stdout.str()
    assert "pylog: pylog_cluster simulations use seed 5" in out
    assert "test_suite.py::test_seed: seed 5; replay: python -m pytest test_suite.py::test_seed --pylog-seed 5" in out


def test_realtime_fixture_and_cluster_options(pytester):
    pytester.makepyfile(test_suite='''
import pytest

def test_realtime(pylog_cluster_realtime):
    c = pylog_cluster_realtime
    assert not c.simulated and c.seed is None and sorted(c.brokers) == [0, 1, 2]
    c.create_topic("t")
    assert c.producer().send("t", b"x").result(timeout=30).offset == 0

@pytest.mark.pylog_cluster(brokers=1, topics={"orders": {"partitions": 3}, "audit": {}},
                           topic_defaults={"partitions": 2}, session_timeout_ms=1_500)
def test_options(pylog_cluster):
    assert sorted(pylog_cluster.brokers) == [0]
    assert len(pylog_cluster.describe("orders")) == 3 and len(pylog_cluster.describe("audit")) == 2
    assert pylog_cluster.describe("audit")[0].replicas == (0,)
    assert pylog_cluster.brokers[0].session_timeout_ms == 1_500

@pytest.mark.pylog_cluster(topics=["a", "b"])
def test_topic_names_with_the_command_line_broker_count(pylog_cluster_realtime):
    assert sorted(pylog_cluster_realtime.brokers) == [0, 1]
    assert [len(pylog_cluster_realtime.describe(t)) for t in ("a", "b")] == [1, 1]
    assert pylog_cluster_realtime.describe("a")[0].replicas.__len__() == 2

@pytest.mark.pylog_cluster(brokers=0)
def test_bad_broker_count(pylog_cluster):
    pass

@pytest.mark.pylog_cluster(topics="orders")
def test_bad_topics(pylog_cluster):
    pass
''')
    result = _run(pytester, "--pylog-brokers", "2", "-rfE")
    out = result.stdout.str()
    result.assert_outcomes(passed=2, errors=2, failed=1)
    assert "FAILED test_suite.py::test_realtime" in out  # --pylog-brokers 2 gave it 2 brokers, not 3
    assert "brokers must be a positive int, got 0" in out
    assert "topics must be a list of names or a dict" in out
