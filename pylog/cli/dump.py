"""``pylog dump-log FILE...``: batches, records and index entries of segment files (kafka-dump-log).

Corrupt input yields a line naming the file and byte position, never a traceback.

Thread-safety: a command-line entry point; one thread.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from typing import IO, Any, Callable, Dict, List, Optional, Tuple

from pylog.cli.common import base_offset_of, error, show_bytes
from pylog.cli.progress import Progress, progress_enabled
from pylog.errors import CorruptIndexError, CorruptRecordError, PylogError
from pylog.record import ATTR_CONTROL, ATTR_DELETE_HORIZON, Record, RecordBatch, scan
from pylog.record.compression import NAMES as CODEC_NAMES
from pylog.storage.control_record import ControlRecordType, EndTransactionMarker, parse_control_type
from pylog.storage.fileio import FileIO
from pylog.storage.index import OffsetIndex, TimeIndex, offset_entry_at, time_entry_at
from pylog.storage.txn_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from pylog.storage.txn_index import decode_entries as decode_txn_entries


def control_text(key: Optional[bytes], value: Optional[bytes], *, path: Optional[str] = None,
                 offset: Optional[int] = None) -> str:
    """A control record as kafka-dump-log prints it: ``endTxnMarker: COMMIT coordinatorEpoch: 3`` for a
    transaction marker, ``controlType: LEADER_CHANGE(2)`` for another type. Raises
    :class:`CorruptRecordError` (naming ``path`` and ``offset``) for a malformed key or marker value."""
    key = None if key is None else bytes(key)
    value = None if value is None else bytes(value)
    kind = parse_control_type(key, path=path, offset=offset)
    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        marker = EndTransactionMarker.decode(key, value, path=path, offset=offset)
        return f"endTxnMarker: {marker.kind.name} coordinatorEpoch: {marker.coordinator_epoch}"
    assert key is not None  # parse_control_type refused a null key
    return f"controlType: {kind.name}({struct.unpack_from('>h', key, 2)[0]})"


def _batch_line(b: RecordBatch, valid: bool, marker: Optional[str] = None) -> str:
    codec = CODEC_NAMES.get(b.compression, str(b.compression))
    horizon = (f"deleteHorizonMs: {b.info.base_timestamp} "
               if b.magic == 2 and b.info.attributes & ATTR_DELETE_HORIZON else "")
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
        f"baseSequence: {b.base_sequence} partitionLeaderEpoch: {b.partition_leader_epoch} "
        f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
        f"{horizon}producerId: {b.producer_id} producerEpoch: {b.producer_epoch} position: {b.info.position} "
        f"CreateTime: {b.max_timestamp} size: {b.size_in_bytes} magic: {b.magic} "
        f"compresscodec: {codec} crc: {b.info.crc} isvalid: {str(valid).lower()}"
        + (f" {marker}" if marker else "")
    )


def _record_line(r: Record, print_data: bool, skip_metadata: bool = False,
                 decoded: Optional[Tuple[str, str]] = None, control: Optional[str] = None) -> str:
    """One ``| offset: ...`` line; ``decoded`` replaces the key and payload text (``--offsets-decoder``),
    ``control`` (a control record's text, :func:`control_text`) replaces them, as in kafka-dump-log."""
    key, payload = decoded if decoded is not None else (show_bytes(r.key), show_bytes(r.value))
    if skip_metadata:
        return control if control is not None else f"key: {key} payload: {payload}"
    line = (
        f"| offset: {r.offset} {'LogAppendTime' if r.timestamp_type else 'CreateTime'}: {r.timestamp} "
        f"keySize: {-1 if r.key is None else len(r.key)} valueSize: {-1 if r.value is None else len(r.value)}"
    )
    if control is not None:
        return line + f" {control}"
    if print_data:
        hdrs = ",".join(f"{k}:{show_bytes(v)}" for k, v in r.headers)
        line += f" headerKeys: [{hdrs}] key: {key} payload: {payload}"
    return line


def decode_offsets_record(key: Optional[bytes], value: Optional[bytes]) -> Tuple[str, str]:
    """Key and value of a ``__consumer_offsets`` record as JSON text (kafka-dump-log's ``--offsets-decoder``).

    An offset commit key prints as ``{"type":"offset_commit","version":1,"group":G,"topic":T,"partition":P}``
    and its value as ``{"version":3,"offset":O,"leaderEpoch":E,"metadata":M,"commitTimestamp":T}``
    (``expireTimestamp`` too for version 1); a group metadata key as ``{"type":"group_metadata",...}`` and its
    value with the generation, protocol, leader and members (each member's subscribed topics and assigned
    partitions decoded). A null value (a tombstone: the offset or group was deleted) prints ``null``.
    Raises :class:`~pylog.errors.CorruptRecordError` naming what could not be decoded.
    Complexity: O(bytes of the record).
    """
    from pylog.replication import offsets_topic as ot

    if key is None:
        raise CorruptRecordError(f"{ot.OFFSETS_TOPIC} record without a key")
    k = ot.decode_key(key)
    kv = struct.unpack_from(">h", key)[0]
    if isinstance(k, ot.OffsetCommitKey):
        key_obj: Dict[str, Any] = {"type": "offset_commit", "version": kv, "group": k.group, "topic": k.topic,
                                   "partition": k.partition}
    else:
        key_obj = {"type": "group_metadata", "version": kv, "group": k.group}
    if value is None:
        return json.dumps(key_obj), "null"
    vv = struct.unpack_from(">h", value)[0] if len(value) >= 2 else -1
    if isinstance(k, ot.OffsetCommitKey):
        v = ot.decode_offset_commit_value(value)
        val_obj: Dict[str, Any] = {"version": vv, "offset": v.offset, "leaderEpoch": v.leader_epoch,
                                   "metadata": v.metadata, "commitTimestamp": v.commit_timestamp}
        if vv == 1:
            val_obj["expireTimestamp"] = v.expire_timestamp
    else:
        g = ot.decode_group_metadata_value(value)
        members = []
        for m in g.members:
            member: Dict[str, Any] = {"memberId": m.member_id, "groupInstanceId": m.group_instance_id,
                                      "clientId": m.client_id, "clientHost": m.client_host,
                                      "rebalanceTimeout": m.rebalance_timeout, "sessionTimeout": m.session_timeout}
            if g.protocol_type == "consumer":
                try:
                    member["subscription"] = ot.decode_subscription(m.subscription)[0] if m.subscription else []
                    member["assignment"] = [f"{t}-{p}" for t, p in ot.decode_assignment(m.assignment)] if m.assignment else []
                except CorruptRecordError as exc:
                    member["protocolError"] = str(exc)
            members.append(member)
        val_obj = {"version": vv, "protocolType": g.protocol_type, "generation": g.generation,
                   "protocol": g.protocol, "leader": g.leader, "currentStateTimestamp": g.current_state_timestamp,
                   "members": members}
    return json.dumps(key_obj), json.dumps(val_obj)


def decode_transaction_log_record(key: Optional[bytes], value: Optional[bytes]) -> Tuple[str, str]:
    """Key and value of a ``__transaction_state`` record as JSON text (kafka-dump-log's
    ``--transaction-log-decoder``).

    The key prints as ``{"type": "transaction_metadata", "version": 0, "transactionalId": ID}`` and the
    value as ``{"version": V, "producerId": ..., "producerEpoch": ..., "previousProducerId": ...,
    "nextProducerId": ..., "transactionTimeoutMs": ..., "state": "Ongoing", "partitions":
    {"topic": [0, 1]}, "transactionLastUpdateTimestampMs": ..., "transactionStartTimestampMs": ...,
    "clientTransactionVersion": ...}`` (pylog.replication.txn_log's fields, Kafka's state names); a
    tombstone prints ``null``. Raises :class:`CorruptRecordError` naming the field and byte.
    Complexity: O(bytes of the record).
    """
    from pylog.replication import txn_log as tl

    if key is None:
        raise CorruptRecordError(f"{tl.TRANSACTION_STATE_TOPIC} record without a key")
    tid = tl.decode_key(key)
    kv = struct.unpack_from(">h", key)[0]
    if tid is None:
        raise CorruptRecordError(f"{tl.TRANSACTION_STATE_TOPIC} key of unknown version {kv}")
    key_obj = {"type": "transaction_metadata", "version": kv, "transactionalId": tid}
    v = tl.decode_value(value)
    if v is None:
        return json.dumps(key_obj), "null"
    assert value is not None
    parts: Dict[str, List[int]] = {}
    for topic, partition in sorted(v.partitions):
        parts.setdefault(topic, []).append(partition)
    val_obj = {"version": struct.unpack_from(">h", value)[0], "producerId": v.producer_id,
               "producerEpoch": v.producer_epoch, "previousProducerId": v.previous_producer_id,
               "nextProducerId": v.next_producer_id, "transactionTimeoutMs": v.transaction_timeout_ms,
               "state": tl.TransactionState(v.state).kafka_name, "partitions": parts,
               "transactionLastUpdateTimestampMs": v.last_update_timestamp_ms,
               "transactionStartTimestampMs": v.start_timestamp_ms,
               "clientTransactionVersion": v.client_transaction_version}
    return json.dumps(key_obj), json.dumps(val_obj)


_DECODERS: Dict[str, Tuple[str, Callable[[Optional[bytes], Optional[bytes]], Tuple[str, str]]]] = {
    "offsets": ("__consumer_offsets", decode_offsets_record),
    "transaction-log": ("__transaction_state", decode_transaction_log_record),
}


_LEGACY_OR_V2 = frozenset((0, 1, 2))


def _next_valid_batch(view: memoryview, start: int, magics: Any) -> Optional[int]:
    """The first position at or after ``start`` where a whole, CRC-valid batch begins, or None.

    Candidates are positions whose magic byte (byte 16 of a batch or legacy
    message) is one of ``magics``; each is checked by a one-batch scan with
    CRCs. Complexity: O(bytes) candidates, each O(batch size) at worst.
    """
    n = len(view)
    for pos in range(start, n - 17 + 1):
        if view[pos + 16] not in magics:
            continue
        r = scan(view[pos:], verify_crc=True, max_batches=1)
        if r.batches:
            return pos
    return None


def dump_log_file(path: str, out: IO[str], *, print_data: bool, deep: bool, offsets_decoder: bool = False,
                  skip_metadata: bool = False, progress: Optional[Progress] = None,
                  transaction_log_decoder: bool = False) -> bool:
    """Print every batch of a ``.log`` file; False (after error lines) on damage.

    A control batch's line ends with its marker (``endTxnMarker: COMMIT coordinatorEpoch: E``;
    its producer id and epoch are the batch's); with records, a control record prints that text
    instead of a key and payload (kafka-dump-log). ``offsets_decoder`` / ``transaction_log_decoder``
    decode the data records as ``__consumer_offsets`` / ``__transaction_state`` records.

    Past a bad batch it goes on, as a reader of a damaged disk wants: when the
    bad batch's framing (its length) can still be read, it is printed with
    ``isvalid: false`` and the dump resumes right after it; otherwise the
    bytes are searched for the next position where a whole, CRC-valid batch
    starts, and the dump resumes there. Each skip is an ``ERROR`` line naming
    the byte positions; a damaged tail with no valid batch after it ends the
    file with one. Complexity: O(bytes) (plus O(records) with record output).
    """
    with open(path, "rb") as f:
        data = f.read()
    view = memoryview(data)
    ok = True
    pos = 0
    magics = set()
    decoder = _DECODERS["transaction-log" if transaction_log_decoder else "offsets"] if (
        offsets_decoder or transaction_log_decoder) else None
    with_records = deep or print_data or decoder is not None or skip_metadata
    while pos < len(data):
        result = scan(view[pos:], verify_crc=True)
        for rel in result.batches:
            info = rel._replace(position=rel.position + pos)
            magics.add(info.magic)
            batch = RecordBatch(info, view[info.position : info.position + info.size], path)
            marker: Optional[str] = None
            if batch.is_control and batch.magic == 2:
                try:
                    recs = batch.records()
                    marker = (control_text(recs[0].key, recs[0].value, path=path, offset=recs[0].offset)
                              if recs else "controlType: none (empty control batch)")
                except PylogError as exc:
                    error(f"{path}: control batch at byte position {info.position} does not decode: {exc}")
                    ok = False
            if not skip_metadata:
                out.write(_batch_line(batch, True, marker) + "\n")
            if not with_records:
                continue
            try:
                for rec in batch.records():
                    decoded = None
                    control = None
                    if batch.is_control:
                        try:
                            control = control_text(rec.key, rec.value, path=path, offset=rec.offset)
                        except PylogError:
                            control = None  # reported on the batch line
                    elif decoder is not None:
                        try:
                            decoded = decoder[1](rec.key, rec.value)
                        except (CorruptRecordError, struct.error) as exc:
                            error(f"{path}: offset {rec.offset} (batch at byte position {info.position}) is not a "
                                   f"{decoder[0]} record: {exc}")
                            ok = False
                    out.write(_record_line(rec, print_data or decoder is not None or skip_metadata, skip_metadata,
                                           decoded, control) + "\n")
            except PylogError as exc:
                error(f"{path}: cannot decode records of the batch at byte position {info.position}: {exc}")
                ok = False
        if progress is not None:
            progress.advance(result.valid_bytes, os.path.basename(path))
        if result.ok:
            break
        ok = False
        bad_at = pos + result.valid_bytes
        # Show the header of the bad batch when its framing holds (a CRC mismatch).
        bad = scan(view[bad_at:], verify_crc=False, max_batches=1)
        resume: Optional[int] = None
        if bad.batches:
            info = bad.batches[0]._replace(position=bad_at)
            out.write(_batch_line(RecordBatch(info, view[bad_at : bad_at + info.size], path), False) + "\n")
            resume = bad_at + info.size
            how = "its header is readable: resuming after it"
        else:
            resume = _next_valid_batch(view, bad_at + 1, magics or _LEGACY_OR_V2)
            how = "its header is not readable: resuming at the next valid batch"
        if resume is None or resume >= len(data):
            error(
                f"{path}: {result.reason} at byte position {bad_at} "
                f"({len(data) - bad_at} bytes from there to the end of the file are not valid batches)"
            )
            if progress is not None:
                progress.advance(len(data) - bad_at)
            break
        error(f"{path}: {result.reason} at byte position {bad_at}; {how}, byte position {resume} "
               f"({resume - bad_at} bytes skipped)")
        if progress is not None:
            progress.advance(resume - bad_at)
        pos = resume
    out.flush()
    return ok


def _log_size_for(index_path: str) -> int:
    log_path = index_path.rsplit(".", 1)[0] + ".log"
    try:
        return os.path.getsize(log_path)
    except OSError:
        return 2**31 - 1


def _batches_by_position(index_path: str) -> Optional[Dict[int, Tuple[int, int]]]:
    """``{position: (base_offset, last_offset)}`` of the segment's batches, None without a .log."""
    log_path = index_path.rsplit(".", 1)[0] + ".log"
    try:
        with open(log_path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return {b.position: (b.base_offset, b.last_offset) for b in scan(data, verify_crc=False).batches}


def dump_index_file(path: str, out: IO[str]) -> bool:
    """Print the entries of an ``.index`` or ``.timeindex`` file; False when it fails validation."""
    base = base_offset_of(path)
    is_time = path.endswith(".timeindex")
    idx = (TimeIndex if is_time else OffsetIndex)(FileIO(), path, base, read_only=True)
    ok = True
    try:
        idx.load(_log_size_for(path))
        data = bytes(idx.data)
    except CorruptRecordError as exc:
        error(f"{path}: fails validation: {exc}")
        ok = False
        with open(path, "rb") as f:
            data = f.read()
    size = 12 if is_time else 8
    batch_at = _batches_by_position(path) if not is_time else None
    for i in range(len(data) // size):
        if is_time:
            ts, rel = time_entry_at(data, i)
            out.write(f"timestamp: {ts} offset: {base + rel}\n")
        else:
            rel, pos = offset_entry_at(data, i)
            out.write(f"offset: {base + rel} position: {pos}\n")
            if batch_at is not None:
                span = batch_at.get(pos)
                if span is None or not span[0] <= base + rel <= span[1]:
                    found = "no batch starts there" if span is None else f"the batch there holds offsets {span[0]}..{span[1]}"
                    error(f"{path}: index entry {i} (byte position {i * size}) maps offset {base + rel} "
                           f"to log position {pos}, but {found}")
                    ok = False
    if len(data) % size:
        error(f"{path}: {len(data) % size} trailing bytes at byte position {len(data) - len(data) % size}")
        ok = False
    out.flush()
    return ok


def _abort_markers(txn_index_path: str) -> Optional[Dict[int, int]]:
    """``{offset: producer id}`` of the ABORT markers in the segment's ``.log``, None without one."""
    log_path = txn_index_path.rsplit(".", 1)[0] + ".log"
    try:
        with open(log_path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    out: Dict[int, int] = {}
    view = memoryview(data)
    for info in scan(data, verify_crc=False).batches:
        if info.magic != 2 or not info.attributes & ATTR_CONTROL:
            continue
        try:
            recs = RecordBatch(info, view[info.position : info.position + info.size], log_path).records()
            if recs and parse_control_type(recs[0].key) == ControlRecordType.ABORT:
                out[info.base_offset] = info.producer_id
        except PylogError:
            continue
    return out


def dump_txn_index_file(path: str, out: IO[str]) -> bool:
    """Print the entries of a ``.txnindex`` file as kafka-dump-log does (``version: 0 producerId: P
    firstOffset: F lastOffset: L lastStableOffset: S``); False when it does not decode (the entries
    before the bad one are printed, then an error naming the byte position) or an entry's
    ``lastOffset`` is not an ABORT marker of its producer in the segment's ``.log``.
    Complexity: O(bytes of the index and of its .log)."""
    base = base_offset_of(path)
    with open(path, "rb") as f:
        data = f.read()
    ok = True
    try:
        entries = decode_txn_entries(data, path, base)
    except CorruptIndexError as exc:
        bad = exc.position if exc.position is not None else 0
        whole = bad - bad % TXN_ENTRY_SIZE
        entries = decode_txn_entries(data[:whole], path, base) if whole else []
        error(f"{path}: fails validation: {exc}")
        ok = False
    markers = _abort_markers(path)
    for i, e in enumerate(entries):
        out.write(f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
                  f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}\n")
        if markers is not None and markers.get(e.last_offset) != e.producer_id:
            error(f"{path}: entry {i} (byte position {i * TXN_ENTRY_SIZE}): no ABORT marker of producer "
                  f"{e.producer_id} at offset {e.last_offset} in the segment's .log")
            ok = False
    out.flush()
    return ok


def cmd_dump_log(args: argparse.Namespace) -> int:
    ok = True
    for path in args.files:
        print(f"Dumping {path}", flush=True)
        try:
            if not os.path.isfile(path):
                error(f"{path}: no such file")
                ok = False
            elif path.endswith(".log"):
                progress = Progress(os.path.getsize(path), progress_enabled(args))
                ok = dump_log_file(path, sys.stdout, print_data=args.print_data, deep=args.deep_iteration,
                                   offsets_decoder=args.offsets_decoder, skip_metadata=args.skip_record_metadata,
                                   progress=progress, transaction_log_decoder=args.transaction_log_decoder) and ok
                progress.finish()
            elif path.endswith((".index", ".timeindex")):
                ok = dump_index_file(path, sys.stdout) and ok
            elif path.endswith(".txnindex"):
                ok = dump_txn_index_file(path, sys.stdout) and ok
            else:
                error(f"{path}: not a .log, .index, .timeindex or .txnindex file")
                ok = False
        except (OSError, PylogError) as exc:
            error(f"{path}: {exc}")
            ok = False
    return 0 if ok else 1


def add_parser(sub: Any) -> None:
    """Register the ``dump-log`` verb on the ``pylog`` command's subparsers."""
    d = sub.add_parser("dump-log", help="print the batches/records of .log files and the entries of index files",
                       description="Like kafka-dump-log: print batches of .log files, entries of "
                                   ".index/.timeindex/.txnindex files.")
    d.add_argument("files", nargs="+", metavar="FILE")
    d.add_argument("--print-data", action="store_true", help="print each record's key, value and headers (implies --deep-iteration)")
    d.add_argument("--deep-iteration", action="store_true", help="print each record, decompressing compressed batches")
    d.add_argument("--offsets-decoder", action="store_true",
                   help="decode the records as __consumer_offsets commits and group metadata (JSON; implies --print-data)")
    d.add_argument("--transaction-log-decoder", action="store_true",
                   help="decode the records as __transaction_state records (JSON; implies --print-data)")
    d.add_argument("--skip-record-metadata", action="store_true",
                   help="print only each record's key and payload (no batch lines, offsets or sizes)")
    d.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
