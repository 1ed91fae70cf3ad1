/*
 * index.c - Kafka's sparse segment indexes: when to add an entry on append,
 * validation of index files read back from disk, and lookups.
 *
 * .index entry, 8 bytes big-endian:  relativeOffset i32 | position i32
 * .timeindex entry, 12 bytes:        timestamp i64 | relativeOffset i32
 *
 * relativeOffset = offset - segment base offset. An offset entry maps the
 * *last* offset of an append to the byte position where that append *starts*.
 * A time entry (T, O) says "the largest timestamp seen before O is T".
 *
 * Append rule (Kafka LogSegment.append): after writing N bytes, the max
 * timestamp so far is updated; then, if strictly more than
 * index_interval_bytes were written since the last entry, an offset entry and
 * (if its timestamp grew) a time entry are added and the counter resets; the
 * counter then grows by N. So the first append of a segment never indexes.
 *
 * Lookup: binary search for the largest entry <= target, searching the "warm"
 * tail (the last 8192 bytes of entries) first when the target is there, as
 * Kafka's AbstractIndex does so that in-sync lookups touch few pages.
 *
 * The index bytes are untrusted: plg_index_check validates a whole file
 * (length a multiple of the entry size, offsets strictly increasing and
 * within the segment, positions increasing and inside the log, timestamps
 * non-decreasing). Lookups only read whole entries inside [0, len).
 * Thread-safety: pure functions over caller-owned memory; the caller
 * serialises mutation of a plg_segment_state_t.
 */
#include "plg.h"

#define OFFSET_ENTRY 8u
#define TIME_ENTRY 12u
#define WARM_BYTES 8192u

static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static inline int64_t be64s(const uint8_t *p) {
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}
static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static inline void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* Updates st for an append of append_bytes ending at last_offset whose
 * largest timestamp is max_timestamp (at offset offset_of_max_timestamp).
 * Writes the 8-byte offset entry to index_entry_out (bit 0 of *entries_out)
 * and the 12-byte time entry to time_entry_out (bit 1) when Kafka's rule
 * adds them; the caller appends those bytes to the index files. Returns
 * PLG_OK, PLG_EORDER (offset not above the last indexed / outside int32 of
 * the base, or the segment past int32 positions) or PLG_EINVAL. On error
 * neither *st nor the entry buffers are modified. */
int plg_segment_after_append(plg_segment_state_t *st, uint64_t append_bytes,
                             int64_t last_offset, int64_t max_timestamp,
                             int64_t offset_of_max_timestamp, uint8_t *index_entry_out,
                             uint8_t *time_entry_out, uint32_t *entries_out) {
    if (!st || !index_entry_out || !time_entry_out || !entries_out) return PLG_EINVAL;
    *entries_out = 0;
    /* rel is computed without signed overflow: last_offset may be anything. */
    if (last_offset < st->base_offset) return PLG_EORDER;
    uint64_t rel = (uint64_t)last_offset - (uint64_t)st->base_offset;
    if (rel > INT32_MAX || st->size > INT32_MAX) return PLG_EORDER;

    /* Kafka LogSegment.append: the max timestamp is updated first ... */
    int64_t max_ts = st->max_timestamp_so_far, max_ts_offset = st->offset_of_max_timestamp;
    if (max_timestamp > max_ts) {
        max_ts = max_timestamp;
        max_ts_offset = offset_of_max_timestamp;
    }
    /* ... then, if strictly more than the interval was written since the last
     * entry, the last offset of this append maps to where this append starts. */
    int add_offset = st->bytes_since_last_index_entry > st->index_interval_bytes;
    int add_time = 0;
    uint64_t time_rel = 0;
    if (add_offset) {
        if (last_offset <= st->last_index_offset) return PLG_EORDER;
        /* TimeIndex.maybeAppend: only when the timestamp grew. */
        if (max_ts > st->last_time_index_timestamp) {
            if (max_ts_offset < st->last_time_index_offset || max_ts_offset < st->base_offset)
                return PLG_EORDER;
            time_rel = (uint64_t)max_ts_offset - (uint64_t)st->base_offset;
            if (time_rel > INT32_MAX) return PLG_EORDER;
            add_time = 1;
        }
    }

    /* validated: commit */
    st->max_timestamp_so_far = max_ts;
    st->offset_of_max_timestamp = max_ts_offset;
    if (add_offset) {
        put32(index_entry_out, (uint32_t)rel);
        put32(index_entry_out + 4, (uint32_t)st->size);
        st->last_index_offset = last_offset;
        *entries_out |= 1u;
        if (add_time) {
            put64(time_entry_out, (uint64_t)max_ts);
            put32(time_entry_out + 8, (uint32_t)time_rel);
            st->last_time_index_timestamp = max_ts;
            st->last_time_index_offset = max_ts_offset;
            *entries_out |= 2u;
        }
        st->bytes_since_last_index_entry = 0;
    }
    st->bytes_since_last_index_entry += append_bytes;
    st->size += append_bytes;
    return PLG_OK;
}

/* Validates an index file's bytes. is_time_index selects the entry layout;
 * log_size bounds positions. *entries_out gets the entry count. Returns
 * PLG_OK or PLG_ECORRUPT. */
