"""``pylog sim``: the seeded cluster simulation from the command line, run as ``python -m pylog`` subprocesses."""
from __future__ import annotations

import json
import os
import re
import shlex
import struct
import subprocess
import sys
from typing import Dict, Optional, Tuple

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.simulation import BUGS, INVARIANTS, Trace, _runs

SHORT = ["--duration", "15s"]
# Fault-heavy rates (they sum to 1): every run of a few seconds crashes, stops and partitions something.
FAULTY = ["--produce-rate", "0.3", "--crash-rate", "0.15", "--stop-rate", "0.1", "--restart-rate", "0.25",
          "--partition-rate", "0.1", "--heal-rate", "0.1"]


def run(*args: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", *args], capture_output=True, timeout=300, env=env, cwd=cwd)


def invariant_lines(out: str) -> Dict[str, str]:
    """{invariant: "PASS" | "FAIL"} from the report."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"(PASS|FAIL) (\S+)\s", line)
        if m:
            got[m.group(2)] = m.group(1)
    return got


def test_sim_help():
    r = run("sim", "--help", env=dict(os.environ, COLUMNS="1000"))  # one line per option: no wrapped names
    assert r.returncode == 0
    out = r.stdout.decode()
    assert "usage: pylog sim" in out and "--plot" in out and "--crash-rate" in out and "--inject-bug" in out
    assert all(bug in out for bug in BUGS)  # the help names every bug switch


def test_other_verbs_do_not_load_the_simulation():
    code = ("import sys; from pylog import cli; cli.build_parser(); "
            "print(sorted(m for m in ('pylog.simulation', 'matplotlib') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == b"[]"


def test_sim_passes_and_reports_every_invariant(tmp_path):
    r = run("sim", "--seed", "3", "--partitions", "2", *SHORT, *FAULTY, "--slow-rate", "0", "--dir", str(tmp_path / "c"))
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert invariant_lines(out) == {name: "PASS" for name, _ in INVARIANTS}
    assert f"RESULT: PASS - all {len(INVARIANTS)} invariants held" in out
    assert "replay:" not in out
    # The run really produced, acknowledged and failed things.
    m = re.search(r"produced (\d+), acked (\d+), crashes (\d+), clean stops (\d+), restarts (\d+), network partitions (\d+)",
                  out)
    assert m, out
    produced, acked, crashes, stops, restarts, partitions = map(int, m.groups())
    assert acked > 10 and acked <= produced
    assert crashes + stops >= 1 and restarts >= crashes + stops - 1 and partitions >= 1
    # --dir keeps the cluster's files: describe reads them.
    d = run("describe", str(tmp_path / "c"))
    assert d.returncode == 0 and b"Topic: sim Partition: 1" in d.stdout


def test_same_seed_same_report_and_trace_other_seed_differs(tmp_path):
    outs, traces = [], []
    for name, seed, hash_seed in (("a", "11", "1"), ("b", "11", "2"), ("c", "12", "1")):
        # Different string-hash seeds: nothing may depend on the iteration order of a set of strings.
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        r = run("sim", "--seed", seed, *SHORT, "--topics", "a,b", "--trace", str(tmp_path / f"{name}.json"), env=env)
        assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
        outs.append(r.stdout)
        traces.append((tmp_path / f"{name}.json").read_bytes())
    assert outs[0] == outs[1]
    assert traces[0] == traces[1]
    assert outs[0] != outs[2]
    assert traces[0] != traces[2]
    digest = re.search(rb"sha256 ([0-9a-f]{16})", outs[0]).group(1).decode()
    assert Trace.from_json(json.loads(traces[0])).digest().startswith(digest)


def _png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_writes_a_png_drawn_from_a_sound_trace(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    png, tr = tmp_path / "sim.png", tmp_path / "trace.json"
    r = run("sim", "--seed", "3", "--partitions", "2", "--duration", "20s", *FAULTY, "--slow-rate", "0",
            "--plot", str(png), "--trace", str(tr))
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert f"plot: {png} (sim-0, sim-1)" in out
    data = png.read_bytes()
    width, height = _png_size(data)
    assert len(data) > 30_000 and width >= 1000 and height >= 800  # two panels of lines, bands and labels
    trace = Trace.from_json(json.loads(tr.read_text()))
    assert sorted(trace.partitions) == ["sim-0", "sim-1"]
    bumps = 0
    for name, pt in trace.partitions.items():
        assert pt.times == sorted(set(pt.times)) and pt.times[-1] <= trace.end_ms
        assert len(pt.isr) == len(pt.leader) == len(pt.epoch) == len(pt.times)
        for r_ in pt.replicas:
            assert len(pt.leo[r_]) == len(pt.hw[r_]) == len(pt.times)
            prev_hw = None
            for leo, hw in zip(pt.leo[r_], pt.hw[r_]):
                if hw is None:  # broker down: the next incarnation starts from its checkpoint
                    assert leo is None
                    prev_hw = None
                    continue
                assert 0 <= hw <= leo
                assert prev_hw is None or hw >= prev_hw, f"{name} replica {r_}: HW line went down"
                prev_hw = hw
        for isr, leader in zip(pt.isr, pt.leader):
            assert set(isr) <= set(pt.replicas)
            assert leader < 0 or leader in isr
        bumps += sum(1 for a, b in zip(pt.epoch, pt.epoch[1:]) if b > a)
        assert pt.epoch == sorted(pt.epoch)  # leader epochs only grow
        # At the end every replica is up, in sync and holds the same log end.
        assert {pt.leo[r_][-1] for r_ in pt.replicas} == {pt.hw[pt.leader[-1]][-1]}
        assert sorted(pt.isr[-1]) == sorted(pt.replicas)
    # One leader-change marker per epoch bump, and the report counts the same.
    assert len(trace.leader_changes) == bumps >= 1
    assert f"leader changes {bumps}" in out
    # Fault events: every crash/stop is followed by a restart of that broker, and
    # while it is down the broker's replicas have no samples.
    down_since: Dict[int, Tuple[int, str]] = {}
    kinds = [ev["kind"] for ev in trace.events]
    assert "partition" in kinds and "crash" in kinds
    for ev in trace.events:
        if ev["kind"] in ("crash", "stop"):
            assert ev["broker"] not in down_since
            down_since[ev["broker"]] = (ev["t"], ev["kind"])
        elif ev["kind"] == "start":
            t0, kind = down_since.pop(ev["broker"])
            for pt in trace.partitions.values():
                leos = dict(zip(pt.times, pt.leo[ev["broker"]]))
                assert all(leo is None for t, leo in leos.items() if t0 < t < ev["t"])
                if kind == "crash":  # a crash is instant: the sample taken right after it shows the broker down
                    assert t0 in leos and leos[t0] is None
    assert not down_since


def test_plot_one_partition(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    png = tmp_path / "one.png"
    r = run("sim", "--seed", "4", "--partitions", "3", *SHORT, "--plot", str(png), "--plot-partition", "sim-2")
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert f"plot: {png} (sim-2)" in r.stdout.decode()
    _png_size(png.read_bytes())
    bad = run("sim", "--seed", "4", "--duration", "1s", "--plot", str(tmp_path / "x.png"), "--plot-partition", "nope-0")
    assert bad.returncode == 1 and b"no partition 'nope-0' in the trace" in bad.stderr
    many = run("sim", "--seed", "4", "--partitions", "10", "--duration", "1s", "--plot", str(tmp_path / "many.png"))
    out = many.stdout.decode()
    assert many.returncode == 0, out
    assert "drawing the first 8 of 10 partitions" in out
    assert f"({', '.join(f'sim-{p}' for p in range(8))})" in out  # numeric order: sim-10 is not among them
    nowhere = run("sim", "--seed", "4", "--duration", "1s", "--plot", str(tmp_path / "no" / "such" / "dir.png"))
    assert nowhere.returncode == 1 and b"cannot draw the plot" in nowhere.stderr and b"Traceback" not in nowhere.stderr


def test_plot_without_matplotlib_names_the_extra(tmp_path):
    fake = tmp_path / "nomatplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named matplotlib (test stand-in)')\n")
    env = dict(os.environ, PYTHONPATH=str(fake.parent))
    png = tmp_path / "x.png"
    r = run("sim", "--seed", "1", *SHORT, "--plot", str(png), env=env)
    err = r.stderr.decode()
    assert r.returncode == 1
    assert "matplotlib" in err and "pylog-kafka[plot]" in err and "Traceback" not in err
    assert not png.exists() and b"RESULT" not in r.stdout  # refused before simulating
    # Without --plot the same environment runs fine.
    assert run("sim", "--seed", "1", *SHORT, env=env).returncode == 0


def test_bad_arguments_are_usage_errors(capsys):
    from pylog.cli import main

    cases = (["--crash-rate", "0.9"], ["--duration", "soon"], ["--rf", "4"], ["--min-isr", "0"],
             ["--partition-rate", "1.5"], ["--rf", "1", "--min-isr", "1"],
             ["--partitions", "0"], ["--sample-ms", "0"], ["--inject-bug", "nonsense"])
    for args in cases:  # in-process: argparse exits 2, the verb's own checks return 2, before any simulation
        try:
            status = main(["sim", *args])
        except SystemExit as exc:
            status = exc.code
        err = capsys.readouterr().err
        assert status == 2, (args, err)
        assert "error" in err.lower() and "Traceback" not in err
    r = run("sim", "--crash-rate", "0.9")  # and the real command's exit status
    assert r.returncode == 2 and b"sum to at most 1" in r.stderr


@pytest.mark.parametrize("bug,invariant", [("no-epoch-truncation", "replicas-agree-below-hw"),
                                           ("hw-ignores-followers", None)])
def test_injected_bug_fails_with_a_replay_line(tmp_path, bug, invariant):
    for seed in range(1, 13):  # the first seed whose faults expose the bug
        r = run("sim", "--seed", str(seed), "--duration", "30s", "--inject-bug", bug)
        out = r.stdout.decode()
        if r.returncode != 0:
            break
        assert "RESULT: PASS" in out, out + r.stderr.decode()
    else:
        pytest.fail(f"no seed of 1..12 caught the injected bug {bug}")
    assert r.returncode == 1, out + r.stderr.decode()
    verdicts = invariant_lines(out)
    assert set(verdicts) == {name for name, _ in INVARIANTS}
    failed = [n for n, v in verdicts.items() if v == "FAIL"]
    assert failed and (invariant is None or invariant in failed)
    for name in failed:
        line = next(l for l in out.splitlines() if l.startswith(f"FAIL {name} "))
        assert f"first violation: seed {seed} step " in line and f"[{name}]" in line
    assert re.search(rf"RESULT: FAIL - \d+ of {len(INVARIANTS)} invariants violated", out)
    replay = next(l for l in out.splitlines() if l.startswith("replay: "))[len("replay: "):]
    assert f"--inject-bug {bug}" in replay and f"--seed {seed}" in replay
    # The replay line reproduces the same report.
    argv = shlex.split(replay)
    assert argv[:2] == ["pylog", "sim"]
    again = run(*argv[1:])
    assert again.returncode == 1 and again.stdout == r.stdout


def test_tracing_does_not_change_the_simulation(tmp_path):
    """The trace samples state between slices of virtual time; the run's choices stay the same.

    Each run gets a fresh process: a run's course must not depend on what an
    earlier run in the same process left on the heap.
    """
    code = ("import json, sys; from pylog.simulation import SimConfig, Simulation; "
            "r = Simulation(sys.argv[1], SimConfig(seed=21, duration_ms=20_000, partitions=2), "
            "trace=sys.argv[2] == 'trace').run(); print(json.dumps([r.ok, r.stats], sort_keys=True))")
    out = {}
    for mode in ("plain", "trace"):
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / mode), mode], capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr.decode()
        out[mode] = json.loads(r.stdout)
    assert out["plain"][0] and out["trace"][0]
    keys = ("crashes", "stops", "partitions", "acked", "produced", "steps", "virtual_ms")
    assert {k: out["plain"][1][k] for k in keys} == {k: out["trace"][1][k] for k in keys}
    assert out["plain"][1]["acked"] > 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.booleans()), min_size=1, max_size=40), st.integers(0, 100))
def test_band_runs_cover_exactly_the_true_samples(steps, tail):
    """The ISR/leader bands: each sample holds until the next one (the last until the end of the run)."""
    times, t = [], 0
    for dt, _ in steps:
        times.append(t)
        t += dt
    flags = [f for _, f in steps]
    end = times[-1] + tail
    runs = _runs(times, flags, end)
    covered = set()
    for start_s, width_s in runs:
        covered |= set(range(round(start_s * 1000), round((start_s + width_s) * 1000)))
    want = set()
    for i, (t0, f) in enumerate(zip(times, flags)):
        if f:
            want |= set(range(t0, times[i + 1] if i + 1 < len(times) else end))
    assert covered == want
    assert all(w >= 0 for _, w in runs)
    assert [s for s, _ in runs] == sorted(s for s, _ in runs)
