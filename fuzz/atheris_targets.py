"""atheris (libFuzzer for Python) targets for long opt-in fuzzing runs.

Run through ``./dev fuzz [SECONDS] [TARGET...]`` (see fuzz/run.py and
docs/hardening.md); directly: ``python fuzz/atheris_targets.py TARGET
[libFuzzer flags] CORPUS_DIR``.

Targets (the property is the same as tests/fuzz/: a pylog.errors exception is
fine, any other exception, crash or hang is a finding):

* ``batch``    - the input is a buffer of batches: scan, iter_batches, records,
  value_columns (v2 and legacy, every codec);
* ``recovery`` - the input is a segment file: written as the only ``.log`` of a
  partition with no clean-shutdown marker, opened with ``Log.open`` (recovery),
  read at every offset, appended to and reopened;
* ``snapshot`` - the input is a producer ``.snapshot`` file.
"""
from __future__ import annotations

import os
import shutil
import sys

import logging

import atheris

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fuzz"))

with atheris.instrument_imports(include=["pylog"]):
    import pylog
    from pylog import errors
    from pylog.storage import producer_state
    from pylog.record import RecordBatch, iter_batches, scan

import fuzz_corpus as fc  # noqa: E402  (after the path set-up)

_SCRATCH = fc.scratch_dir()
logging.getLogger("pylog").setLevel(logging.ERROR)  # recovery warns on every damaged input


def _ignore(call):  # type: ignore[no-untyped-def]
    try:
        out = call()
        return list(out) if hasattr(out, "__next__") else out
    except errors.PylogError:
        return None


def target_batch(data: bytes) -> None:
    res = scan(data)
    assert res.valid_bytes <= len(data)
    for info in res.batches:
        batch = RecordBatch(info, memoryview(data)[info.position : info.position + info.size], "fuzz.log")
        _ignore(batch.records)
        _ignore(batch.value_columns)
    _ignore(lambda: [b.records() for b in iter_batches(data, verify_crc=False)])


def target_recovery(data: bytes) -> None:
    d = os.path.join(_SCRATCH, "run")
    shutil.rmtree(d, ignore_errors=True)
    part = os.path.join(d, "fz-0")
    os.makedirs(part)
    with open(os.path.join(part, fc.SEG), "wb") as f:
        f.write(data)
    log = pylog.Log.open(part)
    try:
        for off in range(log.log_start_offset, min(log.log_end_offset, log.log_start_offset + 64) + 1):
            _ignore(lambda: log.read(off, 512))
            _ignore(lambda: log.fetch(off, 128))
        _ignore(lambda: log.offset_for_time(fc.CLOCK))
        end = log.append([b"after"]).last_offset
        assert log.get(end).value == b"after"
    finally:
        log.close()
    with pylog.Log.open(part) as again:
        assert again.get(end).value == b"after"


def target_snapshot(data: bytes) -> None:
    _ignore(lambda: producer_state.decode_snapshot(data, "f.snapshot"))


TARGETS = {"batch": target_batch, "recovery": target_recovery, "snapshot": target_snapshot}


def seeds(target: str) -> list:
    """Valid inputs written by pylog's own writer: the fuzzer starts from these."""
    corpus = fc.build_log()
    if target == "snapshot":
        e = producer_state.ProducerEntry(7, 1)
        e.batches.append(producer_state.BatchMetadata(0, 4, 10, 14, fc.CLOCK))
        return [producer_state.encode_snapshot([e])]
    out = [corpus.log, corpus.log[: corpus.batches[2][0] + 30]]
    out += [fc.legacy_message_set(m, c) for m in (0, 1) for c in range(5)]
    out += [fc.v2_batch([fc.make_record(i) for i in range(5)], 0, c) for c in (None, "gzip", "snappy", "lz4", "zstd")]
    return out


def main() -> None:
    target = sys.argv.pop(1)
    fn = TARGETS[target]
    atheris.Setup(sys.argv, fn)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
