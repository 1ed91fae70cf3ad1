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
import struct
from typing import Dict, Optional

logger = logging.getLogger(__name__)

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_BLOCKS: Dict[int, struct.Struct] = {}


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: a signed 32-bit int.

    >>> murmur2(b"21")
    -973932308
    """
    n = len(data)
    h = (_SEED ^ n) & _MASK
    nblocks = n >> 2
    if nblocks:
        st = _BLOCKS.get(nblocks)
        if st is None:
            st = _BLOCKS[nblocks] = struct.Struct(f"<{nblocks}I")
        for k in st.unpack_from(data, 0):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = n & 3
    if tail:
        i = n - tail
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h ^= data[i]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff``."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


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
