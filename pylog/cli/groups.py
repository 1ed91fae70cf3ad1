"""``pylog groups DIR``: list, describe, delete consumer groups and reset their offsets (kafka-consumer-groups),
on a queue/cluster directory, through the process that owns it if one is running.

Thread-safety: a command-line entry point; one thread.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional, Tuple

from pylog.cli.common import error, is_queue_dir, open_queue
from pylog.errors import PylogError


def _partitions_arg(q: Any, topic: str, partition: Optional[int]) -> List[Tuple[str, int]]:
    if partition is not None:
        return [(topic, partition)]
    return [(topic, row.partition) for row in q.describe(topic)]


def cmd_groups(args: argparse.Namespace) -> int:
    """``pylog groups DIR``: Kafka's kafka-consumer-groups on a queue/cluster directory (see docs/cli.md)."""
    if not is_queue_dir(args.dir):
        error(f"{args.dir}: groups needs a queue/cluster directory (made by pylog.open), not a log directory")
        return 1
    if (args.delete_offsets or args.reset_offsets) and not args.topic:
        error("--delete-offsets and --reset-offsets need --topic")
        return 2
    if args.reset_offsets:
        spec = _reset_spec(args)
        if isinstance(spec, str):
            error(spec)
            return 2
    elif _reset_spec(args) is not None or args.execute or args.dry_run:
        error("--to-*, --shift-by, --dry-run and --execute go with --reset-offsets")
        return 2
    q: Any = open_queue(args.dir)
    if q is None:
        return 1
    try:
        if args.describe:
            g = args.describe
            d = q.describe_group(g)
            print(f"Group: {g} State: {d.state} ProtocolType: {d.protocol_type or '-'} Protocol: {d.protocol or '-'} "
                  f"Generation: {d.generation} Leader: {d.leader or '-'}")
            for m in d.members:
                parts = ",".join(f"{t}-{p}" for t, p in m.assignment) or "-"
                static = f" InstanceId: {m.group_instance_id}" if m.group_instance_id else ""
                print(f"Member: {m.member_id}{static} ClientId: {m.client_id} Host: {m.client_host} Assignment: {parts}")
            committed = q.list_group_offsets(g)
            ends: Dict[str, Dict[int, int]] = {}
            for (t, p), v in sorted(committed.items()):
                if t not in ends:
                    try:
                        ends[t] = {row.partition: row.high_watermark for row in q.describe(t)}
                    except PylogError:
                        ends[t] = {}
                hw = ends[t].get(p, -1)
                lag = max(0, hw - v.offset) if hw >= 0 else "-"
                print(f"Topic: {t} Partition: {p} CommittedOffset: {v.offset} LogEndOffset: {hw if hw >= 0 else '-'} "
                      f"Lag: {lag}")
        elif args.delete:
            q.delete_group(args.delete)
            print(f"Deleted group {args.delete}")
        elif args.delete_offsets:
            tps = _partitions_arg(q, args.topic, args.partition)
            q.delete_group_offsets(args.delete_offsets, tps)
            print(f"Deleted the offsets of group {args.delete_offsets} for "
                  + ", ".join(f"{t}-{p}" for t, p in tps))
        elif args.reset_offsets:
            return _reset_offsets(q, args, spec)
        else:
            for row in q.list_groups():
                print(f"Group: {row.group_id} State: {row.state} ProtocolType: {row.protocol_type or '-'}")
    except (OSError, PylogError) as exc:
        error(f"{args.dir}: {exc}")
        return 1
    finally:
        q.close()
    return 0


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO 8601 (``2026-11-25T12:00:00``, ``...:00.500``, ``...Z``, ``...+02:00``,
    or a date alone) as epoch milliseconds; a time without an offset is UTC (Kafka's tool takes the
    local zone; a shared CLI should not depend on the machine's). Raises InvalidConfigurationError."""
    import datetime as _dt

    from pylog.errors import InvalidConfigurationError

    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        d = _dt.datetime.fromisoformat(t)
    except ValueError:
        raise InvalidConfigurationError(
            f"--to-datetime {text!r} is not an ISO 8601 time (e.g. 2026-11-25T12:00:00, 2026-11-25T12:00:00.500+02:00)"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return int(round(d.timestamp() * 1000))


def _reset_spec(args: argparse.Namespace) -> Any:
    """``(kind, value)`` of the chosen --to-*/--shift-by, None when none, or an error string."""
    chosen = [(k, v) for k, v in (("to-offset", args.to_offset), ("shift-by", args.shift_by),
                                  ("to-datetime", args.to_datetime),
                                  ("to-earliest", True if args.to_earliest else None),
                                  ("to-latest", True if args.to_latest else None)) if v is not None]
    if not chosen:
        return None if not args.reset_offsets else (
            "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime")
    kind, value = chosen[0]
    if kind == "to-datetime":
        try:
            value = parse_datetime_ms(args.to_datetime)  # the value chosen
        except PylogError as exc:
            return str(exc)
    if kind == "to-offset" and value < 0:
        return f"--to-offset must be >= 0, got {value}"
    return kind, value


def _offsets_for_time(q: Any, tps: List[Tuple[str, int]], ts: int) -> Dict[Tuple[str, int], Optional[int]]:
    """The first offset at or after ``ts`` per partition (None: no such record): the consumer's ``offsets_for_times``."""
    cons = q.consumer(None)
    try:
        got = cons.offsets_for_times({tp: ts for tp in tps})
        return {tp: (None if v is None else v.offset) for tp, v in got.items()}
    finally:
        cons.close()

def _reset_offsets(q: Any, args: argparse.Namespace, spec: Tuple[str, Any]) -> int:
    """kafka-consumer-groups --reset-offsets: print the plan; apply it with --execute.

    As in Kafka the group must be inactive (no members: state Empty, or a group that does not exist
    yet); a --to-offset or --shift-by target outside [log start, high watermark] is clamped to it with
    a warning; --shift-by needs a committed offset; --to-datetime takes the first offset whose timestamp
    is at or after the time (the end when there is none).
    """
    from pylog.errors import GroupIdNotFoundError

    group = args.reset_offsets
    try:
        state = q.describe_group(group).state
    except GroupIdNotFoundError:
        state = "Dead"
    if state not in ("Empty", "Dead"):
        error(f"group {group!r}: assignments can only be reset if the group is inactive, but the current state "
               f"is {state} (stop its consumers first)")
        return 1
    tps = _partitions_arg(q, args.topic, args.partition)
    rows = {r.partition: r for r in q.describe(args.topic)}
    for t, p in tps:
        if p not in rows:
            error(f"{args.topic}-{p}: no such partition (the topic has {len(rows)})")
            return 1
    cons = q.consumer(None)
    try:
        cons.assign(tps)
        cons.seek_to_beginning(*tps)
        starts = {tp: cons.position(*tp) for tp in tps}
        cons.seek_to_end(*tps)
        ends = {tp: cons.position(*tp) for tp in tps}
    finally:
        cons.close()
    committed = {tp: v.offset for tp, v in q.list_group_offsets(group).items()}
    kind, value = spec
    plan: Dict[Tuple[str, int], int] = {}
    if kind == "to-datetime":
        found = _offsets_for_time(q, tps, value)
    for tp in tps:
        if kind == "to-earliest":
            target = starts[tp]
        elif kind == "to-latest":
            target = ends[tp]
        elif kind == "to-offset":
            target = value
        elif kind == "shift-by":
            if tp not in committed:
                error(f"group {group!r} has no committed offset for {tp[0]}-{tp[1]} to shift")
                return 1
            target = committed[tp] + value
        else:
            f = found[tp]
            target = ends[tp] if f is None else f
        clamped = min(max(target, starts[tp]), ends[tp])
        if clamped != target:
            print(f"WARN: new offset {target} for {tp[0]}-{tp[1]} is outside [{starts[tp]}, {ends[tp]}]; "
                  f"using {clamped}", file=sys.stderr)
        plan[tp] = clamped
    print(f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<10}")
    for (t, p), o in sorted(plan.items()):
        print(f"{group:<30} {t:<30} {p:<10} {o:<10}")
    if not args.execute:
        print("Dry run: nothing changed (add --execute to apply)", file=sys.stderr)
        return 0
    q.alter_group_offsets(group, plan)
    return 0


def add_parser(sub: Any) -> None:
    """Register the ``groups`` verb on the ``pylog`` command's subparsers."""
    gr = sub.add_parser("groups", help="list, describe, delete consumer groups and their offsets (queue dirs)",
                        description="Like kafka-consumer-groups, on a queue/cluster directory made by pylog.open "
                                    "(through the process that owns it, if one is running). Without an action: "
                                    "list every group.")
    gr.add_argument("dir", metavar="DIR")
    act = gr.add_mutually_exclusive_group()
    act.add_argument("--describe", metavar="GROUP", help="state, members and their partitions, committed offsets and lag")
    act.add_argument("--delete", metavar="GROUP", help="delete an empty group (its offsets too)")
    act.add_argument("--delete-offsets", metavar="GROUP", help="delete the group's offsets of --topic [--partition]")
    act.add_argument("--reset-offsets", metavar="GROUP",
                     help="plan (and with --execute, set) the committed offsets of an inactive group for --topic "
                          "[--partition]; one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime")
    gr.add_argument("--topic", default=None)
    gr.add_argument("--partition", type=int, default=None, help="default: every partition of --topic")
    to = gr.add_mutually_exclusive_group()
    to.add_argument("--to-offset", type=int, default=None, help="reset to offset N (clamped to the log's range)")
    to.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    to.add_argument("--to-latest", action="store_true", help="reset to the end (the high watermark)")
    to.add_argument("--shift-by", type=int, default=None, help="move the committed offset by N (negative: back)")
    to.add_argument("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="reset to the first offset whose timestamp is at or after this time (ISO 8601; UTC "
                         "unless it has an offset such as +02:00 or Z)")
    run_mode = gr.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    run_mode.add_argument("--execute", action="store_true", help="apply the plan")
