"""The one-batch append (``Log._append_one``: ``plg_batch_stamp_one`` for a leader, ``plg_batch_check_one``
for a follower) against the general path it short-cuts (``scan`` [+ ``set_base_offset``] +
``_append_validated``).

Two logs get the same requests - one batch, several batches, damaged bytes, and for followers batches
below the log end - one through ``append_batches`` as it is, the other with the short cut turned off.
Every result, every refusal and the bytes of every segment and index must be the same, and the short
cut must refuse (leaving the log untouched) anything that is not exactly one valid v2 batch.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, List, Optional, Tuple

import hypothesis.strategies as st
from hypothesis import given, settings

from pylog._native import ffi, lib
from pylog.errors import PylogError
from pylog.storage.log import Log
from pylog.record import Record, encode_batch

NOW = int(time.time() * 1000)

values = st.lists(st.binary(max_size=60), min_size=1, max_size=12)
one_request = st.tuples(
    st.lists(values, min_size=1, max_size=3),  # batches in the request
    st.sampled_from([None, 0, 3, 7]),  # leader epoch passed to append_batches
    st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(0, 255))),  # (byte, xor) damage
    st.booleans(),  # keyed records (the general encoder) or plain values
)


def _request(batches: List[List[bytes]], damage: Optional[Tuple[int, int]], keyed: bool,
             base: int = 0, epoch: int = -1) -> bytearray:
    out = bytearray()
    for i, vals in enumerate(batches):
        recs: List[Any] = [Record(v, key=b"k%d" % j) for j, v in enumerate(vals)] if keyed else vals
        out += encode_batch(recs, now_ms=NOW + i, producer_id=-1, base_offset=base, partition_leader_epoch=epoch)
        base += len(vals)
    if damage is not None:
        pos, xor = damage
        out[pos % len(out)] ^= xor
    return out


def _files(d: str) -> List[Tuple[str, bytes]]:
    return [(n, open(os.path.join(d, n), "rb").read()) for n in sorted(os.listdir(d))
            if n.endswith((".log", ".index", ".timeindex"))]


def _apply(log: Log, data: bytearray, epoch: Optional[int], assign: bool = True) -> Any:
    try:
        r = log.append_batches(bytes(data), assign_offsets=assign, leader_epoch=epoch if assign else None)
        return ("ok", tuple(r))
    except PylogError as exc:
        return ("error", type(exc).__name__)


def _two_logs(root: str) -> Tuple[Log, Log]:
    """The log under test and its twin with the one-batch short cut switched off."""
    fast = Log.open(os.path.join(root, "a", "t-0"), segment_bytes=700, index_interval_bytes=64)
    slow = Log.open(os.path.join(root, "b", "t-0"), segment_bytes=700, index_interval_bytes=64)
    slow._append_one = lambda buf, assign, epoch, client=None: None  # type: ignore[method-assign]
    return fast, slow


def _same_after(fast: Log, slow: Log, data: bytearray, epoch: Optional[int], assign: bool) -> None:
    assert _apply(fast, data, epoch, assign) == _apply(slow, data, epoch, assign)
    assert fast.log_end_offset == slow.log_end_offset
    assert fast.epochs.entries == slow.epochs.entries


def _same_files(fast: Log, slow: Log) -> None:
    fast.flush()
    slow.flush()
    assert _files(fast.dir) == _files(slow.dir)
    assert [tuple(r) for r in fast.read(0)] == [tuple(r) for r in slow.read(0)]
    fast.close()
    slow.close()


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(one_request, min_size=1, max_size=6))
def test_one_batch_short_cut_equals_the_general_path(requests):
    root = tempfile.mkdtemp(prefix="pylog-leader-append-")
    try:
        fast, slow = _two_logs(root)
        for batches, epoch, damage, keyed in requests:
            _same_after(fast, slow, _request(batches, damage, keyed), epoch, True)
        _same_files(fast, slow)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@given(vals=values, damage=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(1, 255))),
       extra=st.binary(max_size=8), base=st.integers(0, 2**62), epoch=st.integers(-1, 2**31 - 1))
def test_stamp_one_checks_everything_before_writing(vals, damage, extra, base, epoch):
    data = encode_batch(vals, now_ms=NOW) + extra
    if damage is not None:
        data[damage[0] % len(data)] ^= damage[1]
    before = bytes(data)
    info = ffi.new("plg_batch_info_t *")
    rc = lib.plg_batch_stamp_one(ffi.from_buffer(data), len(data), base, epoch, info)
    body_ok = damage is None or damage[0] % len(data) >= len(data) - len(extra) or damage[0] % len(data) in range(0, 8) \
        or damage[0] % len(data) in range(12, 16)  # base offset and leader epoch are not under the CRC
    if rc != lib.PLG_OK:
        assert bytes(data) == before  # refused: nothing stamped
        assert extra or not body_ok or damage is not None
        return
    assert not extra and body_ok
    assert int.from_bytes(data[0:8], "big") == base == info.base_offset
    assert int.from_bytes(data[12:16], "big", signed=True) == epoch == info.partition_leader_epoch
    assert info.last_offset == base + len(vals) - 1 and info.records_count == len(vals)
    assert bytes(data[16:]) == before[16:] and bytes(data[8:12]) == before[8:12]


follower_request = st.tuples(
    st.lists(values, min_size=1, max_size=3),
    st.integers(-3, 3),  # where the request starts, relative to the log end (below it: refused)
    st.integers(0, 5),  # the leader epoch the batches carry
    st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(0, 255))),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(follower_request, min_size=1, max_size=6))
def test_one_batch_short_cut_equals_the_general_path_for_followers(requests):
    root = tempfile.mkdtemp(prefix="pylog-follower-append-")
    try:
        fast, slow = _two_logs(root)
        epoch_floor = 0
        for batches, shift, epoch, damage, keyed in requests:
            epoch_floor = max(epoch_floor, epoch)  # a follower copies epochs that never go down
            data = _request(batches, damage, keyed, base=max(0, fast.log_end_offset + shift), epoch=epoch_floor)
            _same_after(fast, slow, data, None, False)
        _same_files(fast, slow)
    finally:
        shutil.rmtree(root, ignore_errors=True)
