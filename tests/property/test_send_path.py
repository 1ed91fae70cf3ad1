"""The producer's C send path (pylog/_native/sendpath/sendpath.c) against the pure-Python closure it replaces.

``Producer.send`` is ``SendPath.send`` when the extension is built and the
closure from ``Producer._make_py_send`` otherwise. Both must queue the same
records into the same batches, return futures that resolve the same way, and
hand every case they do not take (keys, headers, timestamps, other value
types, unknown topics or partitions, closed producers) to ``_send_slow``.
The Python closure is the model: every check here runs the same calls
through both and compares.
"""
from __future__ import annotations

import gc
import sys
import threading
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylog.client.producer as producer_mod
from pylog._native import _sendpath
from pylog.client.accumulator import FutureRecordMetadata
from pylog.cluster import Cluster
from pylog.record import Record


def make_producer(c: Cluster, native: bool, **cfg: Any) -> Any:
    """A producer whose ``send`` is the C path (``native``) or the Python closure."""
    p = c.producer(**cfg)
    if not native:
        p.send = p._make_py_send()
    assert (type(p.send).__name__ == "builtin_function_or_method") == native
    return p


def test_the_default_producer_uses_the_c_send_path(tmp_path):
    with Cluster(tmp_path, brokers=1, seed=1) as c:
        c.create_topic("t", 1, 1)
        p = c.producer()
        assert producer_mod._SendPath is _sendpath.SendPath
        assert getattr(p.send, "__self__", None).__class__ is _sendpath.SendPath
        f = p.send("t", b"x")
        assert type(f) is FutureRecordMetadata and isinstance(f, _sendpath.RecordFuture)
        assert f.result(timeout=10).offset == 0


# One call: (topic, value, key, partition, headers, timestamp); the kinds cover the fast case and
# every way out of it.
topics = st.sampled_from(["a", "b", "missing"])
values = st.one_of(st.binary(max_size=40), st.binary(max_size=40).map(bytearray), st.none(),
                   st.just("text"))
keys = st.one_of(st.none(), st.none(), st.binary(max_size=4))
partitions = st.one_of(st.none(), st.none(), st.integers(-1, 3), st.just(True))
headers = st.one_of(st.none(), st.none(), st.just([("h", b"1")]))
stamps = st.one_of(st.none(), st.none(), st.integers(0, 10**12))
general = st.tuples(topics, values, keys, partitions, headers, stamps)
# The fast case: a bytes value and nothing else but maybe a partition (most calls, so that batches fill).
fast = st.tuples(st.sampled_from(["a", "b", "b", "missing"]), st.integers(0, 60).map(lambda n: b"v" * n),
                 st.none(), st.one_of(st.none(), st.none(), st.none(), partitions), st.none(), st.none())
# A keyed record (bytes key, bytes or null value): the C path's other fast case.
keyed = st.tuples(st.sampled_from(["a", "a", "b", "missing"]), st.one_of(st.none(), st.integers(0, 60).map(
    lambda n: b"v" * n)), st.sampled_from([b"", b"k1", b"key-2", b"\xff\x00\x10"]),
    st.one_of(st.none(), st.none(), st.none(), partitions), st.none(), st.none())
calls = st.lists(st.one_of(fast, fast, keyed, fast, general), min_size=8, max_size=80)


