"""Kafka's default partitioner: murmur2 of the key, sticky partitions for records without one.

* :func:`murmur2` is the Java client's ``Utils.murmur2`` (32-bit MurmurHash2,
  seed ``0x9747b28c``, little-endian 4-byte blocks), returned as a signed
  32-bit int as Java does; :func:`partition_for_key` is
  ``(murmur2(key) & 0x7fffffff) % num_partitions`` (``Utils.toPositive``), so a
  key lands on the same partition as with Kafka's Java client, kafka-python
  and librdkafka's ``murmur2_random`` for the same partition count.
* :class:`StickyPartitioner` (KIP-480): a record without a key goes to the
  topic's current "sticky" partition; the producer asks for a new one when
  that partition's batch is full or has been sent, and the new one is chosen
  at random among the other partitions. Batches fill up instead of one record
  going to each partition in turn.

Durability: none (pure functions and in-memory choice).
Complexity: murmur2 is O(len(key)). Thread-safety: :func:`murmur2` is pure;
:class:`StickyPartitioner` is called under the producer's lock.
"""
from __future__ import annotations

import logging
import random
from typing import Dict, Optional

from pylog.record.murmur import murmur2, partition_for_key

logger = logging.getLogger(__name__)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff``."""
    return n & 0x7FFFFFFF


class StickyPartitioner:
    """Per topic, the partition records without a key currently go to (KIP-480)."""

    def __init__(self, rng: Optional[random.Random] = None):
        self.rng = rng or random.Random()
        self.current: Dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        """The sticky partition of ``topic`` (chosen now if it has none)."""
        p = self.current.get(topic)
        if p is None or p >= num_partitions:
            p = self.current[topic] = self.rng.randrange(num_partitions)
        return p

    def next_partition(self, topic: str, num_partitions: int, previous: int) -> int:
        """Move ``topic`` off ``previous`` (its batch is full or was sent) to another partition."""
        cur = self.current.get(topic)
        if cur is not None and cur != previous and cur < num_partitions:
            return cur  # someone already moved it
        if num_partitions <= 1:
            p = 0
        else:
            p = self.rng.randrange(num_partitions - 1)
            if p >= previous:
                p += 1
        self.current[topic] = p
        return p


__all__ = ["murmur2", "to_positive", "partition_for_key", "StickyPartitioner"]
