"""What the :class:`~pylog.client.consumer.Consumer` facade provides to its parts (declarations only).

:class:`ConsumerBase` is the common base of
:class:`~pylog.client.subscription.SubscriptionState`,
:class:`~pylog.client.fetcher.Fetcher` and
:class:`~pylog.client.consumer_coordinator.ConsumerCoordinator`. It declares,
for the type checker, the attributes and helpers that ``Consumer.__init__``
sets up for all of them: the cluster handles (``store``, ``scheduler``), the
options copied from its :class:`~pylog.client.config.ConsumerConfig`, the
client node, the error waiting for the next ``poll`` and the loop helpers.
It holds no state and runs no code: what each part needs from another part
is declared in that part itself.

Owns: nothing at run time (the seam, written down). Complexity, durability:
none. Thread-safety: see :mod:`pylog.client.consumer`.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from pylog.client._node import ClientNode
    from pylog.runtime.cluster_context import MetadataView
    from pylog.runtime.scheduler import Scheduler

logger = logging.getLogger(__name__)


class ConsumerBase:
    """The facade's attributes every part of a consumer reads (set in ``Consumer.__init__``)."""

    if TYPE_CHECKING:
        # the cluster (as Consumer.__init__ takes it from the cluster object)
        store: MetadataView
        scheduler: Scheduler
        # options (ConsumerConfig)
        group_id: Optional[str]
        group_instance_id: Optional[str]
        client_id: str
        auto_offset_reset: str
        enable_auto_commit: bool
        isolation_level: str
        session_timeout_ms: int
        heartbeat_interval_ms: int
        rebalance_timeout_ms: int
        max_poll_interval_ms: int
        fetch_max_wait_ms: int
        max_partition_fetch_bytes: int
        request_timeout_ms: int
        max_poll_records: int
        retry_backoff_ms: int
        # run-time state of the facade
        _node: ClientNode
        _closed: bool
        _error: Optional[BaseException]  # raised by the next poll (or position)
        _changed: threading.Event  # set when a position is resolved or an error waits
        _next_attempt: int  # when to retry what failed (coordinator lookup, join, position)
        _last_poll_ms: Optional[int]

        def _now(self) -> int: ...
        def _signal(self) -> None: ...
        def _call(self, fn: Callable[[], Any]) -> Any: ...


__all__ = ["ConsumerBase"]
