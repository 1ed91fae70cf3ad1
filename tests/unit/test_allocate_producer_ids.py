"""AllocateProducerIds (KIP-730): the broker's side (asks when none or few ids are left, retries a
lost or refused request, never takes a block twice) and the controller's (a new block per request,
stored before the answer, refused for a stale registration, none from a deposed controller)."""
from __future__ import annotations

import os
import random
from typing import Any, List

import pytest

from pylog.errors import BrokerNotAvailableError, StaleBrokerEpochError, StaleControllerEpochError
from pylog.replication import replica_manager as rm_mod
from pylog.replication.controller import PRODUCER_ID_BLOCK_SIZE, Controller, MetadataStore
from pylog.replication.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    BrokerHeartbeat,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderAndIsrRequest,
)
from pylog.replication.replica_manager import CONTROLLER, ReplicaManager


def requests(out: Any) -> List[AllocateProducerIdsRequest]:
    return [m for dst, m in out.items if isinstance(m, AllocateProducerIdsRequest) and dst == CONTROLLER]


def make_rm(tmp_path: Any, incarnation: int = 1) -> ReplicaManager:
    return ReplicaManager(0, os.path.join(str(tmp_path), "broker-0"), clock_ms=lambda: 0, incarnation=incarnation)


def lai(block: Any, incarnation: int = 1, controller_epoch: int = 1) -> LeaderAndIsrRequest:
    return LeaderAndIsrRequest(0, controller_epoch, (), incarnation, (), block)


def take_all(rm: ReplicaManager) -> List[int]:
    got = []
    while True:
        try:
            got.append(rm.allocate_producer_id())
        except BrokerNotAvailableError:
            return got


def test_a_broker_without_a_block_asks_the_controller_and_takes_the_answer(tmp_path: Any) -> None:
    rm = make_rm(tmp_path)
    out = rm.handle("client", InitProducerIdRequest(5), 10)
    answer = [m for _, m in out.items if isinstance(m, InitProducerIdResponse)][0]
    assert answer.error is BrokerNotAvailableError
    [req] = requests(out)  # sent at once with the refusal
    assert (req.broker_id, req.broker_incarnation) == (0, 1)
    assert not requests(rm.tick(20))  # one request in flight
    rm.handle(CONTROLLER, AllocateProducerIdsResponse(req.correlation_id, None, "", 1000, 10, 1), 30)
    assert take_all(rm) == list(range(1000, 1010))
    rm._check()


def test_a_lost_request_is_sent_again_and_a_refused_one_after_the_backoff(tmp_path: Any) -> None:
    rm = make_rm(tmp_path)
    with pytest.raises(BrokerNotAvailableError):
        rm.allocate_producer_id()
    [first] = requests(rm.tick(0))
    assert not requests(rm.tick(rm_mod.ALLOCATE_PRODUCER_IDS_RETRY_MS - 1))
    [second] = requests(rm.tick(rm_mod.ALLOCATE_PRODUCER_IDS_RETRY_MS))  # the first was lost
    assert second.correlation_id != first.correlation_id
    t = rm_mod.ALLOCATE_PRODUCER_IDS_RETRY_MS
    rm.handle(CONTROLLER, AllocateProducerIdsResponse(second.correlation_id, StaleBrokerEpochError, "not yet", -1, 0,
                                                      1), t)
    assert not requests(rm.tick(t + rm_mod.ALLOCATE_PRODUCER_IDS_BACKOFF_MS - 1))
    [third] = requests(rm.tick(t + rm_mod.ALLOCATE_PRODUCER_IDS_BACKOFF_MS))
    # the late answer to the first request is still a block of this incarnation: taken
    rm.handle(CONTROLLER, AllocateProducerIdsResponse(first.correlation_id, None, "", 50, 5, 1), t + 200)
    assert take_all(rm)[:1] == [50]


def test_an_answer_meant_for_another_incarnation_is_dropped(tmp_path: Any) -> None:
    old = make_rm(tmp_path / "old", incarnation=1)
    with pytest.raises(BrokerNotAvailableError):
        old.allocate_producer_id()
    [req] = requests(old.tick(0))
    new = make_rm(tmp_path / "new", incarnation=2)
    new.handle(CONTROLLER, AllocateProducerIdsResponse(req.correlation_id, None, "", 0, 10, 1), 5)
    with pytest.raises(BrokerNotAvailableError):
        new.allocate_producer_id()