int plg_index_check(const uint8_t *idx, uint64_t len, int is_time_index, uint64_t log_size,
                    uint64_t *entries_out) {
    if ((!idx && len) || !entries_out) return PLG_EINVAL;
    uint64_t es = is_time_index ? TIME_ENTRY : OFFSET_ENTRY;
    if (len % es) return PLG_ECORRUPT;
    uint64_t n = len / es;
    int64_t prev_rel = -1, prev_pos = -1, prev_ts = INT64_MIN;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *e = idx + i * es;
        if (is_time_index) {
            int64_t ts = be64s(e);
            int64_t rel = (int32_t)be32(e + 8);
            if (rel < 0 || rel < prev_rel || ts < prev_ts) return PLG_ECORRUPT;
            prev_rel = rel;
            prev_ts = ts;
        } else {
            int64_t rel = (int32_t)be32(e);
            int64_t pos = (int32_t)be32(e + 4);
            if (rel < 0 || rel <= prev_rel || pos < 0 || pos <= prev_pos ||
                (uint64_t)pos >= log_size)
                return PLG_ECORRUPT;
            prev_rel = rel;
            prev_pos = pos;
        }
    }
    *entries_out = n;
    return PLG_OK;
}

/* Largest slot in [lo, hi] whose key <= target, or -1 (Kafka binarySearch). */
static int64_t search(const uint8_t *idx, uint64_t es, int64_t lo, int64_t hi, int64_t target,
                      int is_time) {
    if (lo > hi) return -1;
#define KEY(i) (is_time ? be64s(idx + (uint64_t)(i) * es) : (int64_t)(int32_t)be32(idx + (uint64_t)(i) * es))
    if (KEY(lo) > target) return -1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        int64_t k = KEY(mid);
        if (k > target)
            hi = mid - 1;
        else if (k < target)
            lo = mid;
        else
            return mid;
    }
    return lo;
#undef KEY
}

static int64_t lookup_slot(const uint8_t *idx, uint64_t len, uint64_t es, int64_t target,
                           int is_time) {
    int64_t n = (int64_t)(len / es);
    if (n == 0) return -1;
    int64_t warm = (int64_t)(WARM_BYTES / es);
    int64_t first_hot = n - 1 - warm > 0 ? n - 1 - warm : 0;
    int64_t hot_key = is_time ? be64s(idx + (uint64_t)first_hot * es)
                              : (int64_t)(int32_t)be32(idx + (uint64_t)first_hot * es);
    if (hot_key < target) return search(idx, es, first_hot, n - 1, target, is_time);
    return search(idx, es, 0, first_hot, target, is_time);
}

/* Largest offset entry with relativeOffset <= target_rel; (0, 0) — the
 * segment start — when there is none. Only whole entries are read. */
int plg_offset_index_lookup(const uint8_t *idx, uint64_t len, int32_t target_rel,
                            int32_t *rel_out, int32_t *pos_out) {
    if ((!idx && len) || !rel_out || !pos_out) return PLG_EINVAL;
    int64_t slot = lookup_slot(idx, len, OFFSET_ENTRY, target_rel, 0);
    if (slot < 0) {
        *rel_out = 0;
        *pos_out = 0;
    } else {
        *rel_out = (int32_t)be32(idx + (uint64_t)slot * OFFSET_ENTRY);
        *pos_out = (int32_t)be32(idx + (uint64_t)slot * OFFSET_ENTRY + 4);
    }
    return PLG_OK;
}

/* Largest time entry with timestamp <= target_ts; (-1, 0) when none. */
int plg_time_index_lookup(const uint8_t *idx, uint64_t len, int64_t target_ts, int64_t *ts_out,
                          int32_t *rel_out) {
    if ((!idx && len) || !ts_out || !rel_out) return PLG_EINVAL;
    int64_t slot = lookup_slot(idx, len, TIME_ENTRY, target_ts, 1);
    if (slot < 0) {
        *ts_out = -1;
        *rel_out = 0;
    } else {
        *ts_out = be64s(idx + (uint64_t)slot * TIME_ENTRY);
        *rel_out = (int32_t)be32(idx + (uint64_t)slot * TIME_ENTRY + 8);
    }
    return PLG_OK;
}

/* ---- version / errors --------------------------------------------------- */
const char *plg_version(void) { return PLG_VERSION; }

const char *plg_strerror(int rc) {
    switch (rc) {
    case PLG_OK: return "ok";
    case PLG_ETRUNCATED: return "truncated data (torn write at the end)";
    case PLG_ECORRUPT: return "corrupt data (a length, count or offset is out of range)";
    case PLG_ECRC: return "checksum mismatch";
    case PLG_EMAGIC: return "unsupported magic byte";
    case PLG_EOVERFLOW: return "output buffer too small";
    case PLG_EINVAL: return "invalid argument";
    case PLG_EORDER: return "offsets or timestamps out of order";
    case PLG_ENOTFOUND: return "no record with that offset";
    case PLG_EUNSUPPORTED: return "compressed or legacy batch";
    default: return "unknown error";
    }
}
