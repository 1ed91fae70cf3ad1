"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs: the cluster's own admin methods.

Each runs on a worker thread (``blocking=True``) and calls the same
:class:`pylog.Cluster` method an in-process user would (``create_topic``,
``delete_topic``, ``create_partitions``, ``topic_config``), so the controller
path is the one already tested. DeleteTopics and CreatePartitions are
advertised only when the cluster has those methods.

Topic configs arrive in Kafka's dotted names (``cleanup.policy``); they are
passed as snake_case keys (``cleanup_policy``), which every pylog version takes;
``min.insync.replicas`` and ``unclean.leader.election.enable`` become the
create_topic arguments of those names. An unknown config: INVALID_CONFIG.

Thread-safety: handlers run on the server's admin worker threads.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pylog.protocol import codec
from pylog.protocol.api import RequestContext, register
from pylog.protocol.handlers.core import default_rf
from pylog.runtime.cluster_context import ServedCluster

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


def _err(exc: BaseException) -> Tuple[int, str]:
    code = codec.error_code_of(exc)
    name = type(exc).__name__
    if name == "InvalidPartitionsError":
        code = codec.INVALID_PARTITIONS
    return code, str(exc)


def _snake(configs: Dict[str, Optional[str]]) -> Dict[str, object]:
    return {k.replace(".", "_"): v for k, v in configs.items()}


# ------------------------------------------------------------ CreateTopics
def _create_topics_response(ctx: RequestContext, rows: List[Tuple[str, int, str, int, int]]) -> Any:
    T = ctx.response_class.CreatableTopicResult
    v = ctx.api_version
    return ctx.response(throttle_time_ms=0, topics=[
        T(version=v, name=n, error_code=code, error_message=msg or None, num_partitions=np, replication_factor=rf,
          configs=[]) for n, code, msg, np, rf in rows])


def _fail_create(ctx: RequestContext, req: Any, code: int) -> None:
    ctx.reply(_create_topics_response(ctx, [(t.name, code, "", -1, -1) for t in (req.topics or [])]))


@register(api_key=19, min_version=2, max_version=7, fail=_fail_create, blocking=True)
def create_topics(ctx: RequestContext, req: Any) -> None:
    cluster = ctx.cluster
    rows = []
    names = [t.name for t in (req.topics or [])]
    for t in req.topics or []:
        n = t.name
        if names.count(n) > 1:
            rows.append((n, codec.INVALID_REQUEST, "topic named more than once in the request", -1, -1))
            continue
        partitions = cluster.num_partitions if t.num_partitions in (-1, None) else int(t.num_partitions)
        rf = default_rf(cluster) if t.replication_factor in (-1, None) else int(t.replication_factor)
        if t.assignments:
            rows.append((n, codec.INVALID_REQUEST, "manual replica assignments are not supported", -1, -1))
            continue
        if partitions < 1:
            rows.append((n, codec.INVALID_PARTITIONS, f"num_partitions must be at least 1, got {partitions}", -1, -1))
            continue
        if not 1 <= rf <= len(cluster.brokers):
            rows.append((n, codec.INVALID_REPLICATION_FACTOR,
                         f"replication factor {rf} is not in 1..{len(cluster.brokers)} (brokers)", -1, -1))
            continue
        if n in cluster.metadata.topics:
            rows.append((n, codec.TOPIC_ALREADY_EXISTS, f"topic {n!r} already exists", -1, -1))
            continue
        configs = _snake({c.name: c.value for c in (t.configs or [])})
        kwargs: Dict[str, Any] = {}
        try:
            if "min_insync_replicas" in configs:
                kwargs["min_insync_replicas"] = int(configs.pop("min_insync_replicas"))  # type: ignore[call-overload]  # str or None
            if "unclean_leader_election_enable" in configs:
                kwargs["unclean_leader_election"] = str(configs.pop("unclean_leader_election_enable")).lower() == "true"
            configs = {k: _typed(k, v) for k, v in configs.items()}
            if req.validate_only:
                from pylog.replication.controller import validate_topic_configs

                validate_topic_configs(n, configs)
            else:
                cluster.create_topic(n, partitions=partitions, replication_factor=rf, config=configs or None, **kwargs)
        except Exception as exc:  # noqa: BLE001 - each topic gets its own error code
            code, msg = _err(exc)
            rows.append((n, codec.INVALID_CONFIG if code == -1 and "config" in msg else code, msg, -1, -1))
            continue
        rows.append((n, 0, "", partitions, rf))
    ctx.reply(_create_topics_response(ctx, rows))


