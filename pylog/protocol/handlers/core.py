"""ApiVersions and Metadata (and DescribeCluster): what a client asks before anything else.

Metadata is answered from the controller's :class:`MetadataStore` (Kafka's
metadata cache): live brokers with their listener addresses, and per
partition the leader (-1 with LEADER_NOT_AVAILABLE when its broker is down),
leader epoch, replicas, ISR and offline replicas. With the cluster's
``auto_create_topics`` on (the default, as Kafka's ``auto.create.topics.enable``),
a requested unknown topic is created (``num_partitions`` partitions,
replication factor min(3, brokers)) when the request allows it (v4+ field,
always for older versions), and the answer waits until its leaders serve.

Thread-safety: handlers run on the cluster's loop thread.
"""
from __future__ import annotations

import hashlib
import re
from typing import Any, List, Optional, Sequence

from pylog.protocol import codec
from pylog.protocol.api import REGISTRY, RequestContext, register
from pylog.runtime.cluster_context import ServedCluster

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def supported_api_keys(server: Any) -> List[Any]:
    """The ApiVersionsResponse ``api_keys`` rows: exactly what this cluster serves."""
    rows = []
    cls = codec.MESSAGES[18][1]  # ApiVersions: in every kafka-python with a schema table
    for key in sorted(REGISTRY):
        spec = REGISTRY[key]
        if spec.available is not None and not spec.available(server.cluster):
            continue
        rows.append(cls.ApiVersion(api_key=key, min_version=spec.min_version, max_version=spec.max_version))
    return rows


def api_versions_fallback(server: Any, correlation_id: int) -> bytes:
    """KIP-511: an ApiVersions request of a version we do not know gets a v0 body with
    UNSUPPORTED_VERSION and our list (the client retries with our highest version)."""
    cls = codec.MESSAGES[18][1]
    resp = cls(version=0, error_code=codec.UNSUPPORTED_VERSION, api_keys=supported_api_keys(server))
    return codec.encode_response(resp, correlation_id)


@register(api_key=18, min_version=0, max_version=4)
def api_versions(ctx: RequestContext, req: Any) -> None:
    ctx.reply(ctx.response(error_code=0, api_keys=supported_api_keys(ctx.server), throttle_time_ms=0))


def cluster_id(cluster: ServedCluster) -> str:
    """A stable 22-character id derived from the cluster's directory (Kafka's cluster ids are base64 UUIDs)."""
    import base64

    digest = hashlib.sha256(cluster.path.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def default_rf(cluster: ServedCluster) -> int:
    """Kafka's ``default.replication.factor``: the cluster's, else min(3, brokers)."""
    rf = cluster.default_replication_factor
    return rf if rf is not None else min(3, len(cluster.brokers))


def live_brokers(ctx: RequestContext) -> List[int]:
    srv = ctx.server
    return [b for b, br in sorted(ctx.cluster.brokers.items()) if br.running and b in srv.listeners]


def _topic_rows(ctx: RequestContext, names: Optional[Sequence[str]], created_errors: Any = None) -> List[Any]:
    cls = ctx.response_class
    store = ctx.cluster.metadata
    live = set(live_brokers(ctx))
    v = ctx.api_version
    rows = []
    if names is None:
        names = sorted(store.topics)
    for name in names:
        cfg = store.topics.get(name)
        if cfg is None:
            code = (created_errors or {}).get(name, codec.UNKNOWN_TOPIC_OR_PARTITION)
            if not _TOPIC_RE.match(name or "") or name in (".", ".."):
                code = codec.INVALID_TOPIC_EXCEPTION
            rows.append(cls.MetadataResponseTopic(version=v, error_code=code, name=name, is_internal=False,
                                                  partitions=[]))
            continue
        parts = []
        for p in range(cfg.partitions):
            st = store.partitions.get((name, p))
            if st is None:
                continue
            leader = st.leader if st.leader in live else -1
            parts.append(cls.MetadataResponseTopic.MetadataResponsePartition(
                version=v, error_code=codec.NONE if leader >= 0 else codec.LEADER_NOT_AVAILABLE,
                partition_index=p, leader_id=leader, leader_epoch=st.leader_epoch,
                replica_nodes=list(st.replicas), isr_nodes=list(st.isr),
                offline_replicas=[r for r in st.replicas if r not in live]))
        rows.append(cls.MetadataResponseTopic(version=v, error_code=codec.NONE, name=name,
                                              is_internal=name.startswith("__"), partitions=parts))
    return rows


def _answer_metadata(ctx: RequestContext, names: Optional[Sequence[str]], created_errors: Any = None) -> None:
    cls = ctx.response_class
    v = ctx.api_version
    brokers = [cls.MetadataResponseBroker(version=v, node_id=b, host=ctx.server.host, port=ctx.server.ports[b],
                                          rack=None) for b in live_brokers(ctx)]
    controller = ctx.cluster.metadata.controller_id
    ctx.reply(ctx.response(throttle_time_ms=0, brokers=brokers, cluster_id=cluster_id(ctx.cluster),
                           controller_id=-1 if controller is None else controller,
                           topics=_topic_rows(ctx, names, created_errors)))


def _fail_metadata(ctx: RequestContext, req: Any, code: int) -> None:
    names = [t.name for t in (req.topics or [])]
    cls = ctx.response_class
    ctx.reply(ctx.response(throttle_time_ms=0, brokers=[], cluster_id=cluster_id(ctx.cluster), controller_id=-1,
                           topics=[cls.MetadataResponseTopic(version=ctx.api_version, error_code=code, name=n,
                                                             is_internal=False, partitions=[]) for n in names]))


@register(api_key=3, min_version=0, max_version=11, fail=_fail_metadata)
def metadata(ctx: RequestContext, req: Any) -> None:
    topics = req.topics
    if topics is None or (ctx.api_version == 0 and not topics):
        _answer_metadata(ctx, None)
        return
    names = [t.name for t in topics]
    store = ctx.cluster.metadata
    allow = ctx.api_version < 4 or bool(req.allow_auto_topic_creation)
    missing = [n for n in names if n not in store.topics and n is not None and _TOPIC_RE.match(n)
               and n not in (".", "..") and not n.startswith("__")]
    if not missing or not allow or not ctx.cluster.auto_create_topics:
        _answer_metadata(ctx, names)
        return
    cluster = ctx.cluster

    def create() -> Any:
        errors = {}
        for n in missing:
            try:
                cluster.create_topic(n, partitions=cluster.num_partitions,
                                     replication_factor=default_rf(cluster))
            except Exception as exc:  # noqa: BLE001 - reported per topic; another client may have created it
                if n not in cluster.metadata.topics:
                    errors[n] = codec.error_code_of(exc) if codec.error_code_of(exc) != -1 else codec.LEADER_NOT_AVAILABLE
        return errors

    ctx.run_blocking(create, lambda errors, exc: _answer_metadata(ctx, names, errors or {}))


@register(api_key=60, min_version=0, max_version=1)
def describe_cluster(ctx: RequestContext, req: Any) -> None:
    cls = ctx.response_class
    controller = ctx.cluster.metadata.controller_id
    ctx.reply(ctx.response(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id=cluster_id(ctx.cluster),
        controller_id=-1 if controller is None else controller,
        brokers=[cls.DescribeClusterBroker(version=ctx.api_version, broker_id=b, host=ctx.server.host,
                                           port=ctx.server.ports[b], rack=None) for b in live_brokers(ctx)],
        ))