def run_calls(tmp: str, native: bool, ops: List[Tuple[Any, ...]], batch_size: int, flush_every: int,
              close_at: int) -> List[Any]:
    """Apply ``ops``; return what each call gave (batch number, index, records so far) and then resolved to."""
    out: List[Any] = []
    with Cluster(tmp, brokers=1, seed=5) as c:
        c.create_topic("a", 3, 1)
        c.create_topic("b", 1, 1)
        p = make_producer(c, native, batch_size=batch_size, linger_ms=50)
        batch_ids: Dict[int, int] = {}
        futures = []
        for i, (topic, value, key, partition, hdrs, ts) in enumerate(ops):
            if i == close_at:
                p.close()
            if flush_every and i % flush_every == flush_every - 1 and i < close_at:
                p.flush(timeout=30)
            try:
                f = p.send(topic, value, key=key, partition=partition, headers=hdrs, timestamp=ts)
            except Exception as exc:  # noqa: BLE001 - the exception itself is what is compared
                out.append(("raised", type(exc).__name__, str(exc)))
                continue
            b = f._batch
            bid = batch_ids.setdefault(id(b), len(batch_ids))
            out.append(("queued", bid, f._index, b.topic, b.partition, len(b.records)))
            futures.append(f)
        if close_at >= len(ops):
            p.flush(timeout=30)
        for f in futures:
            err = f.exception(timeout=30)
            if err is not None:
                out.append(("failed", type(err).__name__, str(err)))
            else:
                m = f.result()
                out.append(("ok", m.topic, m.partition, m.offset))
        if close_at >= len(ops):
            p.close()
        for t, n in (("a", 3), ("b", 1)):
            for part in range(n):
                log = c.brokers[c.leader_of(t, part)].rm.partitions[(t, part)].log
                # (records with old timestamps may already be gone to time retention: read from the start)
                out.append(("log", t, part, log.log_start_offset, [
                    (r.offset, r.key, r.value, r.headers) for b in
                    log.read_batches(log.log_start_offset, 1 << 30) for r in b.records()]))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=calls, batch_size=st.sampled_from([1, 100, 200, 400, 16384]), flush_every=st.sampled_from([0, 7]),
       close_at=st.one_of(st.just(1000), st.integers(0, 100)))
def test_c_send_path_matches_the_python_closure(tmp_path_factory, ops, batch_size, flush_every, close_at):
    native = run_calls(str(tmp_path_factory.mktemp("c")), True, ops, batch_size, flush_every, close_at)
    model = run_calls(str(tmp_path_factory.mktemp("py")), False, ops, batch_size, flush_every, close_at)
    assert native == model


@pytest.mark.parametrize("call", [
    lambda s: s("t", b"v", None, None, None, None, None),
    lambda s: s("t", b"v", nope=1),
    lambda s: s("t", b"v", None, key=b"k"),
    lambda s: s("t"),
    lambda s: s(value=b"v"),
    lambda s: s(),
])
def test_bad_calls_raise_the_same_type_error(tmp_path, call):
    with Cluster(tmp_path, brokers=1, seed=2) as c:
        c.create_topic("t", 1, 1)
        messages = []
        for native in (True, False):
            p = make_producer(c, native)
            with pytest.raises(TypeError) as info:
                call(p.send)
            messages.append(str(info.value))
            p.close()
        # The closure's message starts with its qualified name; what follows "send()" is the same.
        assert messages[0].startswith("send() ")
        assert messages[0] == "send() " + messages[1].split("send() ", 1)[1]


def test_send_has_the_python_signature(tmp_path):
    import inspect

    with Cluster(tmp_path, brokers=1, seed=3) as c:
        c.create_topic("t", 1, 1)
        p = c.producer()
        sig = inspect.signature(p.send)
        assert list(sig.parameters) == ["topic", "value", "key", "partition", "headers", "timestamp"]
        assert sig.parameters["key"].default is None and sig.parameters["value"].default is inspect.Parameter.empty
        assert "RecordMetadata" in (p.send.__doc__ or "")
        f = p.send("t", b"x")
        assert list(inspect.signature(f.result).parameters) == ["timeout"]
        assert list(inspect.signature(f.add_done_callback).parameters) == ["fn"]
        assert f.result(timeout=10).offset == 0
        p.close()


def test_keyword_arguments_take_the_fast_path_too(tmp_path):
    with Cluster(tmp_path, brokers=1, seed=3) as c:
        c.create_topic("t", 2, 1)
        p = make_producer(c, True, linger_ms=1000)
        f1 = p.send(topic="t", value=b"a", partition=1)
        f2 = p.send("t", value=b"b", partition=1, key=None, headers=None, timestamp=None)
        assert f1._batch is f2._batch and (f1._index, f2._index) == (0, 1)
        assert f2._batch.records == [b"a", b"b"] and f2._batch.plain
        assert [f.result(timeout=10).offset for f in (f1, f2)] == [0, 1]
        p.close()