def _typed(key: str, value: Any) -> Any:
    """Kafka sends config values as strings: typed as the LogConfig field's default is."""
    from pylog.storage.log import LogConfig

    if not isinstance(value, str) or key not in LogConfig._fields:
        return value
    default = LogConfig._field_defaults.get(key)
    if isinstance(default, bool):
        return value.lower() == "true"
    if isinstance(default, int) or key in ("flush_messages", "flush_ms"):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


# ------------------------------------------------------------ DeleteTopics
def _fail_delete(ctx: RequestContext, req: Any, code: int) -> None:
    R = ctx.response_class.DeletableTopicResult
    names = _delete_names(ctx, req)
    ctx.reply(ctx.response(throttle_time_ms=0, responses=[
        R(version=ctx.api_version, name=n, error_code=code) for n in names]))


def _delete_names(ctx: RequestContext, req: Any) -> List[Optional[str]]:
    if ctx.api_version >= 6:
        return [t.name for t in (req.topics or [])]
    return list(req.topic_names or [])


@register(api_key=20, min_version=1, max_version=6, fail=_fail_delete, blocking=True,
          available=lambda c: hasattr(c, "delete_topic"))
def delete_topics(ctx: RequestContext, req: Any) -> None:
    R = ctx.response_class.DeletableTopicResult
    out = []
    for n in _delete_names(ctx, req):
        if n is None:
            out.append(R(version=ctx.api_version, name=None, error_code=100,  # UNKNOWN_TOPIC_ID: no topic ids here
                         error_message="topic ids are not supported"))
            continue
        try:
            ctx.cluster.delete_topic(n)
            out.append(R(version=ctx.api_version, name=n, error_code=0))
        except Exception as exc:  # noqa: BLE001 - per topic
            code, msg = _err(exc)
            out.append(R(version=ctx.api_version, name=n, error_code=code, error_message=msg))
    ctx.reply(ctx.response(throttle_time_ms=0, responses=out))


# -------------------------------------------------------- CreatePartitions
def _fail_partitions(ctx: RequestContext, req: Any, code: int) -> None:
    R = ctx.response_class.CreatePartitionsTopicResult
    ctx.reply(ctx.response(throttle_time_ms=0, results=[
        R(version=ctx.api_version, name=t.name, error_code=code, error_message=None) for t in (req.topics or [])]))


@register(api_key=37, min_version=0, max_version=3, fail=_fail_partitions, blocking=True,
          available=lambda c: hasattr(c, "create_partitions"))
def create_partitions(ctx: RequestContext, req: Any) -> None:
    R = ctx.response_class.CreatePartitionsTopicResult
    out = []
    for t in req.topics or []:
        try:
            if t.assignments:
                raise _Invalid("manual replica assignments are not supported")
            cfg = ctx.cluster.metadata.topics.get(t.name)
            if cfg is None:
                out.append(R(version=ctx.api_version, name=t.name, error_code=codec.UNKNOWN_TOPIC_OR_PARTITION,
                             error_message=f"unknown topic {t.name!r}"))
                continue
            if int(t.count) <= cfg.partitions:
                out.append(R(version=ctx.api_version, name=t.name, error_code=codec.INVALID_PARTITIONS,
                             error_message=f"topic {t.name!r} has {cfg.partitions} partitions; count {t.count} "
                             "must be larger"))
                continue
            if not req.validate_only:
                ctx.cluster.create_partitions(t.name, int(t.count))
            out.append(R(version=ctx.api_version, name=t.name, error_code=0, error_message=None))
        except _Invalid as exc:
            out.append(R(version=ctx.api_version, name=t.name, error_code=codec.INVALID_REQUEST, error_message=str(exc)))
        except Exception as exc:  # noqa: BLE001 - per topic
            code, msg = _err(exc)
            out.append(R(version=ctx.api_version, name=t.name, error_code=code, error_message=msg))
    ctx.reply(ctx.response(throttle_time_ms=0, results=out))


class _Invalid(Exception):
    pass


# --------------------------------------------------------- DescribeConfigs
def _kafka_name(snake: str) -> str:
    return snake.replace("_", ".")


