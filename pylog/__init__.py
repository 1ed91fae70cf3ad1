"""pylog: an embeddable, single-process, Kafka-style commit log with a C core.

The public names of DESIGN.md section 4 live here. See README.md.
"""
from __future__ import annotations

from pylog import errors  # noqa: E402
from pylog._version import __version__  # noqa: E402
from pylog.client.admin import GroupDescription, GroupListing, MemberDescription  # noqa: E402
from pylog.client.consumer import Consumer, ConsumerRecord, PollResult  # noqa: E402
from pylog.client.producer import Producer, RecordMetadata  # noqa: E402
from pylog.client.types import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition  # noqa: E402
from pylog.cluster import Cluster, PartitionInfo  # noqa: E402
from pylog.local_queue import open  # noqa: E402,A004
from pylog.errors import PylogError  # noqa: E402
from pylog.metrics import Metric, render_prometheus, serve_metrics  # noqa: E402
from pylog.shared import SharedCluster  # noqa: E402
from pylog.storage.log import AppendResult, Log, LogConfig  # noqa: E402
from pylog.record import Record, RecordBatch  # noqa: E402

__all__ = [
    "__version__",
    "PylogError",
    "errors",
    "Log",
    "LogConfig",
    "AppendResult",
    "Record",
    "RecordBatch",
    "Cluster",
    "PartitionInfo",
    "open",
    "SharedCluster",
    "Metric",
    "render_prometheus",
    "serve_metrics",
    "Producer",
    "RecordMetadata",
    "Consumer",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "TopicPartition",
    "PollResult",
    "GroupListing",
    "GroupDescription",
    "MemberDescription",
]