def test_running_low_asks_before_the_block_is_used_up(tmp_path: Any) -> None:
    rm = make_rm(tmp_path)
    rm.handle(CONTROLLER, lai((0, 20)), 0)
    assert not requests(rm.tick(1))
    got = [rm.allocate_producer_id() for _ in range(18)]  # 2 left: not below a tenth of 20 (2)
    assert not requests(rm.tick(2))
    got.append(rm.allocate_producer_id())  # 1 left < 2 (a tenth of 20): ask now
    [req] = requests(rm.tick(3))
    rm.handle(CONTROLLER, AllocateProducerIdsResponse(req.correlation_id, None, "", 40, 20, 1), 4)
    got += take_all(rm)
    assert got == list(range(0, 20)) + list(range(40, 60))


def test_a_leader_and_isr_repeating_an_older_block_is_not_taken_again(tmp_path: Any) -> None:
    """The controller pushed block A; the broker used it, asked, got B; a LeaderAndIsr still carrying A
    (sent before B) must not hand A's ids out a second time."""
    rm = make_rm(tmp_path)
    rm.handle(CONTROLLER, lai((0, 10)), 0)
    got = take_all(rm)
    [req] = requests(rm.tick(1))
    rm.handle(CONTROLLER, AllocateProducerIdsResponse(req.correlation_id, None, "", 30, 10, 1), 2)
    rm.handle(CONTROLLER, lai((0, 10)), 3)  # late repeat of A
    rm.handle(CONTROLLER, lai((10, 10), controller_epoch=2), 4)  # an older block than B, from a new controller
    got += take_all(rm)
    assert got == list(range(0, 10)) + list(range(30, 40))
    rm._check()


def controller_with(brokers: Any = (0, 1, 2), path: Any = None) -> Any:
    store = MetadataStore(list(brokers), random.Random(1), path=path)
    assert store.try_claim(0, 0, 1_000)
    c = Controller(0, store, session_timeout_ms=1_000, now_ms=0)
    for b in brokers:
        c.handle(b, BrokerHeartbeat(b, 1), 0)
    return store, c


def answers(out: Any) -> List[AllocateProducerIdsResponse]:
    return [m for _, m in out.items if isinstance(m, AllocateProducerIdsResponse)]


def test_the_controller_stores_each_block_before_answering(tmp_path: Any) -> None:
    path = str(tmp_path / "cluster-metadata.json")
    store, c = controller_with(path=path)
    start = store.next_producer_id
    [a] = answers(c.handle(1, AllocateProducerIdsRequest(1, 1, 7), 10))
    [b] = answers(c.handle(1, AllocateProducerIdsRequest(1, 1, 8), 11))
    assert (a.correlation_id, a.error, a.producer_id_len, a.broker_incarnation) == (7, None, PRODUCER_ID_BLOCK_SIZE, 1)
    assert a.producer_id_start >= start and b.producer_id_start == a.producer_id_start + PRODUCER_ID_BLOCK_SIZE
    # a new controller (another process reading the file) continues after both blocks
    again = MetadataStore([0, 1, 2], random.Random(2), path=path)
    assert again.next_producer_id == b.producer_id_start + PRODUCER_ID_BLOCK_SIZE
    # the block is also what the broker's LeaderAndIsr requests carry now
    assert c._lai(1, ()).producer_id_block == (b.producer_id_start, PRODUCER_ID_BLOCK_SIZE)


def test_the_controller_refuses_a_stale_registration(tmp_path: Any) -> None:
    store, c = controller_with()
    before = store.next_producer_id
    [a] = answers(c.handle(1, AllocateProducerIdsRequest(1, 0, 7), 10))  # incarnation 0: restarted since
    assert a.error is StaleBrokerEpochError and a.producer_id_len == 0
    [a] = answers(c.handle(5, AllocateProducerIdsRequest(5, 1, 8), 10))  # not a broker of this cluster
    assert a.error is StaleBrokerEpochError
    assert store.next_producer_id == before


def test_a_failing_store_gives_no_block_and_a_deposed_controller_none(tmp_path: Any) -> None:
    path = str(tmp_path / "cluster-metadata.json")
    store, c = controller_with(path=path)
    before = store.next_producer_id

    def fail(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    store._append = fail  # type: ignore[method-assign]
    store._write_snapshot = fail  # type: ignore[method-assign]
    assert not answers(c.handle(1, AllocateProducerIdsRequest(1, 1, 7), 10))
    assert store.next_producer_id == before and not c.active  # stopped acting (resigned)
    with pytest.raises(StaleControllerEpochError):
        store.allocate_producer_ids(10, controller_epoch=store.controller_epoch - 1)
