"""``pylog topics DIR``: kafka-topics.sh on a queue or cluster directory (see docs/topics.md).

One action per call, as kafka-topics.sh: ``--list``, ``--describe``,
``--create``, ``--delete``, ``--alter``, with ``--topic``, ``--partitions``,
``--replication-factor``, ``--config k=v`` (repeatable; Kafka's dotted names or
snake_case), ``--include-internal`` (``__consumer_offsets`` and friends are
hidden otherwise), ``--if-not-exists`` / ``--if-exists``.

DIR is a directory made by ``pylog.open`` (the call goes through the process
that owns it, if one is running) or by ``pylog.Cluster(DIR, brokers=N)`` (the
cluster is opened here: no other process may have it open). ``--create`` on a
new directory makes a queue directory there; the other actions refuse a
directory that is neither (a log directory's partition folders are adopted,
see pylog/storage/adopt.py).

Exit status: 0 done, 1 refused or failed (the message names the topic and the
reason), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Dict, List, Optional

from pylog.cli.common import error
from pylog.errors import PylogError

_INTERNAL = ("__consumer_offsets", "__transaction_state")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``topics`` verb on the ``pylog`` command's subparsers."""
    t = sub.add_parser("topics", help="list, describe, create, delete and alter topics (like kafka-topics.sh)",
                       description="Like kafka-topics.sh, on a queue/cluster directory (made by pylog.open or "
                                   "pylog.Cluster): exactly one of --list, --describe, --create, --delete, --alter.")
    t.add_argument("dir", metavar="DIR")
    act = t.add_mutually_exclusive_group(required=True)
    act.add_argument("--list", action="store_true", help="print the topic names")
    act.add_argument("--describe", action="store_true",
                     help="partition count, replication factor, configs set on the topic, and per partition leader, "
                          "replicas and ISR (every topic, or --topic)")
    act.add_argument("--create", action="store_true", help="create --topic (--partitions, --replication-factor, --config)")
    act.add_argument("--delete", action="store_true", help="delete --topic and its data")
    act.add_argument("--alter", action="store_true",
                     help="raise the partition count of --topic to --partitions and/or set --config k=v")
    t.add_argument("--topic", default=None)
    t.add_argument("--partitions", type=int, default=None, help="--create: partitions (default 1); --alter: new total")
    t.add_argument("--replication-factor", type=int, default=None, help="--create: replicas per partition "
                                                                          "(default min(3, brokers))")
    t.add_argument("--config", action="append", default=[], metavar="K=V",
                   help="a topic config (retention.ms=60000, cleanup.policy=compact, ...); repeatable")
    t.add_argument("--delete-config", action="append", default=[], metavar="K",
                   help="--alter: remove a config override (back to the default); repeatable")
    t.add_argument("--include-internal", action="store_true", help="--list/--describe: show internal topics too")
    t.add_argument("--if-not-exists", action="store_true", help="--create: do nothing if the topic exists")
    t.add_argument("--if-exists", action="store_true", help="--delete/--alter: do nothing if the topic does not exist")
    return t


def _configs(pairs: List[str]) -> Optional[Dict[str, str]]:
    out: Dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            error(f"--config {pair!r}: expected KEY=VALUE")
            return None
        out[key.strip()] = value
    return out


def _open(path: str, create: bool) -> Any:
    """The directory's cluster: ``pylog.open`` (a 1-broker queue) or ``pylog.Cluster`` (more brokers)."""
    from pylog.cluster import METADATA_FILE, Cluster
    from pylog.shared import SharedCluster  # what pylog.open(path) returns
    from pylog.storage import adopt

    meta = os.path.join(path, METADATA_FILE)
    if os.path.isfile(meta):
        try:
            with open(meta, "rb") as f:
                brokers = json.loads(f.read().decode("utf-8")).get("brokers", [0])
        except (OSError, ValueError) as exc:
            raise PylogError(f"{meta}: unreadable cluster metadata: {exc}") from None
        if len(brokers) > 1:
            return Cluster(path, brokers=len(brokers))
        return SharedCluster(path)
    if not create and not (os.path.isdir(path) and adopt.adoptable(path, METADATA_FILE)):
        raise PylogError(f"{path} is not a pylog queue or cluster directory (no {METADATA_FILE}); "
                         "create a topic there with --create first")
    return SharedCluster(path)


