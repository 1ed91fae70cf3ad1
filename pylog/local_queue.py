"""``pylog.open(dir)``: the durable local queue, a one-broker cluster on a directory.

It picks between the two facades: :class:`pylog.shared.SharedCluster` (the
default: processes share the directory) and a plain one-process
:class:`pylog.cluster.Cluster`. It lives in its own module so that neither
facade imports the other's module back (``shared`` builds on ``cluster``).
"""
from __future__ import annotations

import os
from typing import Any, Union

from pylog.cluster import Cluster
from pylog.shared import SharedCluster


def open(path: "str | os.PathLike[str]", *, shared: bool = True,  # noqa: A001 - pylog.open
         **kwargs: Any) -> Union[Cluster, SharedCluster]:
    """A single-broker real-time cluster on ``path`` (the durable local queue), shareable by processes.

    Several processes may open the same directory: the first becomes its
    owner (runs the broker), the others reach it over a Unix socket and take
    over when it dies (:class:`pylog.shared.SharedCluster`,
    docs/durable-queue.md). ``shared=False`` (or ``seed=...``) returns a plain
    one-process :class:`Cluster` instead. Other keyword arguments go to
    :class:`Cluster`. Either way the result is a
    :class:`~pylog.runtime.cluster_context.ClusterContext` and a
    :class:`~pylog.runtime.cluster_context.TopicAdmin`, with the client calls of
    :class:`~pylog.facade.ClusterFacade`.
    """
    if not shared or kwargs.get("seed") is not None:
        return Cluster(path, brokers=1, **kwargs)
    return SharedCluster(path, **kwargs)


__all__ = ["open"]
