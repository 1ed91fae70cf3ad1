"""A partition's log with transactions, built with the real encoders, and its committed view (the model).

Used by ``tests/unit/test_txn_filter.py`` and ``tests/property/test_read_committed_model.py``.

:class:`TxnLog` appends data batches (transactional, idempotent or plain) and
COMMIT/ABORT markers (real control batches: ``encode_batch(control=True)`` with
the key and value of :class:`~pylog.storage.control_record.EndTransactionMarker`),
and keeps what a broker would know: each transactional batch's transaction,
each transaction's outcome, the ``.txnindex`` entries (producer id, first
offset, marker offset, LSO at the abort as Kafka's ``ProducerStateManager``
computes it: the first offset of another open transaction, else one past the
marker) and the LSO for a given high watermark.

The model of read_committed (:meth:`TxnLog.committed_view`) does not use the
aborted list or the markers: it asks each batch's transaction for its outcome.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from pylog.record import Record, encode_batch
from pylog.storage.control_record import ControlRecordType, EndTransactionMarker
from pylog.storage.txn_index import AbortedTxn, TransactionIndex

NOW_MS = 1_700_000_000_000


@dataclass
class Batch:
    base_offset: int
    last_offset: int
    data: bytes
    producer_id: int
    control: bool
    #: the transaction (index into TxnLog.txns) of a transactional data batch or marker
    txn: Optional[int]


@dataclass
class Txn:
    producer_id: int
    first_offset: int
    marker_offset: Optional[int] = None
    committed: Optional[bool] = None


@dataclass
class TxnLog:
    batches: List[Batch] = field(default_factory=list)
    txns: List[Txn] = field(default_factory=list)
    aborted: List[AbortedTxn] = field(default_factory=list)  # in marker order (the .txnindex entries)
    open: Dict[int, int] = field(default_factory=dict)  # producer id -> its open transaction
    sequences: Dict[int, int] = field(default_factory=dict)

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else 0

    def _append(self, records: Sequence[Record], producer_id: int, *, transactional: bool, control: bool,
                txn: Optional[int]) -> Batch:
        base = self.log_end_offset
        seq = -1
        if producer_id >= 0 and not control:
            seq = self.sequences.get(producer_id, 0)
            self.sequences[producer_id] = seq + len(records)
        data = encode_batch(list(records), now_ms=NOW_MS, base_offset=base, partition_leader_epoch=0,
                            producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                            base_sequence=seq, transactional=transactional, control=control)
        b = Batch(base, base + len(records) - 1, bytes(data), producer_id, control, txn)
        self.batches.append(b)
        return b

    def data(self, producer_id: int, count: int, *, transactional: bool) -> Batch:
        """A data batch of ``count`` records; a transactional one begins a transaction when none is open.
        Values are ``b"r<offset>"``."""
        base = self.log_end_offset
        records = [Record(value=b"r%d" % (base + i), key=b"k", timestamp=NOW_MS) for i in range(count)]
        txn = None
        if transactional:
            assert producer_id >= 0
            if producer_id not in self.open:
                self.open[producer_id] = len(self.txns)
                self.txns.append(Txn(producer_id, base))
            txn = self.open[producer_id]
        return self._append(records, producer_id, transactional=transactional, control=False, txn=txn)

    def end(self, producer_id: int, commit: bool) -> Optional[Batch]:
        """Write the COMMIT or ABORT marker of ``producer_id``'s open transaction (None when none is open)."""
        txn_id = self.open.pop(producer_id, None)
        if txn_id is None:
            return None
        marker = EndTransactionMarker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, 3)
        b = self._append([Record(value=marker.value(), key=marker.key(), timestamp=NOW_MS)], producer_id,
                         transactional=True, control=True, txn=txn_id)
        txn = self.txns[txn_id]
        txn.marker_offset = b.base_offset
        txn.committed = commit
        if not commit:
            others = [self.txns[t].first_offset for t in self.open.values()]
            lso = min(others + [b.base_offset + 1])
            self.aborted.append(AbortedTxn(producer_id, txn.first_offset, b.base_offset, lso))
        return b

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: the HW, or the first offset of a transaction that is open or whose marker is not
        below the HW yet, whichever is lower."""
        lso = high_watermark
        for t in self.txns:
            if t.marker_offset is None or t.marker_offset >= high_watermark:
                lso = min(lso, t.first_offset)
        return lso

    def boundaries(self) -> List[int]:
        """Every batch boundary: the base offsets and the log end offset."""
        return [b.base_offset for b in self.batches] + [self.log_end_offset]

    def committed_view(self, start: int, lso: int) -> List[Tuple[int, bytes]]:
        """The model: ``(offset, value)`` of every record a read_committed reader sees in ``[start, lso)``."""
        out: List[Tuple[int, bytes]] = []
        for b in self.batches:
            if b.control or b.last_offset < start or b.base_offset >= lso:
                continue
            if b.txn is not None:
                outcome = self.txns[b.txn].committed
                assert outcome is not None, "a batch below the LSO belongs to an ended transaction"
                if not outcome:
                    continue
            for o in range(max(b.base_offset, start), min(b.last_offset + 1, lso)):
                out.append((o, b"r%d" % o))
        return out

    def fetch_bytes(self, first: int, count: int) -> Tuple[bytes, int]:
        """The bytes of ``count`` batches from batch index ``first`` on, and one past their last offset."""
        chosen = self.batches[first:first + count]
        return b"".join(b.data for b in chosen), chosen[-1].last_offset + 1

    def batch_index_at(self, offset: int) -> int:
        """The index of the first batch whose last offset is at or after ``offset``."""
        for i, b in enumerate(self.batches):
            if b.last_offset >= offset:
                return i
        return len(self.batches)

    def segment_indexes(self, directory: str, bases: Sequence[int]) -> List[Tuple[int, TransactionIndex]]:
        """Real ``.txnindex`` files for segments starting at ``bases`` (sorted, the first 0), each with the
        entries whose marker falls in it."""
        out: List[Tuple[int, TransactionIndex]] = []
        for i, base in enumerate(bases):
            end = bases[i + 1] if i + 1 < len(bases) else None
            idx = TransactionIndex(os.path.join(directory, "%020d.txnindex" % base), base)
            for e in self.aborted:
                if e.last_offset >= base and (end is None or e.last_offset < end):
                    idx.append(e)
            out.append((base, idx))
        return out
