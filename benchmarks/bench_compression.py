"""Compression levels per codec on one batch's records section (issue 18, item 6).

Run: ``.venv/bin/python benchmarks/bench_compression.py [--records 1000] [--rounds 200]``.

The records section of one batch of 1,000 JSON-like values of 40-60 bytes
(what ``encode_batch`` compresses) is compressed with every codec at the
levels that matter: Kafka's default (KIP-390), the library's own default,
the fastest, and a high level. Prints µs per batch (best of 3 runs of
``--rounds``), compression ratio and MB/s of input; decompression is
checked once per setting (a fast wrong answer fails). docs/benchmarks.md
("Compression levels") has a run and the choice it supports.
"""
from __future__ import annotations

import argparse
import random
import time
import zlib
from typing import Callable, List, Optional, Sequence

from pylog.record import compression as codecs
from pylog.record import BATCH_OVERHEAD, encode_batch


def section(n: int) -> bytes:
    rnd = random.Random(3)
    words = [b"user", b"order", b"id", b"status", b"shipped", b"pending", b"amount", b"eur", b"usd", b"ts"]
    values = [b'{"%s":%d,"%s":"%s","%s":%d}' % (rnd.choice(words), rnd.randrange(10**6), rnd.choice(words),
                                                 rnd.choice(words), rnd.choice(words), rnd.randrange(10**4))
              for _ in range(n)]
    return bytes(encode_batch(values, now_ms=1_700_000_000_000)[BATCH_OVERHEAD:])


def best_us(fn: Callable[[], bytes], rounds: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, (time.perf_counter() - t) / rounds)
    return best * 1e6


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args(argv)
    data = section(args.records)
    import cramjam  # the codecs extra

    rows: List[tuple] = []

    def add(name: str, codec: int, fn: Callable[[], bytes]) -> None:
        out = fn()
        assert codecs.decompress(codec, out) == data, name
        us = best_us(fn, args.rounds)
        rows.append((name, us, len(data) / len(out), len(data) / us))

    add("gzip level 1", codecs.GZIP, lambda: codecs.compress(codecs.GZIP, data, 1))
    add("gzip level 6 (Kafka default, pylog default)", codecs.GZIP, lambda: codecs.compress(codecs.GZIP, data))
    add("gzip level 9", codecs.GZIP, lambda: codecs.compress(codecs.GZIP, data, 9))
    add("lz4 fast = level 9 (Kafka default, pylog default)", codecs.LZ4, lambda: codecs.compress(codecs.LZ4, data))
    add("lz4 cramjam's default level (pylog before)", codecs.LZ4, lambda: bytes(cramjam.lz4.compress(data)))
    add("lz4 HC level 4", codecs.LZ4, lambda: codecs.compress(codecs.LZ4, data, 4))
    add("lz4 HC level 12", codecs.LZ4, lambda: codecs.compress(codecs.LZ4, data, 12))
    add("zstd level 1", codecs.ZSTD, lambda: codecs.compress(codecs.ZSTD, data, 1))
    add("zstd level 3 (Kafka default, pylog default)", codecs.ZSTD, lambda: codecs.compress(codecs.ZSTD, data))
    add("zstd level 9", codecs.ZSTD, lambda: codecs.compress(codecs.ZSTD, data, 9))
    add("snappy (no levels)", codecs.SNAPPY, lambda: codecs.compress(codecs.SNAPPY, data))
    print(f"records section: {len(data):,} bytes ({args.records} records); zlib {zlib.ZLIB_RUNTIME_VERSION}, "
          f"cramjam {getattr(cramjam, '__version__', '?')}")
    print(f"| setting | µs per batch | ratio | MB/s |\n|---|--:|--:|--:|")
    for name, us, ratio, mbs in rows:
        print(f"| {name} | {us:,.0f} | {ratio:.2f} | {mbs:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