def test_threads_sending_through_the_c_path_lose_and_reorder_nothing(tmp_path):
    """Real time, four threads, keyless and explicit-partition sends: every record once, each thread's in order."""
    with Cluster(tmp_path, brokers=1) as c:
        c.create_topic("rt", 2, 1)
        p = make_producer(c, True, batch_size=2048)
        futs: Dict[int, List[Any]] = {}

        def worker(n: int) -> None:
            futs[n] = [p.send("rt", b"%d-%d" % (n, i), partition=n % 2) for i in range(3000)]

        ts = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        p.flush(timeout=60)
        seen = set()
        for n, fs in futs.items():
            metas = [f.result(timeout=10) for f in fs]
            assert {m.partition for m in metas} == {n % 2}
            offs = [m.offset for m in metas]
            assert offs == sorted(offs)
            seen.update((m.partition, m.offset) for m in metas)
        assert len(seen) == 12000
        values = {}
        for part in range(2):
            log = c.brokers[c.leader_of("rt", part)].rm.partitions[("rt", part)].log
            for b in log.read_batches(0, 1 << 30):
                for r in b.records():
                    values[(part, r.offset)] = r.value
        for n, fs in futs.items():
            for i, f in enumerate(fs):
                m = f.result()
                assert values[(m.partition, m.offset)] == b"%d-%d" % (n, i)
        p.close()


def test_the_c_path_keeps_no_reference_after_the_producer_is_gone(tmp_path):
    """A reference leaked per call (the value, its batch) would keep the value's refcount up."""
    value = b"refcount-probe-" + bytes(range(50))
    base = sys.getrefcount(value)
    with Cluster(tmp_path, brokers=1, seed=4) as c:
        c.create_topic("t", 2, 1)
        p = make_producer(c, True, batch_size=500)
        futs = [p.send("t", value) for _ in range(200)] + [p.send("t", value, partition=1) for _ in range(200)]
        assert sys.getrefcount(value) >= base + 400
        p.flush(timeout=30)
        assert all(f.result().offset >= 0 for f in futs)
        p.close()
        del futs, p
    gc.collect()
    assert sys.getrefcount(value) == base


def test_record_future_checks_its_arguments():
    with pytest.raises(TypeError):
        _sendpath.RecordFuture("batch")
    with pytest.raises(TypeError):
        _sendpath.RecordFuture("batch", "not an int")
    f = _sendpath.RecordFuture(batch="b", index=7)
    assert (f._batch, f._index) == ("b", 7)
    with pytest.raises(AttributeError):
        f._batch = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match="RecordFuture"):
        _sendpath.SendPath(_sendpath.Lock(), {}, {}, 10, 16, print, print, dict)  # not a RecordFuture type
    with pytest.raises(TypeError, match="Lock"):  # send takes the lock by a direct C call: only its own Lock
        _sendpath.SendPath(threading.Lock(), {}, {}, 10, 16, print, print, FutureRecordMetadata)


def test_lock_behaves_like_threading_lock():
    lock = _sendpath.Lock()
    assert not lock.locked()
    assert lock.acquire() is True and lock.locked()
    assert lock.acquire(False) is False
    assert lock.acquire(blocking=True, timeout=0.01) is False  # held by this thread: not reentrant
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)
    with pytest.raises(ValueError):
        lock.acquire(timeout=-2)
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(KeyError):
        with lock:
            raise KeyError("the exception passes through and the lock is released")
    assert not lock.locked()


def test_lock_waits_without_the_gil_and_works_under_a_condition():
    lock = _sendpath.Lock()
    cond = threading.Condition(lock)
    box: List[str] = []
    lock.acquire()
    got = threading.Event()

    def waiter() -> None:
        with lock:  # blocks in C with the GIL released, or the main thread below could not run
            box.append("waiter")
        got.set()

    t = threading.Thread(target=waiter)
    t.start()
    box.append("main")  # runs while the waiter is blocked
    assert not got.wait(0.05)
    lock.release()
    t.join(10)
    assert box == ["main", "waiter"]

    def notifier() -> None:
        with cond:
            box.append("notified")
            cond.notify_all()

    with cond:
        threading.Thread(target=notifier).start()
        assert cond.wait_for(lambda: "notified" in box, timeout=10)
        assert lock.locked()  # wait() took the lock back
    assert not lock.locked()


