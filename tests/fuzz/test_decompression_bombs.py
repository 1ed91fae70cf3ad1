"""Decompression bombs: a small compressed batch may not expand without limit.

A reader decompresses at most ``compression.MAX_DECOMPRESSED_BYTES`` (64 MiB
by default) per batch or legacy wrapper; past that it raises
CorruptRecordError naming the file and byte position, having allocated no
more than the cap. Writers refuse to produce what a reader would refuse.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import pytest

import fuzz_corpus as fc
import pylog
from pylog.errors import CorruptRecordError, RecordTooLargeError
from pylog.record import compression

CODECS = ["gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_batch_over_the_cap_is_a_named_corrupt_record_error(tmp_path, monkeypatch, codec: str) -> None:
    """A batch written under a larger cap, read under a smaller one: CorruptRecordError naming
    the segment file and the batch's byte position; the batches before it still read."""
    path = str(tmp_path / "bomb-0")
    with pylog.Log.open(path) as log:
        log.append([b"small"], compression=codec)
        big = log.append([b"\x00" * (256 << 10)] * 8, compression=codec)  # 2 MiB uncompressed
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    with pylog.Log.open(path) as log:
        assert [r.value for r in log.read(0, max_offset=1)] == [b"small"]
        batches = log.read_batches(big.base_offset)
        with pytest.raises(CorruptRecordError) as info:
            batches[0].records()
        msg = str(info.value)
        assert "00000000000000000000.log" in msg and "expand past 1048576 bytes" in msg
        assert info.value.position == batches[0].info.position and info.value.position > 0
        with pytest.raises(CorruptRecordError):
            batches[0].value_columns()


@pytest.mark.parametrize("codec", CODECS)
def test_writer_refuses_what_a_reader_would_refuse(tmp_path, monkeypatch, codec: str) -> None:
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 64 << 10)
    with pylog.Log.open(str(tmp_path / "w-0")) as log:
        with pytest.raises(RecordTooLargeError) as info:
            log.append([b"x" * (40 << 10)] * 2, compression=codec)
        assert "PYLOG_MAX_DECOMPRESSED_BYTES" in str(info.value)
        assert log.log_end_offset == 0
        assert log.append([b"x" * (40 << 10)], compression=codec).base_offset == 0
        assert [len(r.value) for r in log.read(0)] == [40 << 10]


@pytest.mark.parametrize("codec", CODECS)
def test_cap_is_exact(codec: str) -> None:
    """Exactly the cap decompresses; one byte more does not."""
    cap = 100_000
    data = bytes(range(256)) * (cap // 256) + b"z" * (cap % 256)
    assert len(data) == cap
    cid = compression.CODECS[codec]
    assert compression.decompress(cid, compression.compress(cid, data), max_bytes=cap) == data
    with pytest.raises(CorruptRecordError):
        compression.decompress(cid, compression.compress(cid, data + b"!"), max_bytes=cap, path="p.log", position=3)


def test_snappy_block_declaring_a_gigabyte_is_refused_before_allocating() -> None:
    """A raw snappy block starts with its uncompressed length: 1 GiB declared in 8 bytes."""
    varint = bytes([0x80, 0x80, 0x80, 0x80, 0x04])  # 1 << 30
    for data in (varint + b"\x00\x00\x00", compression._XERIAL_HEADER + struct.pack(">i", 8) + varint + b"\x00\x00\x00"):
        with pytest.raises(CorruptRecordError) as info:
            compression.decompress(compression.SNAPPY, data, path="s.log", position=9)
        assert "1073741824" in str(info.value) and "s.log" in str(info.value)


def test_zstd_frame_declaring_more_than_the_cap_is_refused_at_its_header() -> None:
    frame = bytearray(compression.compress(compression.ZSTD, b"a" * 1000))
    assert compression._zstd_content_size(bytes(frame)) == 1000
    assert compression._zstd_content_size(b"\x28\xb5\x2f\xfd") is None
    with pytest.raises(CorruptRecordError) as info:
        compression.decompress(compression.ZSTD, bytes(frame), max_bytes=999)
    assert "declares 1000 bytes" in str(info.value)


BOMB = r"""
import resource, sys, zlib
import cramjam
from pylog.errors import CorruptRecordError
from pylog.record import compression

codec = sys.argv[1]
chunk, total = b"\x00" * (1 << 20), 192  # 192 MiB of zeros, compressed as a stream
if codec == "gzip":
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(c.compress(chunk) for _ in range(total)) + c.flush()
else:
    c = getattr(cramjam, codec).Compressor()
    for _ in range(total):
        c.compress(chunk)
    bomb = bytes(c.finish())
del chunk
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    compression.decompress(compression.CODECS[codec], bomb, path="bomb.log", position=0)
except CorruptRecordError as exc:
    assert "bomb.log" in str(exc), exc
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(len(bomb), (after - before) // 1024)
else:
    print("DECOMPRESSED")
"""


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
@pytest.mark.timeout(300)
def test_real_bomb_at_the_default_cap(codec: str) -> None:
    """192 MiB of zeros in well under a megabyte: refused, and the reader's peak memory
    grows by about the 64 MiB cap, not by the 192 MiB the data claims (measured in a child)."""
    env = {k: v for k, v in os.environ.items() if k != "PYLOG_MAX_DECOMPRESSED_BYTES"}
    proc = subprocess.run([sys.executable, "-c", BOMB, codec], capture_output=True, text=True, timeout=280, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    size, grown_mib = map(int, proc.stdout.split())
    assert size < 4 << 20
    assert grown_mib < 3 * 64, grown_mib  # a buffer of the cap plus its copy at most
