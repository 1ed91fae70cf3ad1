"""A follower's append (``Log.append_batches(assign_offsets=False)``): the fast path agrees with the
general one and with a pure-Python model of the batch headers.

``Log._append_fetched`` walks the fetched bytes once in C (framing, magic,
increasing offsets, CRC) and writes them without a copy; anything unusual
goes to the general path (``_append_one`` for one batch, else ``scan`` +
``_append_validated``), the code every follower append took before. Two logs get the
same chunks - one with the fast path, one with it switched off - and must
end with the same bytes, offsets, epoch cache, results and errors; the
producer state each log records from the batches it wrote must be what a
model fed with the headers each batch was encoded with holds.
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
from pylog.storage.producer_state import ProducerBatch, ProducerStateManager

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


def _append(log: Log, data: bytes) -> Tuple[Optional[tuple], Optional[Tuple[type, str]]]:
    try:
        res = log.append_batches(data, assign_offsets=False)
    except PylogError as exc:
        return None, (type(exc), str(exc))
    return tuple(res), None


def _producers(ps: ProducerStateManager) -> dict:
    return {pid: (e.epoch, list(e.batches)) for pid, e in ps.producers.items()}


def _feed(model: ProducerStateManager, headers: List[tuple]) -> None:
    model.append([ProducerBatch(*h) for h in headers], headers[-1][4] + 1)


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
        slow._append_fetched = lambda data: None  # type: ignore[method-assign]
        model = ProducerStateManager(os.path.join(d, "model"))
        fast.producer_state, slow.producer_state  # loaded: both logs record their producers from here on
        seqs: dict = {}
        for batches, gap, damage in chunks:
            base = max(0, fast.log_end_offset + gap)
            data, headers = _encode(base, batches, seqs)
            if damage is not None:
                i = 8 + int(damage * (len(data) - 8))  # past the base offset (a damaged one is a gap)
                data = data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1:]
            end_before = fast.log_end_offset
            got = _append(fast, data)
            want = _append(slow, data)
            if want[1] is not None:
                want = (want[0], (want[1][0], want[1][1].replace(slow.dir, fast.dir)))
            assert got == want, (got, want)
            res, err = got
            # What landed (all, or after an error the runs of a split append before the failing
            # one) is in the producer state; nothing else is.
            landed = [h for h in headers if end_before <= h[3] and h[4] < fast.log_end_offset]
            if landed:
                _feed(model, landed)
            if err is None:
                assert len(landed) == len(headers) or damage is not None
                if damage is None:
                    assert res[0] == headers[0][3] and res[1] == headers[-1][4]
                    assert res[4] == res[1] - res[0] + 1
            assert _producers(fast.producer_state) == _producers(slow.producer_state) == _producers(model)
            assert fast.producer_state.map_end_offset == slow.producer_state.map_end_offset == fast.log_end_offset
            assert fast.log_end_offset == slow.log_end_offset
            assert fast.epochs.entries == slow.epochs.entries
            assert _file_bytes(fast) == _file_bytes(slow)
            fast._check()
            slow._check()
        fast.close()
        slow.close()


def test_a_multi_batch_fetch_takes_the_fast_path(tmp_path) -> None:
    """The fast path is what serves the usual fetched chunks (one or several batches)."""
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"))
    calls: List[int] = []
    real = log._append_fetched
    log._append_fetched = lambda data: calls.append(1) or real(data)  # type: ignore[method-assign]
    data, headers = _encode(0, [(3, 10, 0, 7, 0), (2, 10, 1, 7, 1)], {})
    model = ProducerStateManager(os.path.join(tmp_path, "model"))
    _feed(model, headers)
    log.producer_state  # loaded: the append records its producers
    res = log.append_batches(data, assign_offsets=False)
    assert calls == [1] and _producers(log.producer_state) == _producers(model)
    assert (res.base_offset, res.last_offset, res.records_count) == (0, 4, 5)
    assert log.epochs.entries == [(0, 0), (1, 3)]
    assert [r.offset for r in log.read(0)] == [0, 1, 2, 3, 4]
    log.close()