def topic_configs(cluster: ServedCluster, name: str) -> List[Tuple[str, Optional[str], int]]:
    """Every config of topic ``name``: (Kafka name, value as Kafka writes it, source)."""
    from pylog.storage.log import LogConfig

    cfg = cluster.metadata.topics[name]
    broker_cfg = {}
    for b in cluster.brokers.values():
        broker_cfg = dict(b.log_config or {})
        break
    overrides = dict(cfg.configs)
    rows: List[Tuple[str, Optional[str], int]] = []
    for field in LogConfig._fields:
        if field in ("recovery_checkpoint_interval_ms",):
            continue
        if field in overrides:
            val, src = overrides[field], SOURCE_DYNAMIC_TOPIC
        elif field in broker_cfg:
            val, src = broker_cfg[field], SOURCE_STATIC_BROKER
        else:
            val, src = LogConfig._field_defaults[field], SOURCE_DEFAULT
        rows.append((_kafka_name(field), _kafka_value(val), src))
    rows.append(("min.insync.replicas", str(cfg.min_insync_replicas),
                 SOURCE_DYNAMIC_TOPIC if cfg.min_insync_replicas != 1 else SOURCE_DEFAULT))
    rows.append(("unclean.leader.election.enable", "true" if cfg.unclean_leader_election else "false",
                 SOURCE_DYNAMIC_TOPIC if cfg.unclean_leader_election else SOURCE_DEFAULT))
    for k, v in sorted(overrides.items()):
        if k not in LogConfig._fields:
            rows.append((_kafka_name(k), _kafka_value(v), SOURCE_DYNAMIC_TOPIC))
    return rows


def _kafka_value(v: Any) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() is False:
        return repr(v)
    return str(v)


def _fail_describe_configs(ctx: RequestContext, req: Any, code: int) -> None:
    R = ctx.response_class.DescribeConfigsResult
    ctx.reply(ctx.response(throttle_time_ms=0, results=[
        R(version=ctx.api_version, error_code=code, error_message=None, resource_type=r.resource_type,
          resource_name=r.resource_name, configs=[]) for r in (req.resources or [])]))


@register(api_key=32, min_version=1, max_version=4, fail=_fail_describe_configs, blocking=True)
def describe_configs(ctx: RequestContext, req: Any) -> None:
    """Topics: every config with its value and source (defaults included, as Kafka answers);
    brokers: the brokers' log config overrides and the listener settings."""
    R = ctx.response_class.DescribeConfigsResult
    C = R.DescribeConfigsResourceResult
    v = ctx.api_version
    results = []
    for r in req.resources or []:
        keys = set(r.configuration_keys) if r.configuration_keys is not None else None
        if r.resource_type == TOPIC_RESOURCE:
            if r.resource_name not in ctx.cluster.metadata.topics:
                results.append(R(version=v, error_code=codec.UNKNOWN_TOPIC_OR_PARTITION,
                                 error_message=f"unknown topic {r.resource_name!r}", resource_type=r.resource_type,
                                 resource_name=r.resource_name, configs=[]))
                continue
            rows = topic_configs(ctx.cluster, r.resource_name)
        elif r.resource_type == BROKER_RESOURCE:
            rows = _broker_configs(ctx)
        else:
            results.append(R(version=v, error_code=codec.INVALID_REQUEST, error_message="unsupported resource type",
                             resource_type=r.resource_type, resource_name=r.resource_name, configs=[]))
            continue
        configs = [C(version=v, name=n, value=val, read_only=False, config_source=src, is_sensitive=False,
                     synonyms=[], config_type=0, documentation=None)
                   for n, val, src in rows if keys is None or n in keys]
        results.append(R(version=v, error_code=0, error_message=None, resource_type=r.resource_type,
                         resource_name=r.resource_name, configs=configs))
    ctx.reply(ctx.response(throttle_time_ms=0, results=results))


def _broker_configs(ctx: RequestContext) -> List[Tuple[str, Optional[str], int]]:
    c = ctx.cluster
    rows: List[Tuple[str, Optional[str], int]] = [("auto.create.topics.enable", "true" if c.auto_create_topics else "false", SOURCE_STATIC_BROKER),
            ("num.partitions", str(c.num_partitions), SOURCE_STATIC_BROKER),
            ("default.replication.factor", str(default_rf(c)), SOURCE_STATIC_BROKER),
            ("socket.request.max.bytes", str(ctx.server.max_request_bytes), SOURCE_STATIC_BROKER),
            ("replica.lag.time.max.ms", str(c.config.replica_lag_time_max_ms), SOURCE_STATIC_BROKER)]
    for k, val in sorted((ctx.broker.log_config or {}).items()):
        rows.append(("log." + _kafka_name(k) if not k.startswith("log") else _kafka_name(k), _kafka_value(val),
                     SOURCE_STATIC_BROKER))
    return rows
