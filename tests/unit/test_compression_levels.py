"""compression_level (KIP-390): Kafka's per-codec defaults, ranges, and the level reaching the codec."""
from __future__ import annotations

import random
import zlib

import pytest

import pylog
from pylog.errors import InvalidConfigurationError
from pylog.record import compression as codecs
from pylog.record import RecordBatch, encode_batch, scan

cramjam = pytest.importorskip("cramjam")

# Compressible but not trivially so: what a level changes shows in the output.
_rnd = random.Random(11)
_WORDS = [b"order", b"user", b"status", b"shipped", b"pending", b"amount", b"currency"]
DATA = b"".join(b'{"%s":%d,"%s":"%s"}' % (_rnd.choice(_WORDS), _rnd.randrange(10**6), _rnd.choice(_WORDS),
                                            _rnd.choice(_WORDS)) for _ in range(2000))


def test_defaults_are_kafkas() -> None:
    assert codecs.DEFAULT_LEVELS == {codecs.GZIP: 6, codecs.LZ4: 9, codecs.ZSTD: 3}


def test_gzip_default_is_level_6_and_a_level_reaches_zlib() -> None:
    def gz(level: int) -> bytes:
        c = zlib.compressobj(level, zlib.DEFLATED, 31)
        return c.compress(DATA) + c.flush()

    assert codecs.compress(codecs.GZIP, DATA) == gz(6)
    assert codecs.compress(codecs.GZIP, DATA, 1) == gz(1) != gz(6)


def test_lz4_default_is_the_fast_compressor_as_in_kafka() -> None:
    fast = bytes(cramjam.lz4.compress(DATA, level=1))
    assert codecs.compress(codecs.LZ4, DATA) == fast
    assert codecs.compress(codecs.LZ4, DATA, 9) == fast  # the default level, said explicitly
    hc = codecs.compress(codecs.LZ4, DATA, 12)  # any other level: LZ4 HC at that level
    assert hc == bytes(cramjam.lz4.compress(DATA, level=12)) and len(hc) < len(fast)
    assert codecs.decompress(codecs.LZ4, hc) == codecs.decompress(codecs.LZ4, fast) == DATA


def test_zstd_default_is_level_3_and_a_level_reaches_zstd() -> None:
    assert codecs.compress(codecs.ZSTD, DATA) == bytes(cramjam.zstd.compress(DATA, level=3))
    assert codecs.compress(codecs.ZSTD, DATA, 19) == bytes(cramjam.zstd.compress(DATA, level=19))


@pytest.mark.parametrize("codec,level", [(codecs.GZIP, 0), (codecs.GZIP, 10), (codecs.LZ4, 0), (codecs.LZ4, 18),
                                         (codecs.ZSTD, 23), (codecs.GZIP, "6"), (codecs.LZ4, True)])
def test_a_level_outside_the_codecs_range_is_refused(codec: int, level: object) -> None:
    with pytest.raises(InvalidConfigurationError, match="compression_level"):
        codecs.compress(codec, DATA, level)  # type: ignore[arg-type]


def test_snappy_ignores_the_level_as_kafka_does() -> None:
    assert codecs.compress(codecs.SNAPPY, DATA, 99) == codecs.compress(codecs.SNAPPY, DATA)


def test_log_append_and_producer_take_compression_level(tmp_path) -> None:
    log = pylog.Log.open(tmp_path / "t-0")
    try:
        values = [DATA[i : i + 90] for i in range(0, 90 * 200, 90)]
        log.append(values, compression="gzip", compression_level=1)
        log.append(values, compression="gzip")
        with pytest.raises(InvalidConfigurationError):
            log.append(values, compression="gzip", compression_level=12)
        batches = log.read_batches(0, 1 << 20)
        assert [b.compression for b in batches] == [codecs.GZIP, codecs.GZIP]
        assert batches[0].info.size > batches[1].info.size  # level 1 compresses less than the default 6
        assert [r.value for r in log.read(0, 1 << 20)] == values + values
    finally:
        log.close()
    with pytest.raises(InvalidConfigurationError):
        pylog.Producer(None, compression_type="lz4", compression_level=0)


def test_encode_batch_level_round_trips() -> None:
    recs = [DATA[i : i + 50] for i in range(0, 5000, 50)]
    for codec in ("gzip", "lz4", "zstd"):
        for level in (None, 1, 5):
            out = encode_batch(recs, now_ms=0, compression=codec, compression_level=level)
            info = scan(out).batches[0]
            assert [r.value for r in RecordBatch(info, memoryview(out)).records()] == recs
