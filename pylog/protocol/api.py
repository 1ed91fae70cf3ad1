"""The handler registry and the request context a handler answers through.

A handler module registers one function per API key::

    from pylog.protocol.api import RequestContext, register

    @register(api_key=12, min_version=0, max_version=4)       # Heartbeat
    def heartbeat(ctx: RequestContext, req) -> None:
        ...                                   # runs on the cluster's loop thread
        ctx.reply(ctx.response(error_code=0, throttle_time_ms=0))

See :mod:`pylog.protocol` for the whole contract.

Thread-safety: :func:`register` at import time only; a :class:`RequestContext`
is used by one request, on the loop thread (``reply`` may be called from any thread).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from pylog.protocol import codec
from pylog.runtime.broker import Broker
from pylog.runtime.cluster_context import ServedCluster
from pylog.runtime.scheduler import Scheduler

Handler = Callable[["RequestContext", Any], None]
#: ``fail(ctx, req, error_code)``: answer ``req`` with ``error_code`` everywhere it has one (a
#: partition, a topic, the top level), as Kafka would reject the whole request
Fail = Callable[["RequestContext", Any, int], None]


@dataclass(frozen=True)
class ApiSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    fail: Optional[Fail] = None
    #: ``available(cluster) -> bool``: False hides the API from ApiVersions (e.g. the cluster lacks a method)
    available: Optional[Callable[[ServedCluster], bool]] = None
    #: True: the handler may run long (blocking cluster calls): it runs on a worker thread, not the loop
    blocking: bool = False


#: api_key -> ApiSpec, filled by the handler modules when :mod:`pylog.protocol.handlers` imports them
REGISTRY: Dict[int, ApiSpec] = {}


def register(api_key: int, min_version: int, max_version: int, *, fail: Optional[Fail] = None,
             available: Optional[Callable[[ServedCluster], bool]] = None, blocking: bool = False) -> Callable[[Handler], Handler]:
    """Decorator: serve ``api_key`` versions ``min_version..max_version`` with the decorated function."""
    req_cls = codec.request_class(api_key)
    if req_cls is None:
        raise ValueError(f"kafka-python has no schema for API key {api_key}")
    if not 0 <= min_version <= max_version <= req_cls.max_version:
        raise ValueError(f"API {req_cls.name}: versions {min_version}..{max_version} outside the schema's "
                         f"0..{req_cls.max_version}")

    def deco(fn: Handler) -> Handler:
        if api_key in REGISTRY and REGISTRY[api_key].handler is not fn:
            raise ValueError(f"API key {api_key} ({req_cls.name}) registered twice")
        name = req_cls.name[:-len("Request")] if req_cls.name.endswith("Request") else req_cls.name
        REGISTRY[api_key] = ApiSpec(api_key, name, min_version, max_version, fn, fail, available, blocking)
        return fn

    return deco


class RequestContext:
    """One request being served: who asked, which broker answers, and how to reply.

    Attributes: ``cluster`` (the :class:`~pylog.runtime.cluster_context.ServedCluster`: a :class:`pylog.Cluster`), ``broker_id`` (the broker whose
    listener got the request), ``broker`` (its :class:`pylog.runtime.broker.Broker`),
    ``node`` (the listener's :class:`pylog.client._node.ClientNode` on the cluster's transport:
    send in-process requests to brokers with :meth:`request`), ``api_key``, ``api_version``,
    ``correlation_id``, ``client_id``, ``peer`` (``"host:port"``), ``server``.
    """

    __slots__ = ("server", "conn", "cluster", "broker_id", "node", "api_key", "api_version", "correlation_id",
                 "client_id", "peer", "spec", "replied", "expects_response")

    def __init__(self, server: Any, conn: Any, spec: ApiSpec, api_version: int, correlation_id: int,
                 client_id: Optional[str]):
        self.server = server
        self.conn = conn
        self.cluster: ServedCluster = server.cluster
        self.broker_id: int = conn.broker_id
        self.node = server.nodes[conn.broker_id]
        self.spec = spec
        self.api_key = spec.api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.peer: str = conn.peer
        self.replied = False
        self.expects_response = True

    @property
    def broker(self) -> Broker:
        return self.cluster.brokers[self.broker_id]

    @property
    def scheduler(self) -> Scheduler:
        return self.cluster.scheduler

    def response(self, **fields: Any) -> Any:
        """The response message of this request's API and version, with ``fields`` set (snake_case,
        as in Kafka's JSON: ``throttle_time_ms``, ``error_code``...); nested structs are classes on it
        (``resp_cls = ctx.response_class; resp_cls.MetadataResponseTopic(...)``)."""
        return self.response_class(version=self.api_version, **fields)

    @property
    def response_class(self) -> Any:
        return codec.response_class(self.api_key)

    def request(self, msg: Any, callback: Callable[[Optional[Any]], None], *, dst: Optional[int] = None,
                timeout_ms: int = 30_000) -> None:
        """Send an in-process message (``pylog.replication.messages`` / ``group_messages``) to broker
        ``dst`` (default: this listener's broker) through the cluster's transport, exactly as the
        in-process clients do; ``callback(response)`` on the loop, ``callback(None)`` on timeout or when
        that broker is down. Build ``msg`` with ``correlation_id=ctx.next_corr()``. Loop thread only."""
        self.node.request(self.broker_id if dst is None else dst, msg, timeout_ms, callback)

    def run_blocking(self, fn: Callable[[], Any], then: Callable[[Any, Optional[BaseException]], None]) -> None:
        """Run ``fn()`` on a worker thread (blocking cluster calls such as ``create_topic`` must not run
        on the loop), then ``then(result, error)`` on the loop."""
        sched = self.cluster.scheduler

        def work() -> None:
            try:
                res, err = fn(), None
            except Exception as exc:  # handed to ``then``
                res, err = None, exc
            sched.call_soon(then, res, err)

        self.server.submit_worker(work)

    def next_corr(self) -> int:
        return self.node.next_corr()

    def reply(self, resp: Any) -> None:
        """Send ``resp`` (a message built with :meth:`response`) to the client. Once per request;
        any thread. After a reply the connection reads its next request (one at a time, as Kafka)."""
        if self.replied:
            raise RuntimeError(f"{self.spec.name} correlation id {self.correlation_id} answered twice")
        self.replied = True
        self.server.reply(self, resp)

    def no_reply(self) -> None:
        """Finish a request that gets no response (Produce with acks=0)."""
        if not self.replied:
            self.replied = True
            self.expects_response = False
            self.server.reply(self, None)

    def close_connection(self, why: str) -> None:
        """Drop the client's connection (logged once), e.g. for a request Kafka cannot answer."""
        self.replied = True
        self.server.close_connection(self.conn, why)


_log = logging.getLogger("pylog.protocol")


def guarded_request(ctx: RequestContext, req: Any, msg: Any, done: Callable[[Any], None], *,
                    dst: Optional[int] = None, timeout_ms: int = 30_000) -> None:
    """:meth:`RequestContext.request` whose ``done(response)`` (``done(None)`` on timeout or a broker
    that is down) cannot leave the client hanging: ``done`` runs on the loop outside the server's
    handler guard, so if it raises (a bug) the request is answered with UNKNOWN_SERVER_ERROR
    through the API's ``fail`` (or its connection is closed). Loop thread only."""
    def guarded(resp: Any) -> None:
        try:
            done(resp)
        except Exception as exc:
            _log.exception("%s v%d from %s (correlation id %d): answering failed", ctx.spec.name, ctx.api_version,
                           ctx.peer, ctx.correlation_id)
            if not ctx.replied and ctx.spec.fail is not None:
                try:
                    ctx.spec.fail(ctx, req, codec.UNKNOWN_SERVER_ERROR)
                    return
                except Exception:
                    pass
            ctx.server.close_connection(ctx.conn, f"{ctx.spec.name} answer failed: {exc!r}")

    ctx.request(msg, guarded, dst=dst, timeout_ms=timeout_ms)


__all__ = ["ApiSpec", "REGISTRY", "RequestContext", "guarded_request", "register"]