def _describe(q: Any, name: str) -> List[str]:
    rows = q.describe(name)
    cfg = q.store.topics.get(name)
    overrides: Dict[str, object] = dict(cfg.configs) if cfg is not None else {}
    if cfg is not None and cfg.min_insync_replicas != 1:
        overrides["min_insync_replicas"] = cfg.min_insync_replicas
    if cfg is not None and cfg.unclean_leader_election:
        overrides["unclean_leader_election"] = True
    from pylog.replication.topic_configs import kafka_name

    text = ",".join(f"{kafka_name(k)}={_value(v)}" for k, v in sorted(overrides.items()))
    rf = len(rows[0].replicas) if rows else 0
    lines = [f"Topic: {name}\tPartitionCount: {len(rows)}\tReplicationFactor: {rf}\tConfigs: {text}"]
    for r in rows:
        leader = r.leader if r.leader >= 0 else "none"
        lines.append(f"\tTopic: {name}\tPartition: {r.partition}\tLeader: {leader}\t"
                     f"Replicas: {','.join(map(str, r.replicas))}\tIsr: {','.join(map(str, r.isr))}")
    return lines


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


def cmd_topics(args: argparse.Namespace) -> int:
    """Run one ``pylog topics`` action; returns the exit status."""
    needs_topic = args.create or args.delete or args.alter
    if needs_topic and not args.topic:
        error("--create, --delete and --alter need --topic")
        return 2
    configs = _configs(args.config)
    if configs is None:
        return 2
    if args.alter and args.partitions is None and not configs and not args.delete_config:
        error("--alter needs --partitions N and/or --config K=V / --delete-config K")
        return 2
    if (configs or args.delete_config) and not (args.create or args.alter):
        error("--config and --delete-config go with --create or --alter")
        return 2
    if args.delete_config and not args.alter:
        error("--delete-config goes with --alter")
        return 2
    try:
        q = _open(args.dir, create=args.create)
    except (OSError, PylogError) as exc:
        error(f"{args.dir}: {exc}")
        return 1
    try:
        if args.list:
            for name in q.list_topics(include_internal=args.include_internal):
                if args.topic is None or name == args.topic:
                    print(name)
        elif args.describe:
            names = [args.topic] if args.topic else q.list_topics(include_internal=args.include_internal)
            for name in names:
                print("\n".join(_describe(q, name)))
        elif args.create:
            if args.if_not_exists and args.topic in q.list_topics(include_internal=True):
                return 0
            q.create_topic(args.topic, partitions=1 if args.partitions is None else args.partitions,
                           replication_factor=args.replication_factor, config=configs or None)
            print(f"Created topic {args.topic}.")
        elif args.delete:
            if args.if_exists and args.topic not in q.list_topics(include_internal=True):
                return 0
            q.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        else:  # alter
            if args.if_exists and args.topic not in q.list_topics(include_internal=True):
                return 0
            if args.partitions is not None:
                q.create_partitions(args.topic, args.partitions)
                print(f"Topic {args.topic} now has {args.partitions} partitions.")
            changes: Dict[str, Any] = dict(configs)
            changes.update({k: None for k in args.delete_config})
            if changes:
                q.alter_topic_config(args.topic, changes)
                print(f"Altered the configs of topic {args.topic}: "
                      + ", ".join(f"{k}={'(default)' if v is None else v}" for k, v in changes.items()))
    except (OSError, PylogError) as exc:
        error(f"{args.dir}: {exc}")
        return 1
    finally:
        q.close()
    return 0


__all__ = ["add_parser", "cmd_topics"]
