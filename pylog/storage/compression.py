"""Batch compression codecs, as Kafka encodes them in attributes bits 0-2.

=====  ======  =========================================================
id     name    format on disk
=====  ======  =========================================================
0      none
1      gzip    a gzip member (RFC 1952); standard library ``zlib``
2      snappy  xerial snappy-java framing (what Kafka's Java client writes);
               raw snappy blocks are also accepted when reading
3      lz4     LZ4 frame format
4      zstd    a Zstandard frame
=====  ======  =========================================================

snappy, lz4 and zstd come from one optional package, ``cramjam``
(``pip install pylog[codecs]``): a single maintained wheel, built for every
platform, binding the reference implementations of all three, so pylog needs
no C compression code of its own. Without it, reading or writing those codecs
raises :class:`~pylog.errors.InvalidConfigurationError` saying what to install.

Complexity: linear in the data. Thread-safety: stateless functions.
"""
from __future__ import annotations

import struct
import zlib
from typing import Any, Union

from pylog.errors import CorruptRecordError, InvalidConfigurationError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
NAMES = {v: k for k, v in CODECS.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024

Buffer = Union[bytes, bytearray, memoryview]


def codec_id(compression: Union[str, int, None]) -> int:
    """Kafka's codec id for a name (``"gzip"``...) or id; ``None`` is no compression."""
    if compression is None:
        return NONE
    if isinstance(compression, int) and not isinstance(compression, bool):
        if compression in NAMES:
            return compression
    elif isinstance(compression, str) and compression.lower() in CODECS:
        return CODECS[compression.lower()]
    raise InvalidConfigurationError(
        f"compression must be one of {sorted(CODECS)} (or ids 0-4), not {compression!r}"
    )


def _cramjam() -> Any:
    try:
        import cramjam
    except ImportError as exc:
        raise InvalidConfigurationError(
            "snappy, lz4 and zstd need the optional package cramjam: pip install 'pylog[codecs]'"
        ) from exc
    return cramjam


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a batch's records section with Kafka codec ``codec``."""
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        snappy = _cramjam().snappy
        mv = memoryview(data)
        parts = [_XERIAL_HEADER]
        for i in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(snappy.compress_raw(bytes(mv[i : i + _XERIAL_BLOCK])))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        return bytes(_cramjam().lz4.compress(bytes(data)))
    if codec == ZSTD:
        return bytes(_cramjam().zstd.compress(bytes(data)))
    raise InvalidConfigurationError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: Buffer, path: Union[str, None] = None, position: Union[int, None] = None) -> bytes:
    """Decompress a records section; bad data raises :class:`CorruptRecordError`."""
    try:
        if codec == GZIP:
            d = zlib.decompressobj(47)  # wbits 47: gzip or zlib header, auto-detected
            out = d.decompress(data)
            if not d.eof:
                raise ValueError("gzip stream is incomplete")
            return out
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == LZ4:
            return bytes(_cramjam().lz4.decompress(bytes(data)))
        if codec == ZSTD:
            return bytes(_cramjam().zstd.decompress(bytes(data)))
    except InvalidConfigurationError:
        raise
    except Exception as exc:  # zlib.error, cramjam.DecompressionError, ValueError
        raise CorruptRecordError(
            f"cannot decompress {NAMES.get(codec, codec)} records: {exc}", path=path, position=position
        ) from exc
    raise CorruptRecordError(f"unknown compression codec id {codec}", path=path, position=position)


def _snappy_decompress(data: bytes) -> bytes:
    snappy = _cramjam().snappy
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(snappy.decompress_raw(data))
    if len(data) < len(_XERIAL_HEADER):
        raise ValueError("truncated xerial header")
    pos, out = len(_XERIAL_HEADER), []
    while pos < len(data):
        if len(data) - pos < 4:
            raise ValueError("truncated xerial block length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or n > len(data) - pos:
            raise ValueError("xerial block length out of range")
        out.append(bytes(snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)