def test_the_pure_python_fallback_works_without_the_extension(tmp_path):
    """Without a build of sendpath.c the producer uses threading.Lock, Python bases and the closure."""
    import subprocess

    script = r"""
import sys, threading
sys.modules["pylog._native._sendpath"] = None  # import fails, as without a build
from pylog.cluster import Cluster
from pylog.record import Record
from pylog.client import accumulator, producer
assert producer._SendPath is None and producer._Lock is threading.Lock
assert accumulator.ProducerBatch.__mro__[1] is accumulator._PyBatchBase
c = Cluster(sys.argv[1], brokers=1, seed=7)
c.create_topic("t", 2, 1)
p = c.producer(batch_size=300)
assert type(p._lock) is type(threading.Lock())
fs = [p.send("t", b"%d" % i) for i in range(50)] + [p.send("t", b"k", key=b"k")]
p.flush(timeout=30)
seen = {(f.result().partition, f.result().offset) for f in fs}
assert len(seen) == 51, seen
print("ok", len({f._batch for f in fs}))
p.close(); c.close()
"""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYLOG_SENDPATH_LIB"}  # the sanitizer pass sets it
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ") and int(out.stdout.split()[1]) > 2  # batch_size=300 split the records


def test_future_methods_of_the_c_type(tmp_path):
    """FutureRecordMetadata is the C type; its methods (bound Python functions) work positionally and by keyword."""
    assert FutureRecordMetadata is _sendpath.RecordFuture
    assert FutureRecordMetadata.__module__ == "pylog.client.accumulator"
    with Cluster(tmp_path, brokers=1, seed=6) as c:
        c.create_topic("t", 1, 1)
        p = c.producer(linger_ms=1000)
        f = p.send("t", b"a")
        assert f.done() is False
        assert repr(f).startswith("FutureRecordMetadata(ProducerBatch(t-0 n=1") and repr(f).endswith("index=0)")
        seen: List[Any] = []
        f.add_done_callback(seen.append)
        f.add_done_callback(fn=lambda fut: seen.append(("kw", fut._index)))
        p.flush(timeout=30)
        assert f.done() is True and seen == [f, ("kw", 0)]
        assert f.result(5) == f.get(timeout=5) == f.result(timeout=None)
        assert f.exception(timeout=1) is None
        with pytest.raises(TypeError):
            f.result(1, 2, 3, 4, 5, 6, 7, 8)
        bad = p.send("nope", b"x")
        assert isinstance(bad.exception(1), Exception) and bad.done()
        with pytest.raises(Exception) as info:
            bad.get(1)
        assert "nope" in str(info.value)
        p.close()
    with pytest.raises(TypeError):
        _sendpath.bind_future(print, print, print, 42)


@settings(max_examples=300, deadline=None)
@given(topic=st.sampled_from(["t", "orders"]), partition=st.integers(0, 5),
       base_offset=st.one_of(st.just(-1), st.integers(0, 2**40), st.just(2**70)),
       timestamp=st.one_of(st.just(-1), st.integers(0, 2**45)),
       records=st.lists(st.one_of(st.binary(max_size=3), st.builds(lambda ts: Record(b"v", timestamp=ts),
                                                                   st.one_of(st.none(), st.integers(0, 99)))),
                        min_size=1, max_size=5),
       plain=st.booleans(), failed=st.booleans(), data=st.data())
