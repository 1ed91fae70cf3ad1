"""``pylog produce`` / ``pylog consume``: the console producer and consumer (kafka-console-producer/-consumer),
on a log directory (appended/read in place) or on a queue/cluster directory (through a client).

Durability: on a log directory ``produce`` closes the log cleanly (fsynced) before it exits; on a queue
directory what ``--acks`` promises.
Thread-safety: a command-line entry point; one thread.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from pylog.cli.common import error, is_queue_dir, open_queue
from pylog.cli.progress import Progress, progress_enabled
from pylog.errors import PylogError
from pylog.storage.log import Log
from pylog.storage.logdir import parse_partition_dir
from pylog.record import Record


PRODUCER_PROPERTIES = {"parse.key": "false", "key.separator": "\t"}
CONSUMER_PROPERTIES = {"print.timestamp": "false", "print.key": "false", "print.value": "true",
                       "print.offset": "false", "print.partition": "false", "print.headers": "false",
                       "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
                       "null.literal": "null"}
_BOOLEAN_PROPERTIES = {"parse.key", "print.timestamp", "print.key", "print.value", "print.offset",
                       "print.partition", "print.headers"}


def parse_properties(items: Sequence[str], known: Dict[str, str], verb: str) -> Dict[str, str]:
    """``--property NAME=VALUE`` arguments (kafka-console-producer/consumer's) over the defaults in ``known``.

    Separator values take ``\\t``, ``\\n`` and ``\\\\`` escapes (a shell passes ``"\\t"`` as two
    characters). Raises :class:`~pylog.errors.InvalidConfigurationError` for an item without ``=``, an
    unknown name (the message lists the known ones) or a boolean that is not true/false.
    """
    from pylog.errors import InvalidConfigurationError

    props = dict(known)
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq:
            raise InvalidConfigurationError(f"--property {item!r}: expected NAME=VALUE")
        if name not in known:
            raise InvalidConfigurationError(
                f"--property {name!r} is not a {verb} property; known: {', '.join(sorted(known))}")
        if name in _BOOLEAN_PROPERTIES:
            if value.strip().lower() not in ("true", "false"):
                raise InvalidConfigurationError(f"--property {name}={value!r}: expected true or false")
            value = value.strip().lower()
        else:
            value = value.replace("\\\\", "\0").replace("\\t", "\t").replace("\\n", "\n").replace("\0", "\\")
        props[name] = value
    return props


def _stdin_records(sep: Optional[bytes]) -> Iterator[Record]:
    """Records from stdin lines; with ``sep`` the key is what comes before its first occurrence (a line
    without it has a null key, as kafka-console-producer's ``parse.key`` would refuse: we keep the line)."""
    for raw in sys.stdin.buffer:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        key = None
        if sep is not None and sep in line:
            key, line = line.split(sep, 1)
        yield Record(line, key=key)


def _stdin_progress(args: argparse.Namespace) -> Progress:
    """A bar over stdin's bytes when stdin is a regular file (``< file``), else a count with a rate."""
    try:
        st = os.fstat(sys.stdin.fileno())
        import stat

        total = st.st_size if stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError, AttributeError):
        total = None
    return Progress(total, progress_enabled(args), unit="B" if total is not None else " records")


def _produce_separator(args: argparse.Namespace) -> Tuple[Optional[bytes], Dict[str, str]]:
    """The key separator (None: values only) from ``--key-separator`` or ``--property parse.key=true``."""
    props = parse_properties(args.property or (), PRODUCER_PROPERTIES, "producer")
    if args.key_separator is not None:
        return args.key_separator.encode(), props
    if props["parse.key"] == "true":
        if not props["key.separator"]:
            from pylog.errors import InvalidConfigurationError

            raise InvalidConfigurationError("--property key.separator must not be empty")
        return props["key.separator"].encode(), props
    return None, props


def _where(partitions: Dict[int, List[int]], topic: str) -> str:
    """``t-0 (offsets 0..4), t-1 (offsets 0..2)``."""
    return ", ".join(f"{topic}-{p} (offsets {o[0]}..{o[-1]})" if o else f"{topic}-{p}"
                     for p, o in sorted(partitions.items()))


def _produce_to_queue(args: argparse.Namespace, sep: Optional[bytes]) -> int:
    """``pylog produce`` on a queue directory: a producer of ``pylog.open(DIR)`` (its partitioner picks
    the partition from the key unless ``--partition`` is given)."""
    q: Any = open_queue(args.dir)
    if q is None:
        return 1
    n = 0
    done: Dict[int, List[int]] = {}
    progress = _stdin_progress(args)
    try:
        with q.producer(acks=args.acks if args.acks == "all" else int(args.acks)) as prod:
            futures = []
            for r in _stdin_records(sep):
                futures.append(prod.send(args.topic, r.value, key=r.key, partition=args.partition))
                progress.advance(len(r.value or b"") + len(r.key or b"") + 1 if progress.unit == "B" else 1)
            prod.flush()
            for f in futures:
                meta = f.result()
                done.setdefault(meta.partition, [])
                if args.acks != "0":
                    done[meta.partition].append(meta.offset)
            n = len(futures)
    except (OSError, PylogError) as exc:
        progress.finish()
        where = args.topic if args.partition is None else f"{args.topic}-{args.partition}"
        error(f"{args.dir}: {where}: {exc}")
        return 1
    finally:
        q.close()
    progress.finish(complete=True)
    print(f"Produced {n} records to {_where(done, args.topic) or args.topic}", file=sys.stderr)
    return 0


def _topic_partitions(log_dir: str, topic: str) -> List[int]:
    """Partition numbers of ``topic`` in a log directory (its ``<topic>-<n>`` folders), sorted."""
    out = []
    try:
        names = os.listdir(log_dir)
    except OSError:
        return []
    for n in names:
        tp = parse_partition_dir(os.path.join(log_dir, n))
        if tp is not None and tp[0] == topic and os.path.isdir(os.path.join(log_dir, n)):
            out.append(tp[1])
    return sorted(out)


def cmd_produce(args: argparse.Namespace) -> int:
    """``pylog produce DIR --topic T``: stdin lines as records (see docs/cli.md).

    Without ``--partition`` a keyed record goes to murmur2(key) mod the partition count, as the producer's
    default partitioner does; records without a key fill one batch per partition in turn.
    """
    try:
        sep, _props = _produce_separator(args)
    except PylogError as exc:
        error(str(exc))
        return 2
    if is_queue_dir(args.dir):
        return _produce_to_queue(args, sep)
    from pylog.client.partitioner import partition_for_key

    if args.partition is not None:
        partitions = [args.partition]
    else:
        partitions = _topic_partitions(args.dir, args.topic) or [0]
    logs: Dict[int, Log] = {}
    done: Dict[int, List[int]] = {}
    n = 0
    progress = _stdin_progress(args)

    def log_for(p: int) -> Log:
        if p not in logs:
            logs[p] = Log.open(os.path.join(args.dir, f"{args.topic}-{p}"))
        return logs[p]

    try:
        pending: Dict[int, List[Record]] = {}
        sticky = 0

        def flush(p: int) -> None:
            recs = pending.pop(p, [])
            if recs:
                res = log_for(p).append(recs)
                done.setdefault(p, []).extend((res.base_offset, res.last_offset))

        for rec in _stdin_records(sep):
            if args.partition is not None:
                p = args.partition
            elif rec.key is not None:
                p = partitions[partition_for_key(rec.key, len(partitions))]  # the producer's murmur2
            else:
                p = partitions[sticky % len(partitions)]
            pending.setdefault(p, []).append(rec)
            n += 1
            progress.advance(len(rec.value or b"") + len(rec.key or b"") + 1 if progress.unit == "B" else 1)
            if len(pending[p]) >= args.batch_size:
                flush(p)
                if rec.key is None:
                    sticky += 1
        for p in list(pending):
            flush(p)
        for log in logs.values():
            log.flush()
    except (OSError, PylogError) as exc:
        progress.finish()
        error(f"{args.dir}: {args.topic}: {exc}")
        return 1
    finally:
        for log in logs.values():
            log.close()
    progress.finish(complete=True)
    where = {p: [o[0], o[-1]] for p, o in done.items()}
    print(f"Produced {n} records to {_where(where, args.topic) or args.topic}", file=sys.stderr)
    return 0


class RecordFormatter:
    """kafka-console-consumer's ``DefaultMessageFormatter``: ``[CreateTime:T<sep>][Partition:P<sep>]
    [Offset:O<sep>][headers<sep>][key<sep>]value<line.separator>`` as the ``print.*`` properties ask.

    Headers print as ``k:v`` joined by ``headers.separator`` (``NO_HEADERS`` when there are none); a null
    key, value or header value prints ``null.literal``. Thread-safety: immutable. Complexity: O(record).
    """

    def __init__(self, props: Dict[str, str]):
        self.p = {k: (v == "true") for k, v in props.items() if k in _BOOLEAN_PROPERTIES}
        self.sep = props["key.separator"].encode()
        self.line = props["line.separator"].encode()
        self.hsep = props["headers.separator"].encode()
        self.null = props["null.literal"].encode()

    def format(self, rec: Any) -> bytes:
        out = []
        if self.p["print.timestamp"]:
            kind = "LogAppendTime" if getattr(rec, "timestamp_type", 0) else "CreateTime"
            out.append(f"{kind}:{rec.timestamp}".encode() if rec.timestamp >= 0 else b"NO_TIMESTAMP")
            out.append(self.sep)
        if self.p["print.partition"]:
            out += [b"Partition:%d" % rec.partition, self.sep]
        if self.p["print.offset"]:
            out += [b"Offset:%d" % rec.offset, self.sep]
        if self.p["print.headers"]:
            hs = [k.encode() + b":" + (self.null if v is None else bytes(v)) for k, v in rec.headers]
            out += [self.hsep.join(hs) if hs else b"NO_HEADERS", self.sep]
        if self.p["print.key"]:
            out += [self.null if rec.key is None else bytes(rec.key), self.sep]
        if self.p["print.value"]:
            out.append(self.null if rec.value is None else bytes(rec.value))
        out.append(self.line)
        return b"".join(out)


class _PartitionRecord(NamedTuple):
    """A log record with its partition (the formatter prints ``Partition:``)."""

    partition: int
    offset: int
    timestamp: Optional[int]  # as Record's (a record read from a log always has one)
    timestamp_type: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Sequence[Tuple[str, Optional[bytes]]]


def _consume_props(args: argparse.Namespace) -> Dict[str, str]:
    props = parse_properties(args.property or (), CONSUMER_PROPERTIES, "consumer")
    if args.print_key:
        props["print.key"] = "true"
    if args.key_separator is not None:
        props["key.separator"] = args.key_separator
    return props


def _check_consume_args(args: argparse.Namespace) -> Optional[str]:
    if args.offset is not None and args.partition is None:
        return "--offset needs --partition (as kafka-console-consumer)"
    if args.group is not None and (args.offset is not None or args.partition is not None):
        return "--group reads the group's assignment: it takes neither --partition nor --offset"
    return None


def _consume_from_queue(args: argparse.Namespace, fmt: RecordFormatter) -> int:
    """``pylog consume`` on a queue directory: a consumer of ``pylog.open(DIR)``.

    With ``--group``: subscribe as that group, start at its committed offset
    (else the beginning with ``--from-beginning``, else the end), and commit
    what was printed. Without: read ``--partition`` (default every partition
    of the topic) from ``--offset`` / ``--from-beginning`` / the end. Stops at
    ``--max-messages``, ``--to-offset``, or after ``--timeout-ms`` without a
    record (1000 ms by default; with ``--follow`` only when given).
    """
    out = sys.stdout.buffer
    q: Any = open_queue(args.dir)
    if q is None:
        return 1
    n = 0
    idle_ms = args.timeout_ms if args.timeout_ms is not None else (None if args.follow else 1000)
    try:
        reset = "earliest" if args.from_beginning else "latest"
        if args.group is not None:
            cons = q.consumer(args.group, [args.topic], auto_offset_reset=reset, enable_auto_commit=False)
        else:
            cons = q.consumer(None, auto_offset_reset=reset)
            parts = [args.partition] if args.partition is not None else [r.partition for r in q.describe(args.topic)]
            cons.assign([(args.topic, p) for p in parts])
            if args.offset is not None:
                cons.seek(args.topic, args.partition, args.offset)
        consumed: Dict[Tuple[str, int], int] = {}
        done = False
        idle = 0.0
        while not done:
            recs = cons.poll(timeout=0.5 if idle_ms is None else min(0.5, idle_ms / 1000.0))
            if not recs:
                idle += 0.5 if idle_ms is None else min(0.5, idle_ms / 1000.0)
                if idle_ms is not None and idle * 1000 >= idle_ms:
                    break
                continue
            idle = 0.0
            for rec in recs:
                if args.to_offset is not None and rec.offset >= args.to_offset:
                    if args.partition is not None or args.group is not None:
                        done = True
                        break
                    continue  # every partition stops at --to-offset; the others may still be below it
                out.write(fmt.format(rec))
                consumed[(rec.topic, rec.partition)] = rec.offset + 1
                n += 1
                if args.max_messages is not None and n >= args.max_messages:
                    done = True
                    break
            out.flush()
        out.flush()
        if args.group is not None and consumed:
            cons.commit(consumed)  # exactly what was printed (at-least-once for the rest)
        cons.close()
    except (OSError, PylogError) as exc:
        out.flush()
        error(f"{args.dir}: {args.topic}: {exc}")
        return 1
    finally:
        q.close()
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    """``pylog consume DIR --topic T``: print records (see docs/cli.md)."""
    problem = _check_consume_args(args)
    if problem:
        error(problem)
        return 2
    try:
        fmt = RecordFormatter(_consume_props(args))
    except PylogError as exc:
        error(str(exc))
        return 2
    if is_queue_dir(args.dir):
        return _consume_from_queue(args, fmt)
    if args.group is not None:
        error(f"{args.dir}: --group needs a queue/cluster directory (made by pylog.open), not a log directory")
        return 2
    parts = [args.partition] if args.partition is not None else _topic_partitions(args.dir, args.topic)
    if not parts:
        error(f"{args.dir}: no partition of topic {args.topic!r} ({args.topic}-<N>/) here")
        return 1
    out = sys.stdout.buffer
    n = 0
    total = 0
    positions: Dict[int, int] = {}
    # Starting positions: --offset, the log start (--from-beginning), or the end (only new records).
    for p in parts:
        path = os.path.join(args.dir, f"{args.topic}-{p}")
        try:
            with Log.open(path, read_only=True) as log:
                if args.offset is not None:
                    start = args.offset
                elif args.from_beginning:
                    start = log.log_start_offset
                else:
                    start = log.log_end_offset  # like kafka-console-consumer: only new records
                if start < log.log_start_offset or start > log.log_end_offset:
                    error(f"offset {start} is outside [{log.log_start_offset}, {log.log_end_offset}] of {path}")
                    return 1
                positions[p] = start
                end = log.log_end_offset if args.to_offset is None else min(args.to_offset, log.log_end_offset)
                total += max(0, end - start)
        except (OSError, PylogError) as exc:
            error(f"{path}: {exc}")
            return 1
    idle_ms = args.timeout_ms
    idle = 0.0
    if args.max_messages is not None:
        total = min(total, args.max_messages)
    progress = Progress(total, progress_enabled(args) and not args.follow, unit=" records")
    try:
        while True:
            got_any = False
            for p in parts:
                path = os.path.join(args.dir, f"{args.topic}-{p}")
                # Reopened each round: a writer in another process may have appended (and rolled segments).
                with Log.open(path, read_only=True) as log:
                    end = log.log_end_offset if args.to_offset is None else min(args.to_offset, log.log_end_offset)
                    offset = positions[p]
                    if offset < log.log_start_offset:  # retention deleted what was not read yet
                        offset = log.log_start_offset
                    while offset < end and (args.max_messages is None or n < args.max_messages):
                        got = False
                        for rec in log.read(offset, max_offset=end):
                            if rec.offset >= end:
                                break
                            got = got_any = True
                            out.write(fmt.format(_PartitionRecord(p, rec.offset, rec.timestamp, rec.timestamp_type,
                                                                  rec.key, rec.value, rec.headers)))
                            n += 1
                            progress.advance(1, f"{args.topic}-{p}")
                            offset = rec.offset + 1
                            if args.max_messages is not None and n >= args.max_messages:
                                break
                        if not got:
                            break
                    positions[p] = offset
            out.flush()
            if args.max_messages is not None and n >= args.max_messages:
                break
            if args.to_offset is not None and all(positions[p] >= args.to_offset for p in parts):
                break
            if not args.follow:
                break
            if got_any:
                idle = 0.0
                continue
            time.sleep(0.2)
            idle += 0.2
            if idle_ms is not None and idle * 1000 >= idle_ms:
                break
    except (OSError, PylogError) as exc:
        out.flush()
        progress.finish()
        error(f"{args.dir}: {args.topic}: {exc}")
        return 1
    out.flush()
    progress.finish()
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


def add_produce_parser(sub: Any) -> None:
    """Register the ``produce`` verb on the ``pylog`` command's subparsers."""
    pr = sub.add_parser("produce", help="append lines from stdin to a topic (keys through the partitioner)",
                        description="Read lines from stdin and append each as a record of TOPIC, like "
                                    "kafka-console-producer. Without --partition a keyed record goes to "
                                    "murmur2(key) mod the partition count (the producer's default partitioner).")
    pr.add_argument("dir", metavar="DIR")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--partition", type=int, default=None, help="write every record to partition N")
    pr.add_argument("--property", action="append", metavar="NAME=VALUE", default=[],
                    help="parse.key=true and key.separator=SEP (default tab) split each line into key and value")
    pr.add_argument("--key-separator", default=None, help="short for --property parse.key=true --property key.separator=SEP")
    pr.add_argument("--batch-size", type=int, default=500, help="records per appended batch (default 500)")
    pr.add_argument("--acks", choices=["0", "1", "all"], default="all",
                    help="queue directories only (see below): the producer's acks (default all)")
    pr.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    pr.epilog = ("DIR is a log directory (holding <TOPIC>-<PARTITION>/; the partition count is the number of "
                 "those folders, 1 for a new topic), or a queue/cluster directory made by pylog.open (holding "
                 "cluster-metadata.json): then the records go through a producer - to the process that owns "
                 "the directory if one is running.")


def add_consume_parser(sub: Any) -> None:
    """Register the ``consume`` verb on the ``pylog`` command's subparsers."""
    c = sub.add_parser("consume", help="print records of a topic's partitions (read-only on a log dir)",
                       description="Print the records of TOPIC (every partition, or --partition N), one per line, "
                                   "like kafka-console-consumer; --follow waits for new records.")
    c.add_argument("dir", metavar="DIR")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, default=None, help="only partition N (default: every partition)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    g.add_argument("--offset", type=int, default=None, help="start at offset N (needs --partition)")
    c.add_argument("--to-offset", type=int, default=None, help="stop each partition before offset N (exclusive)")
    c.add_argument("--max-messages", type=int, default=None)
    c.add_argument("--follow", action="store_true",
                   help="keep waiting for new records (until Ctrl-C, --max-messages or --timeout-ms)")
    c.add_argument("--property", action="append", metavar="NAME=VALUE", default=[],
                   help="kafka-console-consumer's print.timestamp, print.partition, print.offset, print.headers, "
                        "print.key, print.value (true/false), key.separator, headers.separator, line.separator, "
                        "null.literal")
    c.add_argument("--group", default=None,
                   help="queue directories only: consume as consumer group G (subscribe to the topic, start at the "
                        "group's committed offset, commit what was printed)")
    c.add_argument("--timeout-ms", type=int, default=None,
                   help="stop after this long without a new record (default: 1000 on a queue directory without "
                        "--follow; never with --follow)")
    c.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    c.epilog = ("DIR is a log directory (read-only, like kafka-dump-log's input), or a queue/cluster directory made "
                "by pylog.open (holding cluster-metadata.json): then a consumer reads below the high watermark, "
                "through the process that owns the directory if one is running.")
    c.add_argument("--print-key", action="store_true", help="short for --property print.key=true")
    c.add_argument("--key-separator", default=None, help="short for --property key.separator=SEP (default: tab)")
