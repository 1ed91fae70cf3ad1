"""ClientNode's request timeouts: one FIFO per timeout value and one scheduler timer, not a timer per request."""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from pylog.client._node import ClientNode
from pylog.runtime.scheduler import SimScheduler
from pylog.runtime.transport.direct import DirectTransport


class Req(NamedTuple):
    correlation_id: int


class Resp(NamedTuple):
    correlation_id: int


def _setup() -> Tuple[SimScheduler, ClientNode, List[int]]:
    sched = SimScheduler(seed=1)
    transport = DirectTransport(sched)
    inbox: List[int] = []
    transport.register("broker", lambda src, msg: inbox.append(msg.correlation_id))
    return sched, ClientNode("test", sched, transport), inbox


def test_each_request_times_out_exactly_at_its_deadline_and_answered_ones_never():
    sched, node, inbox = _setup()
    outcome: Dict[int, Tuple[int, Optional[Any]]] = {}
    t0 = sched.clock.now_ms()

    def send(corr: int, timeout: int) -> None:
        node.request("broker", Req(corr), timeout,
                     lambda resp, corr=corr: outcome.__setitem__(corr, (sched.clock.now_ms() - t0, resp)))

    # interleaved timeout values, sent at different times; even ids get answered at t=150
    plan = [(1, 0, 300), (2, 0, 100), (3, 10, 300), (4, 20, 50), (5, 20, 300), (6, 60, 100), (7, 200, 30)]
    for corr, at, timeout in plan:
        sched.call_later(at, send, corr, timeout)
    sched.call_later(150, lambda: [node._on_message("broker", Resp(c)) for c in (2, 4, 6) if c in node._pending])
    sched.run_for(1000)
    expected = {}
    for corr, at, timeout in plan:
        if corr % 2 == 0 and at + timeout > 150:
            expected[corr] = (150, Resp(corr))  # answered before its deadline
        else:
            expected[corr] = (at + timeout, None)  # timed out at exactly its deadline
    assert outcome == expected
    assert not node._pending


def test_fifos_hold_only_about_what_is_in_flight():
    sched, node, inbox = _setup()
    answered = []
    for corr in range(1, 5001):
        node.request("broker", Req(corr), 30_000, answered.append)
        sched.run_for(1)  # delivered
        node._on_message("broker", Resp(corr))
    assert len(answered) == 5000 and all(r is not None for r in answered)
    assert sum(len(f) for f in node._deadlines.values()) <= 1  # answered entries left the head
    live = [t for _, _, t in sched._heap if not t.cancelled]
    assert len(live) <= 1  # one timer for the whole node


def test_close_fails_every_pending_request_once():
    sched, node, inbox = _setup()
    got: List[Optional[Any]] = []
    for corr in range(1, 4):
        node.request("broker", Req(corr), 100 * corr, got.append)
    node.close_node()
    assert got == [None, None, None]
    sched.run_for(1000)
    assert got == [None, None, None]  # the timer does not fire them again
