"""A follower's append (``Log.append_batches(assign_offsets=False)``): the fast path agrees with the
general one and with a pure-Python model of the batch headers.

``Log._append_fetched`` walks the fetched bytes once in C (framing, magic,
increasing offsets, CRC) and writes them without a copy; anything unusual
goes to the general path (``_append_one`` for one batch, else ``scan`` +
``_append_validated``), the code every follower append took before. Two logs get the
same chunks - one with the fast path, one with it switched off - and must
end with the same bytes, offsets, epoch cache, results and errors; the
headers handed to the follower's producer state must be what the pure-Python
decoder reads from each batch.
"""
from __future__ import annotations

import os
import tempfile
from typing import List, Optional, Tuple

from hypothesis import given
from hypothesis import strategies as st

import pylog
from pylog.errors import PylogError
from pylog.storage.log import Log
from pylog.record import encode_batch

#: one batch: (records, value size, leader epoch, producer id, timestamp)
batch_st = st.tuples(st.integers(1, 5), st.integers(0, 300), st.integers(0, 3), st.sampled_from([-1, 7, 9]),
                     st.integers(0, 3))
#: one chunk: its batches, an offset gap before it, and a damage (None, or a fraction of the bytes)
chunk_st = st.tuples(st.lists(batch_st, min_size=1, max_size=5), st.sampled_from([0, 0, 0, 2, -1]),
                     st.one_of(st.none(), st.none(), st.floats(0, 0.999)))


def _encode(base: int, batches: List[Tuple[int, int, int, int, int]], seqs: dict) -> Tuple[bytes, List[tuple]]:
    """The chunk's bytes and the model's headers (producer id, epoch, base sequence, base, last, max ts)."""
    out, model = b"", []
    for n, size, epoch, pid, ts in batches:
        seq = seqs.get(pid, 0) if pid >= 0 else -1
        if pid >= 0:
            seqs[pid] = seq + n
        stamp = 1_700_000_000_000 + ts * 1000
        out += encode_batch([b"v" * size] * n, now_ms=stamp, base_offset=base, partition_leader_epoch=epoch,
                            producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
        model.append((pid, 0 if pid >= 0 else -1, seq, base, base + n - 1, stamp))
        base += n
    return out, model


def _append(log: Log, data: bytes) -> Tuple[Optional[tuple], List[tuple], Optional[Tuple[type, str]]]:
    headers: List[tuple] = []
    try:
        res = log.append_batches(data, assign_offsets=False, headers_out=headers)
    except PylogError as exc:
        return None, headers, (type(exc), str(exc))
    return tuple(res), headers, None


def _file_bytes(log: Log) -> List[bytes]:
    out = []
    for seg in log.segments.values():
        with open(seg.log_path, "rb") as f:
            out.append(f.read())
    return out


@given(st.sampled_from([1500, 8192, 1 << 30]), st.lists(chunk_st, min_size=1, max_size=12))
def test_fast_and_general_follower_appends_agree(segment_bytes: int, chunks) -> None:
    with tempfile.TemporaryDirectory() as d:
        kw = dict(segment_bytes=segment_bytes, retention_ms=-1)
        # the same partition name in two directories, so that error messages compare equal
        fast = Log.open(os.path.join(d, "a", "t-0"), **kw)
        slow = Log.open(os.path.join(d, "b", "t-0"), **kw)
        slow._append_fetched = lambda data, headers_out: None  # type: ignore[method-assign]
        seqs: dict = {}
        for batches, gap, damage in chunks:
            base = max(0, fast.log_end_offset + gap)
            data, model = _encode(base, batches, seqs)
            if damage is not None:
                i = 8 + int(damage * (len(data) - 8))  # past the base offset (a damaged one is a gap)
                data = data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1:]
            got = _append(fast, data)
            want = _append(slow, data)
            if want[2] is not None:
                want = (want[0], want[1], (want[2][0], want[2][1].replace(slow.dir, fast.dir)))
            # (the general path reports headers only for chunks it scans, not for one batch)
            assert (got[0], got[2]) == (want[0], want[2]), (got, want)
            res, headers, err = got
            if err is not None:
                assert headers == []  # nothing appended, nothing reported
            elif damage is None:
                assert headers == model
                assert res[0] == model[0][3] and res[1] == model[-1][4]
                assert res[4] == res[1] - res[0] + 1
            assert fast.log_end_offset == slow.log_end_offset
            assert fast.epochs.entries == slow.epochs.entries
            assert _file_bytes(fast) == _file_bytes(slow)
            fast._check()
        fast.close()
        slow.close()


def test_a_multi_batch_fetch_takes_the_fast_path(tmp_path) -> None:
    """The fast path is what serves the usual fetched chunks (one or several batches)."""
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"))
    calls: List[int] = []
    real = log._append_fetched
    log._append_fetched = lambda data, h: calls.append(1) or real(data, h)  # type: ignore[method-assign]
    data, model = _encode(0, [(3, 10, 0, 7, 0), (2, 10, 1, 7, 1)], {})
    headers: List[tuple] = []
    res = log.append_batches(data, assign_offsets=False, headers_out=headers)
    assert calls == [1] and headers == model
    assert (res.base_offset, res.last_offset, res.records_count) == (0, 4, 5)
    assert log.epochs.entries == [(0, 0), (1, 3)]
    assert [r.offset for r in log.read(0)] == [0, 1, 2, 3, 4]
    log.close()
