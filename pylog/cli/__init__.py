"""The ``pylog`` command: inspect, verify, repair and use log directories.

Verbs (each has ``--help``), modelled on Kafka's tools, one module per verb family:

* ``dump-log FILE...`` - batches, records, index and time index entries (kafka-dump-log): :mod:`.dump`;
* ``verify DIR`` - CRC-check every batch and validate every index; ``--repair`` truncates as recovery
  does: :mod:`.verify`;
* ``describe DIR`` - offsets, sizes and epochs per partition; leader/replicas/ISR for a cluster dir;
  consumer-group lag: :mod:`.describe`;
* ``produce DIR --topic T`` / ``consume DIR --topic T`` - console producer and consumer: :mod:`.queue`;
* ``groups DIR`` - consumer groups and their offsets (kafka-consumer-groups): :mod:`.groups`;
* ``topics DIR`` - kafka-topics.sh: :mod:`.topics`;
* ``serve DIR`` - a cluster speaking the Kafka protocol: :mod:`.serve`;
* ``bench`` - runs ``benchmarks/compare.py`` from a checkout: :mod:`.bench`;
* ``sim`` - a seeded fault simulation of a cluster: each invariant's result, ``--plot`` draws the
  timeline: :mod:`.sim`.

Shared helpers live in :mod:`.common` and :mod:`.progress`. The package sits on the top floor
(docs/design.md): it may import every layer below; nothing in ``pylog`` imports it.

Exit status: 0 when everything was valid, 1 when damage or an error was found,
2 for bad usage. Corrupt input yields an error line naming the file and byte
position, never a traceback. See docs/cli.md.

Thread-safety: a command-line entry point; not meant to be called concurrently.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Dict, Optional, Sequence

from pylog._version import __version__
from pylog.cli import bench, describe, dump, groups, queue, serve, sim, topics, verify


def build_parser() -> argparse.ArgumentParser:
    """The ``pylog`` argument parser, verbs in the order ``--help`` lists them."""
    p = argparse.ArgumentParser(prog="pylog", description="Inspect, verify and use pylog log directories.")
    p.add_argument("--version", action="version", version=f"pylog {__version__} (distribution pylog-kafka)")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    serve.add_parser(sub)
    dump.add_parser(sub)
    verify.add_parser(sub)
    describe.add_parser(sub)
    queue.add_produce_parser(sub)
    queue.add_consume_parser(sub)
    groups.add_parser(sub)
    bench.add_parser(sub)
    sim.add_parser(sub)
    topics.add_parser(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``pylog`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        if argv[1:2] in (["-h"], ["--help"]):
            print("usage: pylog bench [compare.py arguments...]\n\n"
                  "Run benchmarks/compare.py from a source checkout with the given arguments.\n"
                  "See `python benchmarks/compare.py --help` for its options.")
            return 0
        return bench.cmd_bench(argparse.Namespace(), argv[1:])
    args = build_parser().parse_args(argv)
    handlers: Dict[str, Callable[[argparse.Namespace], int]] = {
        "dump-log": dump.cmd_dump_log, "verify": verify.cmd_verify, "describe": describe.cmd_describe,
        "produce": queue.cmd_produce, "consume": queue.cmd_consume, "sim": sim.cmd_sim, "groups": groups.cmd_groups,
        "serve": serve.cmd_serve, "topics": topics.cmd_topics}
    try:
        return handlers[args.verb](args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


__all__ = ["build_parser", "main"]
