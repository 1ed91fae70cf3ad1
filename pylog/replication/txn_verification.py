"""KIP-890 part 1 on a partition leader: a transactional batch waits until its coordinator says the partition is in the transaction.

Kafka's ``AddPartitionsToTxnManager`` and ``ReplicaManager``'s
``appendRecordsWithTransactionVerification``, as pure logic the replica manager drives.

A produce whose records are a transactional batch (attributes bit 0x10, not a control batch), that
names its ``transactional_id`` and whose producer has no ongoing transaction at this epoch on the
partition (Kafka's ``hasOngoingTransaction(producerId, epoch)``), is *parked*: an
:class:`~pylog.replication.txn_messages.AddPartitionsToTxnRequest` with ``verify_only=True`` goes to
the producer's transaction coordinator (the leader of its ``__transaction_state`` partition, found by
``coordinator_for``), and the produce is appended when the coordinator says the partition is in the
transaction, or refused with the coordinator's error:

==============================================  ================================================
coordinator's answer                            the produce is refused with
==============================================  ================================================
``TransactionAbortableError`` (not added)       ``TransactionAbortableError`` (abortable)
``ProducerFencedError``                         ``InvalidProducerEpochError`` (as Kafka: producers
                                                handle that on the produce path)
``ConcurrentTransactionsError``, not the        ``NotEnoughReplicasError`` (retriable; Kafka's
coordinator, none known, no answer within       choice: it triggers no metadata refresh)
``timeout_ms``
anything else (``InvalidProducerIdMappingError``, ...)  the same error
==============================================  ================================================

Batches of the same producer for the same partition that arrive while a verification is out wait
behind it in order (so sequences stay in order), and are appended after it, each going through the
normal checks again. *Guard* (Kafka's ``VerificationGuard``): the producer's state on the partition
(epoch, coordinator epoch, ongoing transaction) is remembered when the verification starts; if a
marker changed it before the answer came, the answer may be about a transaction that has ended, so
the verification is sent again.

A produce without ``transactional_id`` is not verified (Kafka skips verification for a request
without one); nor is anything when ``coordinator_for`` is None (a replica manager without a broker).

Complexity: O(1) per produce plus O(waiting batches of the producer) per answer; :meth:`expire` is
O(verifications out). Durability: none (a crash loses the parked produces; their producers time out
and retry). Thread-safety: none; the broker's loop thread drives it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from pylog.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    ProducerFencedError,
)
from pylog.record import ATTR_CONTROL, ATTR_TRANSACTIONAL
from pylog.record.framing import BatchHeader
from pylog.replication.messages import ErrorType, Outbox, ProduceRequest
from pylog.replication.txn_messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

TP = Tuple[str, int]
#: (src, request) of a parked produce
Parked = Tuple[object, ProduceRequest]
#: (src, request, error class, message) of a refused produce
Refused = Tuple[object, ProduceRequest, type, str]
_HEADER_SIZE = 61
#: the coordinator's retriable answers, given to the producer as NotEnoughReplicasError (Kafka's mapping)
_RETRIABLE = (ConcurrentTransactionsError, CoordinatorNotAvailableError, CoordinatorLoadInProgressError,
              NotCoordinatorError)


@dataclass
class _Verification:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    correlation_id: int
    deadline_ms: int
    guard: Tuple[int, int, int]
    waiting: List[Parked] = field(default_factory=list)
    node: Optional[int] = None  # the coordinator it was sent to


def transactional_producer(records: Any) -> Optional[Tuple[int, int]]:
    """``(producer id, epoch)`` when ``records`` is one encoded transactional, non-control v2 batch, else None.
    O(1)."""
    if not isinstance(records, (bytes, bytearray, memoryview)) or len(records) < _HEADER_SIZE:
        return None
    h = BatchHeader.parse(records)
    if h.magic != 2 or not h.attributes & ATTR_TRANSACTIONAL or h.attributes & ATTR_CONTROL or h.producer_id < 0:
        return None
    return h.producer_id, h.producer_epoch


def _guard(producer_state: Any, producer_id: int) -> Tuple[int, int, int]:
    e = producer_state.producers.get(producer_id)
    return (-1, -1, -1) if e is None else (e.epoch, e.coordinator_epoch, e.txn_first_offset)


class TxnVerifier:
    """The KIP-890 part 1 gate of one replica manager (see the module docstring).

    ``next_corr``: the replica manager's correlation ids; ``timeout_ms``: how long a verification may
    take. ``coordinator_for(transactional_id)`` (set by the broker): the broker id of the transaction
    coordinator, or None when none is known.
    """

    def __init__(self, next_corr: Callable[[], int], timeout_ms: int):
        self._next_corr = next_corr
        self.timeout_ms = timeout_ms
        self.coordinator_for: Optional[Callable[[str], Optional[int]]] = None
        self._out: Dict[Tuple[TP, int], _Verification] = {}
        self._by_corr: Dict[int, Tuple[TP, int]] = {}

    def __len__(self) -> int:
        return len(self._out)

    def owns(self, correlation_id: int) -> bool:
        return correlation_id in self._by_corr

    def partition_of(self, correlation_id: int) -> TP:
        """The partition the verification ``correlation_id`` (one this verifier :meth:`owns`) is for."""
        return self._by_corr[correlation_id][0]

    def hold(self, src: object, req: ProduceRequest, producer_state: Any, now_ms: int,
             out: Outbox) -> Tuple[bool, Optional[Refused]]:
        """Should this produce wait? ``(False, None)``: append it now; ``(True, None)``: parked here;
        ``(True, refused)``: refuse it now (no coordinator known)."""
        if self.coordinator_for is None or req.transactional_id is None:
            return False, None
        pe = transactional_producer(req.records)
        if pe is None:
            return False, None
        pid, epoch = pe
        key = ((req.topic, req.partition), pid)
        v = self._out.get(key)
        if v is not None:
            v.waiting.append((src, req))
            return True, None
        entry = producer_state.producers.get(pid)
        if entry is not None and entry.txn_first_offset >= 0 and entry.epoch == epoch:
            return False, None  # its transaction is ongoing here: the partition was verified before
        v = _Verification(req.transactional_id, pid, epoch, -1, 0, _guard(producer_state, pid), [(src, req)])
        err = self._send(key, v, now_ms, out)
        if err is not None:
            return True, (src, req, NotEnoughReplicasError, err)
        return True, None

    def _send(self, key: Tuple[TP, int], v: _Verification, now_ms: int, out: Outbox) -> Optional[str]:
        assert self.coordinator_for is not None
        (topic, partition), _ = key
        node = self.coordinator_for(v.transactional_id)
        if node is None:
            return (f"{topic}-{partition}: cannot verify that the partition is in the transaction of "
                    f"{v.transactional_id!r}: its transaction coordinator is not available")
        v.correlation_id = self._next_corr()
        v.deadline_ms = now_ms + self.timeout_ms
        v.node = node
        self._out[key] = v
        self._by_corr[v.correlation_id] = key
        out.send(node, AddPartitionsToTxnRequest(v.transactional_id, v.producer_id, v.producer_epoch,
                                                 ((topic, partition),), v.correlation_id, verify_only=True))
        return None

    def on_response(self, resp: AddPartitionsToTxnResponse, producer_state: Optional[Any], now_ms: int,
                    out: Outbox) -> Tuple[List[Parked], List[Refused]]:
        """The coordinator answered: the produces to append now (in order) and those to refuse.
        ``producer_state``: the partition's (None: no replica any more; the appends then fail there)."""
        key = self._by_corr.pop(resp.correlation_id, None)
        if key is None:
            return [], []
        v = self._out.pop(key)
        (topic, partition), _ = key
        error: ErrorType = resp.error
        message = resp.message
        if error is None:
            for t, p, e in resp.partition_errors:
                if (t, p) == (topic, partition) and e is not None:
                    error, message = e, f"{topic}-{partition}: {e.__name__}"
        if error is None and producer_state is not None and _guard(producer_state, v.producer_id) != v.guard:
            # a marker ended a transaction meanwhile: the answer may be about that one; ask again
            v.guard = _guard(producer_state, v.producer_id)
            err = self._send(key, v, now_ms, out)
            if err is None:
                return [], []
            error, message = NotEnoughReplicasError, err
        if error is None:
            return v.waiting, []
        return [], [(src, r) + self._refusal(error, message, topic, partition, v) for src, r in v.waiting]

    @staticmethod
    def _refusal(error: type, message: str, topic: str, partition: int, v: _Verification) -> Tuple[type, str]:
        what = (f"{topic}-{partition}: transactional batch of producer {v.producer_id} (epoch {v.producer_epoch}, "
                f"{v.transactional_id!r}) refused: ")
        if error is ProducerFencedError:
            return InvalidProducerEpochError, what + f"the producer is fenced ({message})"
        if issubclass(error, _RETRIABLE):
            return NotEnoughReplicasError, what + f"could not verify the partition is in the transaction ({error.__name__}: {message})"
        return error, what + (message or error.__name__)

    def expire(self, now_ms: int, out: Outbox) -> List[Refused]:
        """Verifications unanswered past their deadline: their produces are refused (retriable). One whose
        transaction coordinator moved meanwhile (a crashed coordinator never answers) is sent to the new
        one, within the same deadline."""
        refused: List[Refused] = []
        if self.coordinator_for is not None:
            for key, v in list(self._out.items()):
                node = self.coordinator_for(v.transactional_id)
                if node is not None and node != v.node and now_ms < v.deadline_ms:
                    deadline = v.deadline_ms
                    self._by_corr.pop(v.correlation_id, None)
                    self._send(key, v, now_ms, out)
                    v.deadline_ms = deadline
        for key in [k for k, v in self._out.items() if now_ms >= v.deadline_ms]:
            v = self._out.pop(key)
            self._by_corr.pop(v.correlation_id, None)
            (topic, partition), _ = key
            for src, r in v.waiting:
                refused.append((src, r, NotEnoughReplicasError,
                                f"{topic}-{partition}: the transaction coordinator of {v.transactional_id!r} did not "
                                f"answer the verification within {self.timeout_ms} ms"))
        return refused


__all__ = ["TxnVerifier", "transactional_producer"]
