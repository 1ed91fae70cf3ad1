"""``pylog serve DIR``: a cluster whose brokers speak the Kafka protocol, in the foreground.

Durability: SIGINT/SIGTERM stop every broker cleanly (logs flushed and closed).
Thread-safety: a command-line entry point; the main thread (it installs signal handlers).
"""
from __future__ import annotations

import argparse
from typing import Any

from pylog.cli.common import error, positive_int
from pylog.errors import PylogError


def cmd_serve(args: argparse.Namespace) -> int:
    """``pylog serve DIR``: a cluster whose brokers speak the Kafka protocol, in the foreground.

    Prints ``bootstrap_servers=HOST:PORT,...`` once the listeners are up, then
    serves until SIGINT or SIGTERM, which stop every broker cleanly (logs
    flushed and closed: nothing acknowledged is lost). docs/kafka-protocol.md.
    """
    import signal
    import threading

    from pylog.cluster import Cluster
    from pylog.errors import PylogError

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            cluster = Cluster(args.dir, brokers=args.brokers, listen=args.listen, num_partitions=args.partitions,
                              default_replication_factor=args.replication_factor)
        except PylogError as exc:
            error(f"pylog serve: {exc}")
            return 1
        try:
            print(f"bootstrap_servers={cluster.bootstrap_servers}", flush=True)
            while not stop.wait(0.2):
                pass
        finally:
            cluster.close()
        print("stopped cleanly", flush=True)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def add_parser(sub: Any) -> None:
    """Register the ``serve`` verb on the ``pylog`` command's subparsers."""
    sv = sub.add_parser("serve", help="run a cluster that speaks the Kafka protocol (foreground, Ctrl-C stops)",
                        description="Run a pylog cluster in DIR whose brokers listen for Kafka clients; prints the "
                        "bootstrap servers, stops cleanly on SIGINT/SIGTERM. No TLS/SASL: loopback by default.")
    sv.add_argument("dir", metavar="DIR")
    sv.add_argument("--brokers", type=positive_int, default=1, help="brokers (default 1)")
    sv.add_argument("--listen", default="127.0.0.1:9092",
                    help="HOST:PORT of broker 0; broker N listens on PORT+N; port 0 picks free ports "
                    "(default 127.0.0.1:9092)")
    sv.add_argument("--replication-factor", type=positive_int, default=None,
                    help="replication factor of topics created by clients (default min(3, brokers))")
    sv.add_argument("--partitions", type=positive_int, default=1,
                    help="partitions of auto-created topics (Kafka's num.partitions, default 1)")
