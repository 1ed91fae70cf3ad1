"""What a simulation runs: :class:`SimConfig` (sizes, per-step fault rates, client settings).

Thread-safety: a plain dataclass; :meth:`SimConfig.validate` is pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from pylog.errors import InvalidConfigurationError

TP = Tuple[str, int]

#: Virtual milliseconds one step may run after its action.
STEP_MS = (5, 50, 200, 800, 2_000)


@dataclass
class SimConfig:
    """What to simulate. Rates are probabilities per step (they must sum to at most 1).

    ``partitions=0``, ``loss=None`` and ``max_latency_ms=None`` are drawn from
    the seed (in that order), as the randomized test driver does.
    """

    seed: int = 0
    brokers: int = 3
    topics: Tuple[str, ...] = ("sim",)
    partitions: int = 1
    rf: int = 3
    min_isr: int = 2
    duration_ms: Optional[int] = 60_000
    steps: Optional[int] = None
    produce_rate: float = 0.40
    max_burst: int = 8
    crash_rate: float = 0.105
    stop_rate: float = 0.045
    restart_rate: float = 0.15
    partition_rate: float = 0.08
    heal_rate: float = 0.08
    slow_rate: float = 0.04
    disk_fail_rate: float = 0.0
    #: chance per step of toggling the metadata-write fault: every write of ``cluster-metadata.json``
    #: fails (ENOSPC) until the next such step (or the settle phase) heals it. 0 (the default) draws
    #: nothing from the seed, so runs without it replay as before.
    metadata_fail_rate: float = 0.0
    loss: Optional[float] = 0.0
    max_latency_ms: Optional[int] = 5
    replica_lag_time_max_ms: int = 2_000
    session_timeout_ms: int = 1_500
    heartbeat_interval_ms: int = 250
    request_timeout_ms: int = 3_000
    delivery_timeout_ms: int = 20_000
    offsets_partitions: int = 1
    #: a random connection that carried traffic (client-broker or broker-broker) drops
    drop_rate: float = 0.0
    #: the producer or the consumer is cut from one broker (one way or both); ``heal`` restores it
    client_cut_rate: float = 0.0
    #: the consumer commits its positions with ``commit_async`` (besides its auto-commits)
    commit_rate: float = 0.0
    auto_commit_interval_ms: int = 5_000
    #: the producer's ``enable_idempotence`` (False: the control run, where duplicates are expected)
    idempotent: bool = True
    #: a step of the transactional producer (begin + sends, more sends, commit or abort; see
    #: :class:`pylog.simulation.txn.TxnActor`), read by a read_committed consumer. 0 (the default)
    #: makes neither client and draws nothing from the seed, so runs without it replay as before.
    txn_rate: float = 0.0

    def validate(self) -> None:
        rates = (self.produce_rate, self.crash_rate, self.stop_rate, self.restart_rate, self.partition_rate,
                 self.heal_rate, self.slow_rate, self.disk_fail_rate, self.metadata_fail_rate, self.drop_rate,
                 self.client_cut_rate, self.commit_rate, self.txn_rate)
        if any(r < 0 for r in rates) or sum(rates) > 1.0 + 1e-9:
            raise InvalidConfigurationError(f"simulation rates must be >= 0 and sum to at most 1 per step, got {rates}")
        if self.brokers < 1 or not 1 <= self.rf <= self.brokers:
            raise InvalidConfigurationError(f"need 1 <= rf ({self.rf}) <= brokers ({self.brokers})")
        if not 1 <= self.min_isr <= self.rf:
            raise InvalidConfigurationError(f"need 1 <= min_isr ({self.min_isr}) <= rf ({self.rf})")
        if self.rf < 2 and self.crash_rate > 0:
            raise InvalidConfigurationError(
                "with RF 1 a crash loses every acknowledged write not yet fsynced, by design (there is no other "
                "replica to take over): use a crash rate of 0 (clean stops are fine)")
        if not self.topics or self.partitions < 0 or self.max_burst < 1:
            raise InvalidConfigurationError("need at least one topic, partitions >= 0 and max_burst >= 1")
        if self.duration_ms is None and self.steps is None:
            raise InvalidConfigurationError("give duration_ms or steps")
        loss = self.loss
        if loss is not None and (not isinstance(loss, (int, float)) or isinstance(loss, bool) or not 0.0 <= loss < 1.0):
            raise InvalidConfigurationError(f"simulation loss must be a number in [0, 1), got {loss!r}")
