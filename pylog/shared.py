"""``pylog.open(path)`` from several processes: one owner runs the broker, the others reach it over a Unix socket.

>>> import tempfile, pylog
>>> q = pylog.open(tempfile.mkdtemp())     # the first process on a directory becomes its owner
>>> q.role
'owner'
>>> q.create_topic("jobs")
>>> q.producer().send("jobs", b"j0").result().offset
0
>>> q.close()

Roles (see docs/durable-queue.md):

* **owner** - the first process to take the directory's owner lock
  (``<path>/.owner.lock``, an fcntl record lock) opens the single-broker
  :class:`pylog.Cluster` on it (crash recovery runs here) and serves a
  :class:`BrokerServer` on the directory's Unix socket
  (:func:`~pylog.runtime.transport.unix.socket_address`); ``<path>/pylog.owner``
  names its pid and socket.
* **client** - every later process connects to that socket. Its producers
  and consumers are the ordinary :mod:`pylog.client` classes; their messages
  travel over the socket to the owner's broker and the responses come back,
  so a consumer's long-poll fetch is parked in the owner's fetch purgatory
  and wakes when the append happens.
* **takeover** - when the owner's connection drops (the owner was killed or
  closed), every client races for the owner lock; the winner reopens the
  directory and becomes the owner *in place* (its producers and consumers
  keep working: their in-flight requests fail and are retried), the others
  connect to it.

The object returned implements the interface the clients use,
:class:`~pylog.runtime.cluster_context.ClusterContext` (``scheduler``,
``transport``, ``metadata``), and shares the client half of the
:class:`pylog.Cluster` API with it (:class:`pylog.facade.ClusterFacade`:
``producer()``, ``consumer()``, the group admin calls), in both roles and
across takeovers: ``scheduler`` and ``transport`` are this process's own for
its whole life, and ``metadata`` (``store``) is a mirror of the owner's
:class:`MetadataStore`, refreshed when the owner's changes (checked every
``META_INTERVAL_MS``), after every admin call and on every (re)connect. The
topic admin calls (``create_topic()``, ``describe()``, ...) run on the
owner's :class:`pylog.Cluster`, by name, from the ``_CALLS`` list.

Durability: a record is acknowledged once the owner's broker appended it (in
the page cache): it survives ``kill -9`` of any process, the owner included;
with ``log_config={"flush_messages": 1}`` it is fsynced first and survives
power loss too. Consumer commits are records of ``__consumer_offsets`` on the
owner, with the same guarantees.
Thread-safety: every public method may be called from any thread.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import random
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from pylog.cluster import Cluster
from pylog.runtime.cluster_context import PartitionInfo
from pylog.errors import (
    BrokerNotAvailableError,
    InvalidConfigurationError,
    LogDirLockedError,
    PylogError,
    RequestTimedOutError,
)
from pylog.facade import ClusterFacade
from pylog.replication.controller import MetadataStore
from pylog.metrics import Metric
from pylog.runtime.cluster_context import MetadataView, TopicAdmin, members
from pylog.runtime.scheduler import RealScheduler, Timer
from pylog.runtime.transport.unix import (
    BrokerServer,
    ClientLink,
    Frame,
    LocalPeer,
    Peer,
    RoutedTransport,
    describe_address,
    socket_address,
)
from pylog.storage import logdir

OWNER_LOCK_FILE = ".owner.lock"
OWNER_INFO_FILE = "pylog.owner"
#: how often the owner compares its metadata with what it last sent its clients
META_INTERVAL_MS = 50
#: admin calls a client may ask the owner to run: the TopicAdmin interface, which Cluster implements
_CALLS = members(TopicAdmin)

Snapshot = Tuple[Tuple[int, ...], Optional[int], int, Dict[str, Any], Dict[Tuple[str, int], Any]]

# Directories whose owner lock this process holds: fcntl record locks belong to the
# process, so a second open() here must not "win" the lock its first open holds.
_owned: Dict[str, int] = {}  # directory -> pid: a forked child inherits the dict, not the lock
_owned_lock = threading.Lock()


def _snapshot(store: MetadataStore) -> Snapshot:
    """What clients need of the owner's store (call on the owner's loop)."""
    return (tuple(store.brokers), store.controller_id, store.controller_epoch, dict(store.topics),
            dict(store.partitions))


class _TopicsMirror(dict):
    """``store.topics`` of a shared directory: a lookup that misses asks the owner once before answering.

    So a topic another process just created is found by this process's
    producers and consumers (Kafka's clients also fetch metadata for an
    unknown topic before failing). At most one refresh per name per
    ``MISS_REFRESH_S``. Runs on this process's loop thread.
    """

    MISS_REFRESH_S = 0.2

    def __init__(self, shared: "SharedCluster"):
        super().__init__()
        self._shared = shared
        self._misses: Dict[Any, float] = {}

    def _refreshed(self, key: Any) -> bool:
        now = time.monotonic()
        if now - self._misses.get(key, -1e9) < self.MISS_REFRESH_S:
            return False
        self._misses[key] = now
        try:
            self._shared._refresh_metadata()
        except PylogError:  # closing, or no owner right now: answer from what we have
            return False
        return dict.__contains__(self, key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or self._refreshed(key)

    def __getitem__(self, key: Any) -> Any:
        if not dict.__contains__(self, key):
            self._refreshed(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key) or self._refreshed(key):
            return dict.__getitem__(self, key)
        return default

    def replace(self, topics: Dict[str, Any]) -> None:
        dict.clear(self)
        dict.update(self, topics)


class _Call:
    __slots__ = ("event", "ok", "value", "snap")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.ok = False
        self.value: Any = None
        self.snap: Optional[Snapshot] = None


class SharedCluster(ClusterFacade):
    """A single-broker queue on ``path`` that several processes open at once (the durable local queue).

    ``open_timeout_ms``: how long the constructor keeps trying to become the
    owner or reach one. Other keyword arguments go to :class:`pylog.Cluster`
    whenever this process becomes the owner (``log_config``,
    ``request_timeout_ms``, ...).

    Complexity: one socket round trip per client request in a client process;
    one extra thread hop in the owner process.
    Durability: see the module docstring.
    Thread-safety: every public method may be called from any thread.
    """

    def __init__(self, path: "str | os.PathLike[str]", *, open_timeout_ms: int = 30_000, **cluster_kwargs: Any):
        os.makedirs(os.fspath(path), exist_ok=True)
        self.path = os.path.realpath(os.fspath(path))
        self.address = socket_address(self.path)
        self.simulated = False
        self.seed = None
        self._kwargs = cluster_kwargs
        self.request_timeout_ms = int(cluster_kwargs.get("request_timeout_ms", 30_000))
        self._request_timeout_ms = self.request_timeout_ms
        self.scheduler: RealScheduler = RealScheduler()
        self.transport: RoutedTransport = RoutedTransport(self.scheduler)
        self.store = MetadataStore([0], random.Random(), path=None)
        self.store.topics = _TopicsMirror(self)
        self._init_clients()
        self._closed = False
        self._role: Optional[str] = None
        self._cond = threading.Condition()  # guards the role fields below; notified on every change
        self._cluster: Optional[Cluster] = None
        self._server: Optional[BrokerServer] = None
        self._local: Optional[LocalPeer] = None
        self._watch_timer: Optional[Timer] = None
        self._last_snap: Optional[Snapshot] = None
        self._link: Optional[ClientLink] = None
        self._lock_fd: Optional[int] = None
        self._calls: Dict[int, _Call] = {}
        self._call_ids = itertools.count(1)
        self._attach_thread: Optional[threading.Thread] = None
        self.owner_pid: Optional[int] = None
        #: times this process became the owner after another owner went away
        self.takeovers = 0
        try:
            self._attach(time.monotonic() + open_timeout_ms / 1000.0)
        except BaseException:
            self._closed = True
            self.scheduler.close()
            raise

    # ------------------------------------------------------------------ roles
    @property
    def role(self) -> Optional[str]:
        """``"owner"``, ``"client"``, or ``None`` while between owners (a takeover is under way)."""
        return self._role

    def _attach(self, deadline: Optional[float], takeover: bool = False) -> None:
        """Become the owner or a client of the owner; retry with backoff until ``deadline`` (None: until closed)."""
        backoff = 0.005
        last: Optional[BaseException] = None
        while not self._closed:
            if self._try_lock():
                try:
                    self._become_owner(takeover)
                    return
                except InvalidConfigurationError:  # e.g. a directory made by a 3-broker Cluster: no retry helps
                    self._unlock()
                    raise
                except (PylogError, OSError) as exc:  # a non-shared Cluster holds broker-0, a slow election...
                    last = exc
                    self._unlock()
                except BaseException:
                    self._unlock()
                    raise
            else:
                try:
                    self._become_client()
                    return
                except (OSError, PylogError) as exc:
                    last = exc
            if deadline is not None and time.monotonic() >= deadline:
                raise BrokerNotAvailableError(
                    f"{self.path}: could not become its owner nor reach the owner at "
                    f"{describe_address(self.address)}: {last!r}")
            time.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, 0.2)

    def _try_lock(self) -> bool:
        with _owned_lock:
            if _owned.get(self.path) == os.getpid():
                return False
            fd = os.open(os.path.join(self.path, OWNER_LOCK_FILE), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                         0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            _owned[self.path] = os.getpid()
            self._lock_fd = fd
            return True

    def _unlock(self) -> None:
        with _owned_lock:
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the record lock
                self._lock_fd = None
                _owned.pop(self.path, None)

    def _broker_dir_busy(self) -> bool:
        """True when another process holds the broker's log directory lock (e.g. a plain ``Cluster``
        or ``pylog verify --repair``): checked first, since a ``Cluster`` that fails to start leaves
        its loop thread behind."""
        try:
            logdir.check_not_locked(os.path.join(self.path, "broker-0"))
        except LogDirLockedError:
            return True
        return False

    def _become_owner(self, takeover: bool = False) -> None:
        if self._broker_dir_busy():
            raise LogDirLockedError(f"log directory {os.path.join(self.path, 'broker-0')} is locked by a process "
                                    f"that is not sharing it")
        cluster = Cluster(self.path, brokers=1, **self._kwargs)
        server: Optional[BrokerServer] = None
        try:
            server = BrokerServer(self.address, cluster.scheduler, cluster.transport,
                                  lambda peer, frame: self._owner_frame(cluster, peer, frame))
            local = server.local_peer(self._local_frame)
            snap = cluster.scheduler.run_sync(lambda: _snapshot(cluster.store))
            up = lambda frame: server.dispatch(local, frame)  # noqa: E731
            with self._cond:
                self._cluster, self._server, self._local = cluster, server, local
                self._last_snap = snap

            def install() -> None:
                self._apply_snapshot(snap)
                self.transport.set_upstream(up, snap[0])

            self.scheduler.run_sync(install)
            cluster.scheduler.call_soon(self._watch, cluster)
            tmp = os.path.join(self.path, OWNER_INFO_FILE + ".tmp")
            with open(tmp, "w") as f:
                info = {"pid": os.getpid(), "address": describe_address(self.address)}
                if cluster.kafka_server is not None:  # pylog.open(path, listen=...): the owner listens
                    info["bootstrap_servers"] = cluster.bootstrap_servers
                json.dump(info, f)
            os.replace(tmp, os.path.join(self.path, OWNER_INFO_FILE))
        except BaseException:
            with self._cond:
                self._cluster = self._server = self._local = None
            if server is not None:
                server.close()
            cluster.close()
            raise
        with self._cond:  # last: whoever sees the role sees a working upstream
            self.owner_pid = os.getpid()
            self.takeovers += int(takeover)
            self._role = "owner"
            self._cond.notify_all()

    def _become_client(self) -> None:
        welcome: List[Frame] = []
        got = threading.Event()
        holder: List[ClientLink] = []

        def on_frame(frame: Frame) -> None:
            if frame[0] == "welcome":
                welcome.append(frame)
                got.set()
            else:
                self._client_frame(frame)

        def on_close() -> None:
            got.set()
            if holder:
                self._link_closed(holder[0])

        link = ClientLink(self.address, on_frame, on_close)
        holder.append(link)
        link.send(("hello", os.getpid()))
        if not got.wait(5.0) or not welcome:
            link.close()
            raise BrokerNotAvailableError(f"{self.path}: the owner at {describe_address(self.address)} did not answer")
        _, snap, owner_pid = welcome[0]
        with self._cond:
            if link.closed:
                raise BrokerNotAvailableError(f"{self.path}: the owner closed the connection")
            self._link = link
            self.owner_pid = owner_pid
            self._role = "client"
            self._cond.notify_all()

        def install() -> None:
            self._apply_snapshot(snap)
            self.transport.set_upstream(link.send, snap[0])

        self.scheduler.run_sync(install)
        if link.closed:  # dropped while installing: _link_closed may have run before _link was set
            self._link_closed(link)

    def _link_closed(self, link: ClientLink) -> None:
        """The owner went away (or we closed the link): detach, then take over or reconnect."""
        with self._cond:
            if self._link is not link:
                return
            self._link = None
            self._role = None
            self.owner_pid = None
            calls, self._calls = self._calls, {}
            self._cond.notify_all()
        for call in calls.values():
            call.ok, call.value = False, BrokerNotAvailableError(f"{self.path}: the owner's connection closed")
            call.event.set()
        if self._closed:
            return
        try:
            self.scheduler.call_soon(self._detach_clients)
        except Exception:
            return
        t = threading.Thread(target=self._takeover, name="pylog-takeover", daemon=True)
        self._attach_thread = t
        t.start()

    def _detach_clients(self) -> None:
        remote = [n for n in self.transport.handlers if n not in self.transport.local_nodes()]
        self.transport.set_upstream(None, ())
        self._clients_lost_broker(remote)

    def _takeover(self) -> None:
        try:
            self._attach(None, takeover=True)
        except BaseException:  # closed meanwhile, or a bug: leave the role empty
            import traceback

            traceback.print_exc()
            return
        if self._closed:
            self._teardown()

    # ----------------------------------------------------------- owner side
    def _watch(self, cluster: Cluster) -> None:
        """Owner loop: push the metadata to every client when it changed."""
        if self._cluster is not cluster or self._server is None:
            return
        snap = _snapshot(cluster.store)
        if snap != self._last_snap:
            self._last_snap = snap
            self._server.broadcast(("meta", snap))
        self._watch_timer = cluster.scheduler.call_later(META_INTERVAL_MS, self._watch, cluster)

    def _local_frame(self, frame: Frame) -> None:
        """Frames the owner sends to this process's own clients."""
        kind = frame[0]
        if kind == "msg":
            _, src, dst, msg = frame
            self.transport.deliver_remote(src, dst, msg)
        elif kind == "meta":
            self.scheduler.call_soon(self._apply_snapshot, frame[1])

    def _owner_frame(self, cluster: Cluster, peer: Peer, frame: Frame) -> None:
        """hello / call frames from a client process (or this one's local peer)."""
        kind = frame[0]
        if kind == "hello":
            cluster.scheduler.call_soon(lambda: peer.send(
                ("welcome", _snapshot(cluster.store), os.getpid())))
        elif kind == "call":
            threading.Thread(target=self._serve_call, args=(cluster, peer, frame), daemon=True,
                             name="pylog-admin").start()

    def _serve_call(self, cluster: Cluster, peer: Peer, frame: Frame) -> None:
        _, call_id, name, args, kwargs = frame
        try:
            if name == "metadata":
                ok, value = True, None
            elif name not in _CALLS:
                raise BrokerNotAvailableError(f"{self.path}: the owner does not serve {name!r}")
            else:
                ok, value = True, getattr(cluster, name)(*args, **kwargs)
        except BaseException as exc:
            ok, value = False, exc
        try:
            snap = cluster.scheduler.run_sync(lambda: _snapshot(cluster.store))
        except PylogError:
            snap = None
        server = self._server
        if snap is not None and server is not None and name != "metadata":
            server.broadcast(("meta", snap))  # every client learns of a new topic before the caller
        try:
            peer.send(("ret", call_id, ok, value, snap))
        except Exception:  # an unpicklable exception: send its text
            peer.send(("ret", call_id, False, BrokerNotAvailableError(f"{name} failed on the owner: {value!r}"), snap))

    # ---------------------------------------------------------- client side
    def _client_frame(self, frame: Frame) -> None:
        kind = frame[0]
        if kind == "msg":
            _, src, dst, msg = frame
            self.transport.deliver_remote(src, dst, msg)
        elif kind == "meta":
            self.scheduler.call_soon(self._apply_snapshot, frame[1])
        elif kind == "ret":
            _, call_id, ok, value, snap = frame
            with self._cond:
                call = self._calls.pop(call_id, None)
            if call is not None:
                call.ok, call.value, call.snap = ok, value, snap
                call.event.set()

    def _apply_snapshot(self, snap: Snapshot) -> None:
        brokers, controller_id, controller_epoch, topics, partitions = snap
        st = self.store
        st.brokers = tuple(brokers)
        st.controller_id = controller_id
        st.controller_epoch = controller_epoch
        st.partitions = dict(partitions)
        st.topics.replace(topics)  # type: ignore[attr-defined]

    def _refresh_metadata(self) -> None:
        """Fetch the owner's metadata now and apply it (on this process's loop; waits at most 2 s)."""
        cluster = self._cluster
        if cluster is not None:
            snap = cluster.scheduler.run_sync(lambda: _snapshot(cluster.store))
        else:
            with self._cond:
                link = self._link
                if link is None:
                    return
                call_id = next(self._call_ids)
                call = self._calls[call_id] = _Call()
            link.send(("call", call_id, "metadata", (), {}))
            if not call.event.wait(2.0) or call.snap is None:
                with self._cond:
                    self._calls.pop(call_id, None)
                return
            snap = call.snap
        self.scheduler.run_sync(lambda: self._apply_snapshot(snap))  # inline on the loop, else handed to it

    def _wait_attached(self, timeout_ms: int) -> Optional[str]:
        end = time.monotonic() + timeout_ms / 1000.0
        with self._cond:
            while self._role is None and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._role

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run an admin call on the owner's cluster and refresh the metadata mirror."""
        self._ensure_open()
        role = self._wait_attached(self.request_timeout_ms)
        if role == "owner":
            cluster = self._cluster
            assert cluster is not None
            value = getattr(cluster, name)(*args, **kwargs)
            snap = cluster.scheduler.run_sync(lambda: _snapshot(cluster.store))
            server = self._server
            if server is not None:
                server.broadcast(("meta", snap))  # this process's mirror and every client's
            self.scheduler.run_sync(lambda: self._apply_snapshot(snap))
            return value
        with self._cond:
            link = self._link
            if link is None:
                raise BrokerNotAvailableError(f"{self.path}: no owner reachable for {name}")
            call_id = next(self._call_ids)
            call = self._calls[call_id] = _Call()
        link.send(("call", call_id, name, args, kwargs))
        if not call.event.wait(self.request_timeout_ms / 1000.0 + 30):
            with self._cond:
                self._calls.pop(call_id, None)
            raise RequestTimedOutError(f"{self.path}: the owner did not answer {name} in time")
        if call.snap is not None:
            snap = call.snap
            self.scheduler.run_sync(lambda: self._apply_snapshot(snap))
        if not call.ok:
            raise call.value
        return call.value

    # ------------------------------------------------------------ the API
    def _ensure_open(self) -> None:
        if self._closed:
            raise BrokerNotAvailableError(f"shared queue at {self.path} is closed")

    @property
    def metadata(self) -> MetadataView:
        """The mirror of the owner's metadata (``store``), read-only."""
        return self.store

    def ensure_offsets_topic(self) -> None:
        """The owner creates ``__consumer_offsets`` unless it exists (:meth:`pylog.Cluster.ensure_offsets_topic`)."""
        self._call("ensure_offsets_topic")

    def ensure_transaction_state_topic(self) -> None:
        """The owner creates ``__transaction_state`` unless it exists
        (:meth:`pylog.Cluster.ensure_transaction_state_topic`)."""
        self._call("ensure_transaction_state_topic")

    def advance(self, ms: int) -> None:
        """Sleep ``ms`` milliseconds (real time, as a real :class:`Cluster`)."""
        time.sleep(ms / 1000.0)

    # Topic admin (the TopicAdmin interface): run by the owner, as :class:`pylog.Cluster`'s methods of the
    # same names; every process's metadata mirror has the change when the call returns in the caller.
    def create_topic(self, name: str, partitions: int = 1, replication_factor: Optional[int] = None,
                     min_insync_replicas: int = 1, *, unclean_leader_election: bool = False,
                     start_index: Optional[int] = None, shift: Optional[int] = None,
                     config: Optional[Dict[str, object]] = None, exist_ok: bool = False) -> None:
        """Create a topic (run by the owner); returns once its leader serves it and this process's store has it."""
        self._call("create_topic", name, partitions, replication_factor, min_insync_replicas,
                   unclean_leader_election=unclean_leader_election, start_index=start_index, shift=shift,
                   config=config, exist_ok=exist_ok)

    def describe(self, topic: str) -> List[PartitionInfo]:
        """Per partition: leader, epoch, replicas, ISR, high watermark, log end offsets (asked of the owner)."""
        return self._call("describe", topic)

    def list_topics(self, include_internal: bool = False) -> List[str]:
        """As :meth:`pylog.Cluster.list_topics`."""
        return self._call("list_topics", include_internal)

    def delete_topic(self, name: str) -> None:
        """As :meth:`pylog.Cluster.delete_topic` (the owner's broker renames and removes the directories)."""
        self._call("delete_topic", name)

    def create_partitions(self, name: str, total_count: int) -> None:
        """As :meth:`pylog.Cluster.create_partitions`."""
        self._call("create_partitions", name, total_count)

    def alter_topic_config(self, name: str, configs: Dict[str, object]) -> None:
        """As :meth:`pylog.Cluster.alter_topic_config`."""
        self._call("alter_topic_config", name, dict(configs))

    def topic_config(self, name: str, *, kafka_names: bool = False) -> Dict[str, object]:
        """As :meth:`pylog.Cluster.topic_config`."""
        return self._call("topic_config", name, kafka_names=kafka_names)

    def metrics(self, *, include_clients: bool = True) -> List[Metric]:
        """The owner's cluster samples (:meth:`pylog.Cluster.metrics`) plus, with ``include_clients``,
        this process's producers' and consumers' samples."""
        out = list(self._call("metrics", include_clients=False))
        if include_clients:
            out.extend(self._client_metrics())
        return out

    def inject_fault(self, api: Any, error: Any = None, count: Optional[int] = 1, broker: Optional[int] = None,
                     topic: Optional[str] = None, *, delay_ms: int = 0, drop_connection: bool = False) -> Any:
        """:meth:`pylog.Cluster.inject_fault` on the owner's Kafka listener (owner process only)."""
        self._ensure_open()
        cluster = self._cluster
        if cluster is None:
            raise InvalidConfigurationError("inject_fault runs in the process that owns the queue (role 'owner')")
        return cluster.inject_fault(api, error, count, broker, topic, delay_ms=delay_ms,
                                    drop_connection=drop_connection)

    @property
    def bootstrap_servers(self) -> str:
        """The owner's Kafka listener (``pylog.open(path, listen="127.0.0.1:0")``; the owner process
        listens, and a process that takes over listens anew - on the same port when it was fixed)."""
        self._ensure_open()
        cluster = self._cluster
        if cluster is not None:
            return cluster.bootstrap_servers
        try:
            with open(os.path.join(self.path, OWNER_INFO_FILE)) as f:
                servers = json.load(f).get("bootstrap_servers")
        except (OSError, ValueError):
            servers = None
        if not servers:
            raise InvalidConfigurationError(f"the owner of {self.path} has no Kafka listener (open it with listen=...)")
        return servers

    def wait_owner(self, timeout: float = 30.0) -> str:
        """Block until this process is attached to an owner (or is it); returns the role."""
        role = self._wait_attached(int(timeout * 1000))
        if role is None:
            raise BrokerNotAvailableError(f"{self.path}: no owner within {timeout} s")
        return role

    def close(self) -> None:
        """Close this process's clients; an owner also closes its broker cleanly and hands the directory over.

        Clients of a closing owner see their connection drop and one of them
        takes over (clean shutdown: no recovery needed).
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()

        try:
            self.scheduler.run_sync(self._close_client_nodes)
        finally:
            t = self._attach_thread
            if t is not None and t is not threading.current_thread():
                t.join(60)
            self._teardown()
            self.scheduler.close()

    def _teardown(self) -> None:
        with self._cond:
            link, self._link = self._link, None
            server, self._server = self._server, None
            cluster, self._cluster = self._cluster, None
            self._role = None
            calls, self._calls = self._calls, {}
        for call in calls.values():
            call.ok, call.value = False, BrokerNotAvailableError(f"shared queue at {self.path} is closed")
            call.event.set()
        if link is not None:
            link.close()
        if server is not None:
            server.close()
        if cluster is not None:
            try:
                os.unlink(os.path.join(self.path, OWNER_INFO_FILE))
            except OSError:
                pass
            try:
                cluster.close()
            finally:
                self._unlock()

    def _check(self) -> None:
        """Invariants: the loop has not failed; the owner's cluster holds its own; upstream matches the role."""
        self.scheduler._check()
        self.transport._check()
        cluster = self._cluster
        if cluster is not None:
            assert self._lock_fd is not None and _owned.get(self.path) == os.getpid()
            cluster._check()
        for c in self._clients:
            check = getattr(c, "_check", None)
            if check is not None:
                check()


__all__ = ["SharedCluster", "OWNER_LOCK_FILE", "OWNER_INFO_FILE"]
