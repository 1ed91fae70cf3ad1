"""Runtime: simulated clock and scheduler, simulated network faults, real scheduler threads."""
from __future__ import annotations

import sys
import threading
from typing import List, Tuple

import pytest

from pylog.runtime.clock import SimClock
from pylog.runtime.scheduler import RealScheduler, SimScheduler
from pylog.runtime.transport.direct import DirectTransport
from pylog.runtime.transport.simnet import SimulatedNetwork


def test_sim_clock_never_goes_back():
    c = SimClock(100)
    c.advance_to(150)
    with pytest.raises(ValueError):
        c.advance_to(149)
    assert c.now_ms() == 150 and c() == 150


def test_sim_scheduler_runs_in_time_order_and_ties_fifo():
    s = SimScheduler(1)
    seen = []
    s.call_later(30, seen.append, "c")
    s.call_later(10, seen.append, "a")
    s.call_later(10, seen.append, "b")
    t = s.call_later(20, seen.append, "cancelled")
    t.cancel()
    start = s.clock.now_ms()
    s.run_for(25)
    assert seen == ["a", "b"] and s.clock.now_ms() == start + 25
    assert s.wait_until(lambda: "c" in seen, None)
    assert s.clock.now_ms() == start + 30
    assert not s.wait_until(lambda: False, 100)
    s._check()


def _run_net(seed):
    s = SimScheduler(seed)
    net = SimulatedNetwork(s, min_latency_ms=1, max_latency_ms=50, loss=0.2)
    got = []
    net.register("b", lambda src, m: got.append((s.clock.now_ms(), m)))
    net.register("a", lambda src, m: None)
    for i in range(200):
        net.send("a", "b", i)
    s.run_for(1_000)
    return got


def test_simnet_is_fifo_per_link_lossy_and_deterministic():
    got = _run_net(5)
    msgs = [m for _, m in got]
    assert msgs == sorted(msgs)  # FIFO despite random latency
    assert 100 < len(msgs) < 200  # ~20% lost
    assert got == _run_net(5)
    assert got != _run_net(6)


def test_simnet_partitions_one_way_and_heal():
    s = SimScheduler(0)
    net = SimulatedNetwork(s)
    got = []
    for n in (0, 1, 2):
        net.register(n, lambda src, m, n=n: got.append((src, n, m)))
    net.partition([0], [1, 2], one_way=True)
    net.send(0, 1, "x")
    net.send(1, 0, "y")
    s.run_for(100)
    assert got == [(1, 0, "y")]
    net.partition([2])  # two-way from everyone else
    net.send(2, 1, "z")
    net.send(1, 2, "w")
    s.run_for(100)
    assert len(got) == 1
    net.heal()
    net.send(0, 1, "x2")
    net.send(2, 1, "z2")
    s.run_for(100)
    assert sorted(m for _, _, m in got) == ["x2", "y", "z2"]
    net._check()


def test_messages_to_a_restarted_node_are_dropped():
    s = SimScheduler(0)
    net = SimulatedNetwork(s, min_latency_ms=10, max_latency_ms=10)
    got = []
    net.register("b", lambda src, m: got.append(("old", m)))
    net.send("a", "b", 1)
    net.unregister("b")
    net.register("b", lambda src, m: got.append(("new", m)))  # restarted before delivery
    net.send("a", "b", 2)
    s.run_for(100)
    assert got == [("new", 2)]


def test_real_scheduler_runs_on_its_thread_and_close_joins():
    s = RealScheduler()
    t = DirectTransport(s)
    seen = []
    t.register("x", lambda src, m: seen.append((threading.current_thread().name, m)))
    t.send("y", "x", "hello")
    assert s.wait_until(lambda: bool(seen), 5_000)
    assert seen == [("pylog-loop", "hello")]
    assert s.run_sync(lambda: threading.current_thread().name) == "pylog-loop"
    with pytest.raises(ZeroDivisionError):
        s.run_sync(lambda: 1 / 0)
    s.close()
    assert not s.thread.is_alive()


