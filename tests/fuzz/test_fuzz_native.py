"""The C core's index and point-lookup entry points on hostile bytes.

These run on memory maps of segment and index files in production; here they
get plain buffers (so the sanitizer pass's red zones surround them): random or
mutated indexes, mutated segments - with ``verified_bytes`` claiming the whole
buffer was CRC-checked, the worst case - and arbitrary targets. Every call must
return a status code, and every position it reports must lie inside the buffer.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_corpus as fc
from pylog import _native
from pylog._native import ffi, lib

CORPUS = fc.build_log()
SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(suppress_health_check=SUPPRESS)
@given(st.binary(max_size=400), st.booleans(), st.integers(0, 2**40), st.integers(-(2**31), 2**31 - 1),
       st.integers(-(2**63), 2**63 - 1))
@pytest.mark.timeout(300)
def test_index_functions_on_random_bytes(idx: bytes, is_time: bool, log_size: int, rel: int, ts: int) -> None:
    entries = ffi.new("uint64_t *")
    if lib.plg_index_check(idx, len(idx), int(is_time), log_size, entries) == _native.OK:
        assert entries[0] * (12 if is_time else 8) <= len(idx)
    rel_out, pos_out = ffi.new("int32_t *"), ffi.new("int32_t *")
    n8 = len(idx) - len(idx) % 8
    if lib.plg_offset_index_lookup(idx, n8, rel, rel_out, pos_out) == _native.OK and n8:
        assert any(idx[i : i + 8] == rel_out[0].to_bytes(4, "big", signed=True) + pos_out[0].to_bytes(4, "big", signed=True)
                   for i in range(0, n8, 8)) or (rel_out[0], pos_out[0]) == (0, 0)
    ts_out, trel_out = ffi.new("int64_t *"), ffi.new("int32_t *")
    n12 = len(idx) - len(idx) % 12
    lib.plg_time_index_lookup(idx, n12, ts, ts_out, trel_out)


@settings(suppress_health_check=SUPPRESS)
@given(fc.mutations(st), st.binary(max_size=96), st.integers(-5, 40), st.booleans())
@pytest.mark.timeout(300)
def test_point_lookup_on_damaged_segments(mut, idx: bytes, target: int, trust: bool) -> None:
    ops, do_reseal = mut
    log = fc.apply(CORPUS.log, ops, CORPUS.batches, do_reseal)
    for index in (idx, CORPUS.index, fc.apply(CORPUS.index, ops, [], False)):
        index = index[: len(index) - len(index) % 8]
        out = ffi.new("plg_record_ref_t *")
        rc = lib.plg_lookup_record(log, len(log), index, len(index), 0, target, len(log) if trust else 0, out)
        if rc == _native.OK:
            assert out.batch_position + out.batch_size <= len(log)
            if out.value_len >= 0:
                assert out.value_pos + out.value_len <= len(log)
            if out.key_len >= 0:
                assert out.key_pos + out.key_len <= len(log)
            assert out.headers_pos + out.headers_len <= len(log)
        pos, last = ffi.new("uint64_t *"), ffi.new("int64_t *")
        if lib.plg_find_batch(log, len(log), target, pos, last) == _native.OK:
            assert pos[0] <= len(log) and (last[0] == -1 or last[0] >= target)  # len: not found


@settings(suppress_health_check=SUPPRESS)
@given(st.binary(max_size=24))
def test_varint_decode_on_random_bytes(data: bytes) -> None:
    value, used = ffi.new("int64_t *"), ffi.new("uint64_t *")
    if lib.plg_varint_decode(data, len(data), value, used) == _native.OK:
        assert 1 <= used[0] <= min(len(data), 10)


@settings(suppress_health_check=SUPPRESS)
@given(fc.mutations(st), st.lists(st.integers(-5, 40), min_size=1, max_size=8), st.booleans(), st.integers(1, 8))
@pytest.mark.timeout(300)
def test_cached_point_lookup_on_damaged_segments(mut, targets, trust: bool, slots: int) -> None:
    """plg_lookup_cached over damaged bytes: a cache warmed on the intact segment, then the bytes change
    under it (the case the cache trusts), and a cold cache on the damaged bytes; every returned position
    stays inside the buffer whatever the cache holds."""
    ops, do_reseal = mut
    damaged = fc.apply(CORPUS.log, ops, CORPUS.batches, do_reseal)
    index = CORPUS.index[: len(CORPUS.index) - len(CORPUS.index) % 8]
    warm = ffi.gc(lib.plg_lookup_cache_new(slots), lib.plg_lookup_cache_free)
    cold = ffi.gc(lib.plg_lookup_cache_new(slots), lib.plg_lookup_cache_free)
    out = ffi.new("plg_record_ref_t *")
    for log, cache in ((CORPUS.log, warm), (damaged, warm), (damaged, cold)):
        for target in targets:
            rc = lib.plg_lookup_cached(log, len(log), index, len(index), 0, target, len(log) if trust else 0, cache, out)
            if rc == _native.OK:
                assert out.offset == target
                assert out.batch_position + out.batch_size <= len(log)
                if out.value_len >= 0:
                    assert out.value_pos + out.value_len <= len(log)
                if out.key_len >= 0:
                    assert out.key_pos + out.key_len <= len(log)
                assert out.headers_pos + out.headers_len <= len(log)
            else:
                assert rc in (lib.PLG_ENOTFOUND, lib.PLG_EUNSUPPORTED, _native.ECORRUPT, _native.ECRC, _native.EMAGIC)
    lib.plg_lookup_cache_forget_from(warm, 0)
    st_ = ffi.new("plg_lookup_stats_t *")
    lib.plg_lookup_cache_stats(warm, st_)
    assert st_.verified_ranges == 0
