"""``pylog sim``: a seeded fault simulation of a cluster (:mod:`pylog.simulation`), each invariant's
result, ``--plot`` draws the timeline.

The simulation (and matplotlib) are imported only when the verb runs: the other verbs load neither.

Thread-safety: a command-line entry point; one thread.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pylog.cli.common import error, positive_int
from pylog.errors import PylogError


MAX_PLOTTED_PARTITIONS = 8


def _duration_ms(text: str) -> int:
    """``60s``, ``1500ms``, ``2m`` or a bare number of seconds, as milliseconds."""
    t = text.strip().lower()
    try:
        if t.endswith("ms"):
            ms = float(t[:-2])
        elif t.endswith("s"):
            ms = float(t[:-1]) * 1000
        elif t.endswith("m"):
            ms = float(t[:-1]) * 60_000
        else:
            ms = float(t) * 1000
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 60s, 1500ms, 2m)") from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return int(ms)


def _rate(text: str) -> float:
    try:
        r = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a probability: {text!r}") from None
    if not 0.0 <= r <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is a probability per step in [0, 1], got {text!r}")
    return r


def _sim_replay(args: argparse.Namespace) -> str:
    parts = [
        "pylog sim", f"--brokers {args.brokers}", f"--topics {','.join(args.topics)}",
        f"--partitions {args.partitions}", f"--rf {args.rf}", f"--min-isr {args.min_isr}", f"--seed {args.seed}",
        f"--duration {args.duration}ms", f"--produce-rate {args.produce_rate:g}", f"--burst {args.burst}",
        f"--crash-rate {args.crash_rate:g}", f"--stop-rate {args.stop_rate:g}", f"--restart-rate {args.restart_rate:g}",
        f"--partition-rate {args.partition_rate:g}", f"--heal-rate {args.heal_rate:g}",
        f"--slow-rate {args.slow_rate:g}", f"--loss {args.loss:g}", f"--max-latency-ms {args.max_latency_ms}",
    ]
    if args.disk_fail_rate:
        parts.append(f"--disk-fail-rate {args.disk_fail_rate:g}")
    if args.metadata_fail_rate:
        parts.append(f"--metadata-fail-rate {args.metadata_fail_rate:g}")
    if args.inject_bug:
        parts.append(f"--inject-bug {args.inject_bug}")
    return " ".join(parts)


def cmd_sim(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from pylog.errors import InvalidConfigurationError
    from pylog.simulation import BUGS, INVARIANTS, SimConfig, Simulation, partition_sort_key, plot_trace

    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            error("pylog sim --plot needs matplotlib, which is not installed: "
                   "pip install 'pylog-kafka[plot]' (the plot extra), or pip install 'matplotlib>=3.8'")
            return 1
    topics = tuple(t for t in args.topics if t)
    cfg = SimConfig(
        seed=args.seed, brokers=args.brokers, topics=topics, partitions=args.partitions, rf=args.rf,
        min_isr=args.min_isr, duration_ms=args.duration, produce_rate=args.produce_rate, max_burst=args.burst,
        crash_rate=args.crash_rate, stop_rate=args.stop_rate, restart_rate=args.restart_rate,
        partition_rate=args.partition_rate, heal_rate=args.heal_rate, slow_rate=args.slow_rate, loss=args.loss,
        max_latency_ms=args.max_latency_ms, disk_fail_rate=args.disk_fail_rate,
        metadata_fail_rate=args.metadata_fail_rate,
    )
    try:
        cfg.validate()
        if args.inject_bug is not None and args.inject_bug not in BUGS:
            raise InvalidConfigurationError(f"unknown --inject-bug {args.inject_bug!r}; known: {', '.join(sorted(BUGS))}")
    except PylogError as exc:
        error(str(exc))
        return 2
    path = args.dir or tempfile.mkdtemp(prefix="pylog-sim-")
    if args.dir and os.path.exists(args.dir) and os.listdir(args.dir):
        error(f"{args.dir}: not empty (a simulation needs a new directory)")
        return 1
    assert cfg.duration_ms is not None  # the CLI always sets it (--duration has a default)
    print(f"pylog sim: seed {cfg.seed}, {cfg.brokers} brokers, {'topic' if len(topics) == 1 else 'topics'} "
          f"{','.join(topics)} with {cfg.partitions} partition{'' if cfg.partitions == 1 else 's'} each, "
          f"RF {cfg.rf}, min ISR {cfg.min_isr}, {cfg.duration_ms / 1000:.3f} s of virtual time")
    print(f"rates per step: produce {cfg.produce_rate:g} (bursts of 1-{cfg.max_burst}), crash {cfg.crash_rate:g}, "
          f"stop {cfg.stop_rate:g}, restart {cfg.restart_rate:g}, partition {cfg.partition_rate:g}, "
          f"heal {cfg.heal_rate:g}, slow {cfg.slow_rate:g}, disk failure {cfg.disk_fail_rate:g}, "
          f"metadata-write failure {cfg.metadata_fail_rate:g}; message loss {cfg.loss:g}, "
          f"latency 1-{cfg.max_latency_ms} ms" + (f"; INJECTED BUG: {args.inject_bug}" if args.inject_bug else ""))
    sys.stdout.flush()
    try:
        sim = Simulation(path, cfg, trace=True, sample_ms=args.sample_ms, bug=args.inject_bug)
        result = sim.run()
    except PylogError as exc:
        error(f"simulation stopped: {type(exc).__name__}: {exc}\nreplay: {_sim_replay(args)}")
        return 1
    except Exception:  # noqa: BLE001 - a crash of the simulated system is a finding: show it, then how to replay
        import traceback

        traceback.print_exc()
        error(f"the simulation crashed (traceback above)\nreplay: {_sim_replay(args)}")
        return 1
    finally:
        if not args.dir:
            shutil.rmtree(path, ignore_errors=True)
    st = result.stats
    trace = result.trace
    assert trace is not None
    print(f"ran {st['steps']} steps, {st['virtual_ms'] / 1000:.3f} s virtual: produced {st['produced']}, "
          f"acked {st['acked']}, crashes {st['crashes']}, clean stops {st['stops']}, restarts {st['restarts']}, "
          f"network partitions {st['partitions']}, heals {st['heals']}, slowed {st['slows']}, "
          f"leader changes {st['leader_changes']}")
    width = max(len(n) for n, _ in INVARIANTS)
    for name, what in INVARIANTS:
        v = result.violations.get(name)
        if v is None:
            print(f"PASS {name:<{width}}  {what}")
        else:
            print(f"FAIL {name:<{width}}  first violation: {v}")
    n_samples = sum(len(p.times) for p in trace.partitions.values())
    print(f"trace: {n_samples} samples of {len(trace.partitions)} partition(s), {len(trace.events)} events, "
          f"{len(trace.leader_changes)} leader changes, sha256 {trace.digest()[:16]}")
    if args.trace:
        with open(args.trace, "w", encoding="utf-8") as f:
            json.dump(trace.to_json(), f, sort_keys=True)
    if args.plot:
        failed = sorted(result.violations.values(), key=lambda v: v.t_ms)
        title = (f"pylog sim --seed {cfg.seed}: {cfg.brokers} brokers, RF {cfg.rf}, min ISR {cfg.min_isr} - "
                 + ("all invariants held" if result.ok else f"{len(failed)} invariant(s) FAILED"))
        chosen = args.plot_partition or sorted(trace.partitions, key=partition_sort_key)[:MAX_PLOTTED_PARTITIONS]
        if not args.plot_partition and len(trace.partitions) > MAX_PLOTTED_PARTITIONS:
            print(f"plot: drawing the first {MAX_PLOTTED_PARTITIONS} of {len(trace.partitions)} partitions "
                  "(choose others with --plot-partition)")
        try:
            drawn = plot_trace(trace, args.plot, partitions=chosen, title=title, violations=failed)
        except (OSError, PylogError) as exc:
            error(f"{args.plot}: cannot draw the plot: {exc}")
            return 1
        print(f"plot: {args.plot} ({', '.join(drawn)})")
    if result.ok:
        print(f"RESULT: PASS - all {len(INVARIANTS)} invariants held")
        return 0
    print(f"replay: {_sim_replay(args)}")
    print(f"RESULT: FAIL - {len(result.violations)} of {len(INVARIANTS)} invariants violated")
    return 1


def add_parser(sub: Any) -> None:
    """Register the ``sim`` verb on the ``pylog`` command's subparsers."""
    m = sub.add_parser("sim", help="run a seeded fault simulation of a cluster and check its invariants",
                       description="Run a seeded, virtual-time simulation of a cluster with crashes, clean stops, "
                                   "restarts, network partitions and slow brokers; print each invariant's result "
                                   "(exit 1 on any failure) and, with --plot, draw the replication timeline. "
                                   "Rates are probabilities per step; a step is one action followed by 5 ms - 2 s "
                                   "of virtual time.")
    m.add_argument("--brokers", type=positive_int, default=3, help="brokers in the cluster (default 3)")
    m.add_argument("--topics", type=lambda t: t.split(","), default=["sim"], help="comma-separated topic names (default: sim)")
    m.add_argument("--partitions", type=positive_int, default=1, help="partitions per topic (default 1)")
    m.add_argument("--rf", type=positive_int, default=3, help="replication factor (default 3)")
    m.add_argument("--min-isr", type=int, default=2, help="min.insync.replicas (default 2)")
    m.add_argument("--seed", type=int, default=0, help="the seed: same seed and options, same run (default 0)")
    m.add_argument("--duration", type=_duration_ms, default=60_000, help="virtual time to run: 60s (default), 1500ms, 2m")
    m.add_argument("--produce-rate", type=_rate, default=0.40, help="chance per step of a produce burst (0.40)")
    m.add_argument("--burst", type=positive_int, default=8, help="records per burst: 1..N (8)")
    m.add_argument("--crash-rate", type=_rate, default=0.105, help="chance per step of a hard crash (0.105)")
    m.add_argument("--stop-rate", type=_rate, default=0.045, help="chance per step of a clean stop (0.045)")
    m.add_argument("--restart-rate", type=_rate, default=0.15, help="chance per step of restarting a stopped broker (0.15)")
    m.add_argument("--partition-rate", type=_rate, default=0.08, help="chance per step of a network partition (0.08)")
    m.add_argument("--heal-rate", type=_rate, default=0.08, help="chance per step of healing the network (0.08)")
    m.add_argument("--slow-rate", type=_rate, default=0.04, help="chance per step of slowing a broker (0.04)")
    m.add_argument("--disk-fail-rate", type=_rate, default=0.0,
                   help="chance per step of a broker's disk failing every write until a restart step replaces it (0)")
    m.add_argument("--metadata-fail-rate", type=_rate, default=0.0,
                   help="chance per step of cluster-metadata.json writes starting to fail (ENOSPC), or working "
                        "again if they fail: the controller stops acting meanwhile (0)")
    m.add_argument("--loss", type=_rate, default=0.0, help="probability each message is lost (0)")
    m.add_argument("--max-latency-ms", type=positive_int, default=5, help="network latency is 1..N ms (5)")
    m.add_argument("--plot", metavar="FILE.png", default=None, help="draw the timeline (needs the plot extra: matplotlib)")
    m.add_argument("--plot-partition", action="append", metavar="TOPIC-P", default=[],
                   help="only draw this partition (repeatable; default: the first 8)")
    m.add_argument("--trace", metavar="FILE.json", default=None, help="write the recorded trace as JSON")
    m.add_argument("--sample-ms", type=positive_int, default=20, help="trace sampling interval in virtual ms (20)")
    m.add_argument("--dir", default=None, help="keep the cluster's files in DIR (new or empty; default: a temp dir, removed)")
    # Not imported from pylog.simulation (the other verbs need neither it nor matplotlib);
    # tests/unit/test_cli_sim.py keeps this list equal to pylog.simulation.BUGS.
    m.add_argument("--inject-bug", metavar="BUG", default=None,
                   help="test-only: switch on a known replication bug to see the checks catch it: "
                        "no-epoch-truncation (a follower skips the KIP-101 leader-epoch truncation) or "
                        "hw-ignores-followers (the leader advances the HW without waiting for the ISR)")
