"""Kafka's ``Utils.murmur2``: the default partitioner's hash, written once.

The producer's partitioner, the Spark sink and the CLI's keyed produce all
place a keyed record at ``toPositive(murmur2(key)) % partitions``. (The
producer's C send path, ``pylog/_native/sendpath/sendpath.c``, has its own C
copy for its per-record call; ``tests/property/test_send_path.py`` checks it
against this one.)

Thread-safety: pure (the per-length ``struct`` cache only grows).
"""
from __future__ import annotations

import struct
from typing import Dict

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



def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Kafka's choice for a keyed record: ``toPositive(murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


__all__ = ["murmur2", "partition_for_key"]