def test_real_scheduler_keeps_callback_errors_for_check():
    s = RealScheduler()
    try:
        s.call_soon(lambda: 1 / 0)
        assert s.wait_until(lambda: bool(s.errors), 5_000)
        assert s.run_sync(lambda: "alive") == "alive"  # the loop survived
        with pytest.raises(AssertionError, match="ZeroDivisionError"):
            s._check()
    finally:
        s.close()


def test_real_scheduler_call_soon_from_many_threads_loses_no_wake_up_and_keeps_order():
    # call_soon appends without the loop's lock and notifies only a sleeping loop: a wake-up
    # lost between the loop's last look at the queue and its wait would leave a callback
    # unrun (the heap is empty, so the loop would sleep for ever). Each poster waits for its
    # own callback before the next, so the loop goes back to sleep between almost every post.
    s = RealScheduler()
    ran: List[Tuple[int, int]] = []
    failures: List[str] = []
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads between almost any two bytecodes: races show up

    def poster(k: int) -> None:
        for i in range(1000):
            done = threading.Event()
            s.call_soon(lambda i=i, done=done: (ran.append((k, i)), done.set()))
            if i % 3 == 0 and not done.wait(5):  # liveness bound, not a speed check
                failures.append(f"thread {k}: callback {i} never ran")
                return

    try:
        threads = [threading.Thread(target=poster, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures
        assert s.wait_until(lambda: len(ran) == 4000, 10_000)
        for k in range(4):
            assert [i for kk, i in ran if kk == k] == list(range(1000))  # FIFO per poster
    finally:
        sys.setswitchinterval(old_interval)
        s.close()


def test_real_scheduler_interleaves_timers_and_call_soon():
    # neither source starves the other: a callback that re-posts itself with call_soon for
    # ever must not keep a due timer from running
    s = RealScheduler()
    fired = threading.Event()
    spins = [0]

    def spin() -> None:
        spins[0] += 1
        if not fired.is_set():
            s.call_soon(spin)

    try:
        s.call_soon(spin)
        s.call_later(20, fired.set)
        assert fired.wait(10)
        assert spins[0] > 1
    finally:
        s.close()


def test_simnet_dropped_connection_loses_what_is_in_flight_both_ways_and_tells_both_ends():
    s = SimScheduler(3)
    net = SimulatedNetwork(s, min_latency_ms=5, max_latency_ms=30)
    got, told = [], []
    for n in ("client", "broker", "other"):
        net.register(n, lambda src, m, n=n: got.append((src, n, m)))
        net.on_disconnect(n, lambda peer, conn, n=n: told.append((n, peer, conn, s.clock.now_ms())))
    for i in range(5):
        net.send("client", "broker", ("req", i))
        net.send("broker", "client", ("resp", i))
        net.send("client", "other", ("o", i))
    assert net.connection("client", "broker") == net.connection("broker", "client") == 0
    net.drop_connection("broker", "client")
    now = s.clock.now_ms()
    assert net.connection("client", "broker") == 1
    for i in range(5, 10):  # a new connection: delivered, in order
        net.send("client", "broker", ("req", i))
    s.run_for(200)
    assert [m for src, dst, m in got if dst == "broker"] == [("req", i) for i in range(5, 10)]
    assert not [m for src, dst, m in got if dst == "client"]  # the responses in flight were lost too
    assert [m for src, dst, m in got if dst == "other"] == [("o", i) for i in range(5)]  # other connections kept
    # Both ends are told at once (before anything sent afterwards can arrive), naming the lost incarnation.
    assert sorted(told) == [("broker", "client", 0, now), ("client", "broker", 0, now)]
    net._check()


def test_simnet_drop_random_connection_picks_a_used_one_deterministically():
    def run(seed):
        s = SimScheduler(seed)
        net = SimulatedNetwork(s)
        for n in range(4):
            net.register(n, lambda src, m: None)
        net.send(0, 1, "x")
        net.send(2, 3, "y")
        net.send(1, 0, "z")  # the same connection as 0 -> 1
        picked = [net.drop_random_connection(s.rng) for _ in range(3)]
        return picked

    picked = run(1)
    assert sorted(picked[:2]) == [(0, 1), (2, 3)] and picked[2] is None  # only used, not-yet-dropped ones
    assert run(1) == picked