def test_result_of_a_done_future_matches_the_python_function(topic, partition, base_offset, timestamp, records, plain,
                                                              failed, data):
    """result() builds RecordMetadata in C for a plain, acknowledged batch; it must be what _result gives."""
    from pylog.client.accumulator import ProducerBatch, RecordMetadata, _result
    from pylog.errors import NotLeaderError

    b = ProducerBatch(None, topic, partition, 0, 0, 0)
    b.records.extend(records)
    b.plain = plain and all(type(r) is bytes for r in records)  # what the producer guarantees
    b.base_offset, b.timestamp = base_offset, timestamp
    b.error = NotLeaderError("t-0: not the leader") if failed else None
    b.done = True
    f = FutureRecordMetadata(b, data.draw(st.integers(0, len(records) - 1)))
    try:
        expected: Any = _result(f)
    except NotLeaderError as exc:
        expected = exc
    if isinstance(expected, Exception):
        with pytest.raises(NotLeaderError) as info:
            f.result()
        assert info.value is expected
    else:
        got = f.result(timeout=1)
        assert type(got) is RecordMetadata and got == expected
        assert got.offset == (base_offset + f._index if base_offset >= 0 else -1)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=70))
def test_c_murmur2_matches_the_python_partitioner(data):
    from pylog.client.partitioner import murmur2

    assert _sendpath.murmur2(data) == murmur2(data)


def test_keyed_sends_take_the_c_path_to_the_java_clients_partition(tmp_path):
    from pylog.client.partitioner import partition_for_key
    from pylog.record import Record

    with Cluster(tmp_path, brokers=1, seed=8) as c:
        c.create_topic("k", 5, 1)
        p = make_producer(c, True, linger_ms=1000)
        for q in range(5):  # open a batch on every partition, so the keyed sends below find one
            p.send("k", b"warm", partition=q)
        slow_calls = []
        real_slow = p._send_slow
        p._send_slow = lambda *a: slow_calls.append(a) or real_slow(*a)
        p.send = p._make_fast_send()  # rebuilt around the instrumented _send_slow
        keys = [b"%d" % i for i in range(40)] + [b"", b"\x00\xff"]
        futs = [p.send("k", b"v-" + k, key=k) for k in keys] + [p.send("k", None, key=b"tomb")]
        assert slow_calls == []  # every one taken by C
        for k, f in zip(keys + [b"tomb"], futs):
            assert f._batch.partition == partition_for_key(k, 5)
            rec = f._batch.records[f._index]
            assert type(rec) is Record and rec == Record(None if k == b"tomb" else b"v-" + k, key=k)
            assert f._batch.plain is False
        p.flush(timeout=30)
        for k, f in zip(keys + [b"tomb"], futs):
            m = f.result()
            log = c.brokers[c.leader_of("k", m.partition)].rm.partitions[("k", m.partition)].log
            (got,) = [r for b in log.read_batches(m.offset, 1 << 20) for r in b.records() if r.offset == m.offset]
            assert (got.key, got.value) == (k, None if k == b"tomb" else b"v-" + k)
        p.close()


def test_sent_futures_stay_out_of_the_cycle_collector_until_a_callback_can_make_a_cycle():
    """Futures from send() are untracked (so held futures cost no collection time); add_done_callback
    tracks the future, so the cycle future -> batch -> callbacks -> closure -> future is still collected."""
    import weakref
    from types import SimpleNamespace

    from pylog.client.accumulator import ProducerBatch
    from pylog.record import Record

    owner = SimpleNamespace(_lock=_sendpath.Lock())
    b = ProducerBatch(owner, "t", 0, 0, 0, 0)
    state = SimpleNamespace(open=b)
    sp = _sendpath.SendPath(owner._lock, {"t": b}, {"t": [state]}, 1 << 30, 16, print, print,
                            FutureRecordMetadata, Record(None))
    f = sp.send("t", b"x")
    keyed = sp.send("t", b"y", key=b"k")
    assert not gc.is_tracked(f) and not gc.is_tracked(keyed)
    assert not gc.is_tracked(b.records[1]) and b.records[1] == Record(b"y", key=b"k")
    assert gc.is_tracked(FutureRecordMetadata(b, 0))  # built from Python: tracked as usual

    def on_done(fut: Any) -> None:
        pass

    probe = weakref.ref(on_done)
    f.add_done_callback(on_done)
    assert gc.is_tracked(f) and b.callbacks is not None
    del on_done, f, keyed, sp, state, b, owner
    gc.collect()
    assert probe() is None  # the cycle through the callback was found and freed
