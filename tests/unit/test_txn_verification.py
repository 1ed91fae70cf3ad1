"""KIP-890 part 1's gate on a partition leader (pylog/replication/txn_verification.py), as pure logic:
which produces wait, what is sent to the coordinator, the error mapping, the guard, the timeout."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from pylog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    ProducerFencedError,
    TransactionAbortableError,
)
from pylog.record import Record, encode_batch
from pylog.replication.messages import ACKS_ALL, Outbox, ProduceRequest
from pylog.replication.txn_messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from pylog.replication.txn_verification import TxnVerifier, transactional_producer
from pylog.storage.producer_state import ProducerEntry

PID, EPOCH, TID = 7, 3, "t-1"


class State:
    """A partition's producer state, as far as the gate reads it."""

    def __init__(self) -> None:
        self.producers: Dict[int, ProducerEntry] = {}


def batch(pid: int = PID, epoch: int = EPOCH, seq: int = 0, transactional: bool = True) -> bytes:
    return bytes(encode_batch([Record(value=b"v")], now_ms=0, producer_id=pid, producer_epoch=epoch,
                              base_sequence=seq, transactional=transactional))


def produce(corr: int, data: bytes, tid: Optional[str] = TID) -> ProduceRequest:
    return ProduceRequest("t", 0, data, ACKS_ALL, 30_000, corr, transactional_id=tid)


def verifier(node: Optional[int] = 5) -> TxnVerifier:
    ids = iter(range(100, 1000))
    v = TxnVerifier(lambda: next(ids), timeout_ms=1_000)
    v.coordinator_for = lambda tid: node
    return v


def sent(out: Outbox) -> List[Any]:
    return [(dst, msg) for dst, msg in out.items]


def test_only_transactional_batches_with_an_id_and_no_ongoing_transaction_wait() -> None:
    v, st = verifier(), State()
    assert transactional_producer(batch()) == (PID, EPOCH)
    assert transactional_producer(batch(transactional=False)) is None
    assert transactional_producer([b"plain"]) is None
    out = Outbox()
    assert v.hold("c", produce(1, batch(transactional=False)), st, 0, out) == (False, None)
    assert v.hold("c", produce(2, batch(), tid=None), st, 0, out) == (False, None)
    e = st.producers[PID] = ProducerEntry(PID, EPOCH)
    e.txn_first_offset = 10  # ongoing at this epoch: verified before
    assert v.hold("c", produce(3, batch()), st, 0, out) == (False, None)
    assert out.items == []
    e.epoch = EPOCH - 1  # ongoing at another epoch: verify
    assert v.hold("c", produce(4, batch()), st, 0, out) == (True, None)
    [(dst, req)] = sent(out)
    assert dst == 5 and req == AddPartitionsToTxnRequest(TID, PID, EPOCH, (("t", 0),), req.correlation_id,
                                                          verify_only=True)


def test_verified_appends_everything_that_waited_in_order() -> None:
    v, st, out = verifier(), State(), Outbox()
    reqs = [produce(i, batch(seq=i)) for i in range(3)]
    for r in reqs:
        assert v.hold("c", r, st, 0, out) == (True, None)
    assert len(out.items) == 1  # one verification; the others wait behind it
    corr = out.items[0][1].correlation_id
    appends, refused = v.on_response(AddPartitionsToTxnResponse(corr, partition_errors=(("t", 0, None),)), st, 1, out)
    assert [r for _, r in appends] == reqs and refused == [] and len(v) == 0
    assert v.on_response(AddPartitionsToTxnResponse(corr), st, 2, out) == ([], [])  # a duplicate answer


@pytest.mark.parametrize("error, expected", [
    (TransactionAbortableError, TransactionAbortableError),
    (ProducerFencedError, InvalidProducerEpochError),
    (ConcurrentTransactionsError, NotEnoughReplicasError),
    (NotCoordinatorError, NotEnoughReplicasError),
    (InvalidProducerIdMappingError, InvalidProducerIdMappingError),
])
def test_the_coordinators_errors_are_mapped_as_kafka(error: type, expected: type) -> None:
    for whole in (True, False):
        v, st, out = verifier(), State(), Outbox()
        v.hold("c", produce(1, batch()), st, 0, out)
        v.hold("c2", produce(2, batch(seq=1)), st, 0, out)
        corr = out.items[0][1].correlation_id
        resp = (AddPartitionsToTxnResponse(corr, error=error) if whole
                else AddPartitionsToTxnResponse(corr, partition_errors=(("t", 0, error),)))
        appends, refused = v.on_response(resp, st, 1, out)
        assert appends == [] and [(src, r.correlation_id, e) for src, r, e, _ in refused] == [
            ("c", 1, expected), ("c2", 2, expected)]
        assert all("t-0" in msg and repr(TID) in msg for *_, msg in refused)


def test_a_marker_during_verification_sends_it_again() -> None:
    """The guard: the answer may be about the transaction the marker ended, so it is asked again."""
    v, st, out = verifier(), State(), Outbox()
    e = st.producers[PID] = ProducerEntry(PID, EPOCH)
    v.hold("c", produce(1, batch()), st, 0, out)
    first = out.items[0][1].correlation_id
    e.coordinator_epoch = 4  # a marker was written meanwhile
    appends, refused = v.on_response(AddPartitionsToTxnResponse(first), st, 1, out)
    assert (appends, refused) == ([], []) and len(out.items) == 2
    second = out.items[1][1].correlation_id
    assert second != first
    appends, refused = v.on_response(AddPartitionsToTxnResponse(second), st, 2, out)
    assert len(appends) == 1 and refused == []


def test_no_coordinator_or_no_answer_is_retriable() -> None:
    v, st, out = verifier(node=None), State(), Outbox()
    held, refused = v.hold("c", produce(1, batch()), st, 0, out)
    assert held and refused is not None and refused[2] is NotEnoughReplicasError and len(v) == 0
    v, out = verifier(), Outbox()
    v.hold("c", produce(1, batch()), st, 0, out)
    assert v.expire(999, out) == []
    [(src, r, err, msg)] = v.expire(1_000, out)
    assert (src, r.correlation_id, err) == ("c", 1, NotEnoughReplicasError) and "1000 ms" in msg
    assert len(v) == 0 and not v.owns(out.items[0][1].correlation_id)


def test_a_verification_follows_its_coordinator_when_it_moves() -> None:
    node = [5]
    v, st, out = verifier(), State(), Outbox()
    v.coordinator_for = lambda tid: node[0]
    v.hold("c", produce(1, batch()), st, 0, out)
    first = out.items[0][1].correlation_id
    assert v.expire(100, out) == [] and len(out.items) == 1  # still there: nothing sent again
    node[0] = 6  # the coordinator crashed; another broker leads the __transaction_state partition
    assert v.expire(200, out) == []
    assert [dst for dst, _ in out.items] == [5, 6] and not v.owns(first)
    assert v.on_response(AddPartitionsToTxnResponse(first), st, 300, out) == ([], [])  # the old answer: ignored
    appends, _ = v.on_response(AddPartitionsToTxnResponse(out.items[1][1].correlation_id), st, 300, out)
    assert len(appends) == 1
    v.hold("c", produce(2, batch(seq=1)), st, 400, out)
    node[0] = 7
    assert len(v.expire(1_400, out)) == 1  # the deadline is the first send's: not extended by the move
