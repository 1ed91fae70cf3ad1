"""Replica assignment as Kafka's AdminUtils.assignReplicasToBrokers does it (no racks).

``start_index`` and ``shift`` are drawn from the cluster's seeded RNG unless
given. With ``start_index=0`` and ``shift=0`` the first ``n`` partitions get
the textbook ``[i mod n, (i+1) mod n, ...]``:

>>> assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, shift=0)[:6]
[[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1], [0, 2, 3]]

Complexity: O(partitions x replication_factor).
"""
from __future__ import annotations

import random
from typing import List, Optional, Sequence

from pylog.errors import InvalidConfigurationError


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    rng: Optional[random.Random] = None,
    start_index: Optional[int] = None,
    shift: Optional[int] = None,
) -> List[List[int]]:
    """Return the replica list of each partition; its first entry is the preferred leader."""
    n = len(brokers)
    if partitions <= 0:
        raise InvalidConfigurationError(f"partitions must be > 0, got {partitions}")
    if replication_factor <= 0:
        raise InvalidConfigurationError(f"replication_factor must be > 0, got {replication_factor}")
    if replication_factor > n:
        raise InvalidConfigurationError(
            f"replication_factor {replication_factor} is larger than the number of brokers {n}"
        )
    rng = rng or random.Random()
    start = start_index if start_index is not None else rng.randrange(n)
    next_shift = shift if shift is not None else rng.randrange(n)
    out: List[List[int]] = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (next_shift + j) % (n - 1)) % n])
        out.append(replicas)
    return out
