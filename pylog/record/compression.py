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
(``pip install 'pylog-kafka[codecs]'``): a single maintained wheel, built for every
platform, binding the reference implementations of all three, so pylog needs
no C compression code of its own. Without it, reading or writing those codecs
raises :class:`~pylog.errors.InvalidConfigurationError` saying what to install.

Decompression is capped: a records section may not expand past
:data:`MAX_DECOMPRESSED_BYTES` (64 MiB unless ``PYLOG_MAX_DECOMPRESSED_BYTES``
says otherwise), so a crafted batch of a few kilobytes cannot make a reader
allocate gigabytes (a "decompression bomb"); :func:`compress` refuses to write
what a reader would refuse. gzip is streamed with a bounded output; zstd, lz4
and snappy decompress into a buffer that grows, up to the cap, only while the
output keeps coming (snappy declares its length up front and is checked before
any work). See docs/hardening.md.

Complexity: linear in the data. Thread-safety: stateless functions.
"""
from __future__ import annotations

import os
import struct
import zlib
from typing import Any, Optional, Union

from pylog.errors import CorruptRecordError, InvalidConfigurationError, RecordTooLargeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
NAMES = {v: k for k, v in CODECS.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024

Buffer = Union[bytes, bytearray, memoryview]


def _max_decompressed_from_env() -> int:
    raw = os.environ.get("PYLOG_MAX_DECOMPRESSED_BYTES")
    if raw is None:
        return 64 << 20
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 1024:
        raise InvalidConfigurationError(
            f"PYLOG_MAX_DECOMPRESSED_BYTES must be an integer >= 1024, not {raw!r}"
        )
    return value


#: The largest records section a compressed batch (or legacy wrapper) may
#: expand to. Kafka's own limit is max.message.bytes on the compressed size;
#: this bounds what a reader allocates for one batch.
MAX_DECOMPRESSED_BYTES: int = _max_decompressed_from_env()


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
            "snappy, lz4 and zstd need the optional package cramjam: pip install 'pylog-kafka[codecs]'"
        ) from exc
    return cramjam


#: Kafka's default ``compression.level`` per codec (KIP-390, ``CompressionType.*.defaultLevel()``):
#: gzip 6 (``Deflater.DEFAULT_COMPRESSION``), lz4 9, zstd 3 (``ZSTD_CLEVEL_DEFAULT``). snappy has no
#: levels.
DEFAULT_LEVELS = {GZIP: 6, LZ4: 9, ZSTD: 3}
#: The levels KIP-390 accepts per codec (inclusive).
LEVEL_RANGES = {GZIP: (1, 9), LZ4: (1, 17), ZSTD: (-131072, 22)}


def check_level(codec: int, level: Optional[int]) -> Optional[int]:
    """``level`` if codec ``codec`` accepts it (None: the codec's default); raises
    :class:`InvalidConfigurationError` naming the codec and the range otherwise. For snappy and
    no compression the level is ignored (as in Kafka), so None is returned."""
    if level is None or codec not in LEVEL_RANGES:
        return None
    lo, hi = LEVEL_RANGES[codec]
    if not isinstance(level, int) or isinstance(level, bool) or not lo <= level <= hi:
        raise InvalidConfigurationError(
            f"compression_level {level!r} is not valid for {NAMES[codec]}: an int in [{lo}, {hi}] (KIP-390)")
    return level


def compress(codec: int, data: Buffer, level: Optional[int] = None) -> bytes:
    """Compress a batch's records section with Kafka codec ``codec`` at ``level`` (None: the
    codec's default, :data:`DEFAULT_LEVELS`).

    Levels, measured in docs/benchmarks.md ("Compression levels"), follow
    Kafka's producer (KIP-390) including its one subtlety: lz4 at its default
    level 9 runs LZ4's *fast* compressor (Kafka's ``Lz4BlockOutputStream``
    picks ``fastCompressor()`` when the level is the default and the
    high-compression one only for an explicit other level). The compression
    library's own lz4 default is a high-compression level, about 6x slower
    per batch than the fast compressor for a 25% smaller output, which is not
    what a Kafka producer does; an explicit ``compression_level`` other than 9
    asks for LZ4 HC at that level. gzip defaults to 6 and zstd to 3, as in
    Kafka (each is the library's own default too).

    Raises :class:`RecordTooLargeError` when ``data`` is larger than
    :data:`MAX_DECOMPRESSED_BYTES` (a reader would refuse to expand it), and
    :class:`InvalidConfigurationError` for a level outside the codec's range.
    """
    level = check_level(codec, level)
    if len(data) > MAX_DECOMPRESSED_BYTES and codec in NAMES and codec != NONE:
        raise RecordTooLargeError(
            f"records section of {len(data)} bytes is over the {MAX_DECOMPRESSED_BYTES}-byte limit "
            f"of a compressed batch (PYLOG_MAX_DECOMPRESSED_BYTES); append fewer records per batch"
        )
    if codec == GZIP:
        c = zlib.compressobj(DEFAULT_LEVELS[GZIP] if level is None else level, zlib.DEFLATED, 31)  # 31: gzip
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
        # Level 1 is LZ4's fast compressor (LZ4F uses it below level 3): Kafka's choice at the default.
        lz4_level = 1 if level is None or level == DEFAULT_LEVELS[LZ4] else level
        return bytes(_cramjam().lz4.compress(bytes(data), level=lz4_level))
    if codec == ZSTD:
        return bytes(_cramjam().zstd.compress(bytes(data), level=DEFAULT_LEVELS[ZSTD] if level is None else level))
    raise InvalidConfigurationError(f"unknown compression codec id {codec}")


def decompress(
    codec: int,
    data: Buffer,
    path: Union[str, None] = None,
    position: Union[int, None] = None,
    max_bytes: Optional[int] = None,
) -> bytes:
    """Decompress a records section; bad data raises :class:`CorruptRecordError`.

    The output is capped at ``max_bytes`` (default :data:`MAX_DECOMPRESSED_BYTES`):
    data that would expand further raises :class:`CorruptRecordError` naming
    ``path`` and ``position`` before more than the cap is allocated.
    """
    cap = MAX_DECOMPRESSED_BYTES if max_bytes is None else max_bytes
    try:
        if codec == GZIP:
            return _gzip_decompress(data, cap)
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data), cap)
        if codec == LZ4:
            return _bounded(_cramjam().lz4.decompress_into, bytes(data), cap, None)
        if codec == ZSTD:
            raw = bytes(data)
            return _bounded(_cramjam().zstd.decompress_into, raw, cap, _zstd_content_size(raw))
    except InvalidConfigurationError:
        raise
    except _TooLarge as exc:
        raise CorruptRecordError(
            f"{NAMES.get(codec, codec)} records expand past {cap} bytes ({exc}): "
            "refusing a decompression bomb (PYLOG_MAX_DECOMPRESSED_BYTES raises the limit)",
            path=path,
            position=position,
        ) from None
    except Exception as exc:  # zlib.error, cramjam.DecompressionError, ValueError
        raise CorruptRecordError(
            f"cannot decompress {NAMES.get(codec, codec)} records: {exc}", path=path, position=position
        ) from exc
    raise CorruptRecordError(f"unknown compression codec id {codec}", path=path, position=position)


class _TooLarge(Exception):
    """The output would pass the cap (internal; becomes CorruptRecordError)."""


def _gzip_decompress(data: Buffer, cap: int) -> bytes:
    d = zlib.decompressobj(47)  # wbits 47: gzip or zlib header, auto-detected
    out = d.decompress(data, cap + 1)
    if len(out) > cap:
        raise _TooLarge(f"more than {cap} bytes")
    if not d.eof:
        if d.unconsumed_tail:  # stopped at the cap with input left
            raise _TooLarge(f"more than {cap} bytes")
        raise ValueError("gzip stream is incomplete")
    return out


# cramjam reports a full output buffer with this message (checked in tests/fuzz).
_FULL = "failed to write whole buffer"


def _bounded(decompress_into: Any, data: bytes, cap: int, hint: Optional[int]) -> bytes:
    """Decompress into a buffer that doubles (from ``hint`` or 8x the input) up to ``cap``.

    Complexity: O(output) amortised; a corrupt stream fails on the first
    attempt, an over-cap one after at most log2(cap / first size) attempts
    without ever holding more than ``cap + 1`` bytes.
    """
    if hint is not None and hint > cap:
        raise _TooLarge(f"the frame declares {hint} bytes")
    size = min(cap + 1, max(hint + 1 if hint is not None else 8 * len(data), 4096))
    while True:
        buf = bytearray(size)
        try:
            n = decompress_into(data, buf)
        except Exception as exc:
            if _FULL not in str(exc):
                raise
            if size > cap:
                raise _TooLarge(f"more than {cap} bytes") from None
            size = min(cap + 1, size * 2)
            continue
        if n >= size:  # filled exactly: there may be more
            if size > cap:
                raise _TooLarge(f"more than {cap} bytes")
            size = min(cap + 1, size * 2)
            continue
        del buf[n:]
        return bytes(buf)


def _zstd_content_size(data: bytes) -> Optional[int]:
    """The Frame_Content_Size a zstd frame header declares, or None (RFC 8878 3.1.1.1)."""
    if len(data) < 6 or data[:4] != b"\x28\xb5\x2f\xfd":
        return None
    fhd = data[4]
    fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if fcs_size == 0:
        return None
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    if len(data) < at + fcs_size:
        return None
    value = int.from_bytes(data[at : at + fcs_size], "little")
    return value + 256 if fcs_size == 2 else value


def _snappy_decompress(data: bytes, cap: int) -> bytes:
    snappy = _cramjam().snappy
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(snappy, data, cap)
    if len(data) < len(_XERIAL_HEADER):
        raise ValueError("truncated xerial header")
    pos, out, total = len(_XERIAL_HEADER), [], 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise ValueError("truncated xerial block length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or n > len(data) - pos:
            raise ValueError("xerial block length out of range")
        block = _snappy_block(snappy, data[pos : pos + n], cap - total)
        total += len(block)
        out.append(block)
        pos += n
    return b"".join(out)


def _snappy_block(snappy: Any, block: bytes, cap: int) -> bytes:
    """One raw snappy block, its declared length checked against ``cap`` first."""
    declared = int(snappy.decompress_raw_len(block))
    if declared > cap:
        raise _TooLarge(f"a snappy block declares {declared} bytes with {cap} left")
    buf = bytearray(declared)
    n = snappy.decompress_raw_into(block, buf)
    if n != declared:
        raise ValueError(f"snappy block declared {declared} bytes but held {n}")
    return bytes(buf)
