"""The Kafka wire protocol on TCP: real Kafka clients talk to a pylog cluster unchanged.

``pylog.Cluster(path, brokers=3, listen="127.0.0.1:0")`` starts a
:class:`~pylog.protocol.server.KafkaServer`: one listening socket per broker,
``cluster.bootstrap_servers`` lists them. Docs: docs/kafka-protocol.md.

Modules: :mod:`.codec` (the only user of kafka-python's schema classes, built
from Kafka's JSON message definitions; error codes), :mod:`.api` (registry and
request context), :mod:`.server` (sockets, framing, dispatch, threads),
:mod:`.faults` (``cluster.inject_fault``), ``handlers/`` (one module per API family).

How a handler module registers and answers
------------------------------------------

1. Put a module in ``pylog/protocol/handlers/`` (e.g. ``groups.py``). Every
   module there is imported by ``handlers/__init__.py`` (no list to edit).
2. Register one function per API key with the versions it serves; those
   ranges are exactly what ApiVersions advertises::

       from pylog.protocol import codec
       from pylog.protocol.api import RequestContext, register

       def _fail(ctx: RequestContext, req, code: int) -> None:
           ctx.reply(ctx.response(throttle_time_ms=0, error_code=code))

       @register(api_key=12, min_version=0, max_version=4, fail=_fail)    # Heartbeat
       def heartbeat(ctx: RequestContext, req) -> None:
           msg = gm.HeartbeatRequest(group_id=req.group_id, correlation_id=ctx.next_corr(), ...)
           def done(resp):                      # on the loop; None = timed out / broker down
               code = codec.REQUEST_TIMED_OUT if resp is None else codec.error_code_of(resp.error)
               ctx.reply(ctx.response(throttle_time_ms=0, error_code=code))
           ctx.request(msg, done, dst=coordinator_broker_id)

   ``req`` is kafka-python's decoded request: Kafka's JSON field names in
   snake_case (``req.group_id``, ``req.topics[0].partitions``), fields of
   other versions read as their schema default; ``ctx.api_version`` is the
   version. ``ctx.response(**fields)`` builds the response of the same API and
   version; nested structs are attributes of ``ctx.response_class``
   (e.g. ``ctx.response_class.MetadataResponseTopic(version=ctx.api_version, ...)``).
3. The handler runs on the cluster's loop thread (the thread every broker,
   the controller and the transport run on): read ``ctx.cluster.metadata``,
   ``ctx.broker`` freely, never block. Reach brokers and the group coordinator
   the way pylog's own clients do: build a message of
   :mod:`pylog.replication.messages` / :mod:`pylog.replication.group_messages`
   with ``correlation_id=ctx.next_corr()`` and ``ctx.request(msg, callback,
   dst=broker_id)`` (default ``dst``: the broker whose listener got the
   request). Blocking cluster calls (``cluster.create_topic`` ...) go through
   ``ctx.run_blocking(fn, then)`` (``fn`` on a worker, ``then(result, error)``
   back on the loop) or a ``register(..., blocking=True)`` handler (runs on a
   worker thread).
4. Answer exactly once, from any thread, whenever ready: ``ctx.reply(resp)``;
   ``ctx.no_reply()`` for a request Kafka does not answer (acks=0);
   ``ctx.close_connection(why)`` to drop the client (logged once). A
   connection's next request is read only after that (Kafka's one request at
   a time per connection), so replies are in order.
5. ``fail=`` (optional, recommended): ``fail(ctx, req, error_code)`` answers
   the request with one Kafka error code everywhere it carries one. It is used
   for injected faults (``cluster.inject_fault(api="Heartbeat", error=...)``)
   and when the handler raises (UNKNOWN_SERVER_ERROR). Without it, an
   injected error cannot target that API and a handler exception closes the
   connection.
6. ``available=lambda cluster: ...`` hides an API from ApiVersions (and
   refuses it) when the cluster cannot serve it.
7. Error codes: ``codec.error_code_of(pylog_error_class)``, or the constants
   and the ``codec.ERROR_CODES`` name table (Kafka's names, from kafka-python).
"""
from __future__ import annotations

__all__ = ["api", "codec", "server"]
