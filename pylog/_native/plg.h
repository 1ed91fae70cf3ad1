/*
 * plg.h - the pylog C core: CRC32C, Kafka RecordBatch v2 encode/decode,
 * legacy (magic 0/1) message-set decode, sparse index bookkeeping and lookup.
 *
 * Conventions (STYLE.md):
 *   - every entry point returns int: PLG_OK (0) or a negative PLG_E* code;
 *     results come back through out-pointers;
 *   - C never does file I/O and never keeps a pointer to a caller's buffer
 *     after returning (cffi releases the GIL during calls);
 *   - every byte handed in is untrusted: positions are uint64_t and bounds are
 *     checked as `n > end - pos`, never `pos + n > end`.
 */
#ifndef PLG_H
#define PLG_H

#include <stddef.h>
#include <stdint.h>

#define PLG_VERSION "0.1.0"

/* ---- status codes ------------------------------------------------------ */
#define PLG_OK 0
#define PLG_ETRUNCATED (-1) /* bytes end inside a header or body: a torn tail   */
#define PLG_ECORRUPT (-2)   /* a length, count or varint is out of range        */
#define PLG_ECRC (-3)       /* checksum mismatch                                */
#define PLG_EMAGIC (-4)     /* magic byte is not 0, 1 or 2                      */
#define PLG_EOVERFLOW (-5)  /* caller's output buffer is too small              */
#define PLG_EINVAL (-6)     /* bad argument (caller bug or bad user input)      */
#define PLG_EORDER (-7)     /* offsets/timestamps out of order (index, append)  */
#define PLG_ENOTFOUND (-8)  /* no record with that offset here                  */
#define PLG_EUNSUPPORTED (-9) /* compressed or legacy batch: decode it in full  */

/* ---- RecordBatch v2 layout (all big-endian) ----------------------------- */
#define PLG_LOG_OVERHEAD 12           /* baseOffset i64 + batchLength i32       */
#define PLG_BATCH_OVERHEAD 61         /* full v2 header                         */
#define PLG_MAGIC_OFFSET 16
#define PLG_CRC_OFFSET 17
#define PLG_ATTRIBUTES_OFFSET 21
#define PLG_LEGACY_V0_OVERHEAD 14     /* crc4 magic1 attr1 keylen4 vallen4      */
#define PLG_LEGACY_V1_OVERHEAD 22     /* v0 + timestamp8                        */

#define PLG_ATTR_COMPRESSION_MASK 0x07
#define PLG_ATTR_LOG_APPEND_TIME 0x08
#define PLG_ATTR_TRANSACTIONAL 0x10
#define PLG_ATTR_CONTROL 0x20
#define PLG_ATTR_DELETE_HORIZON 0x40

/* scan flags */
#define PLG_SCAN_VERIFY_CRC 1u

/* ---- info about one batch (v2) or one legacy message (v0/v1) ----------- */
typedef struct {
    uint64_t position;          /* byte position of the batch in the scanned buffer */
    uint32_t size;              /* total bytes, including the 12-byte log header    */
    int32_t partition_leader_epoch; /* v2 only; -1 for legacy                       */
    int8_t magic;
    int16_t attributes;
    int64_t base_offset;        /* legacy: the message's own offset                 */
    int64_t last_offset;
    int64_t base_timestamp;     /* legacy v1: the message timestamp; v0: -1         */
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t records_count;      /* legacy: 1                                        */
    uint32_t crc;               /* stored checksum                                  */
} plg_batch_info_t;

/* ---- decoded v2 records, column-wise: caller-owned arrays of `count` ---- */
/* Positions are relative to the records buffer; a length of -1 means null.
 * Columns let Python turn each into a list with one ffi.unpack call, and give
 * Arrow its offsets without a per-record loop. */
typedef struct {
    int64_t *timestamp_delta;
    int32_t *offset_delta;
    uint32_t *key_pos;
    int32_t *key_len;
    uint32_t *value_pos;
    int32_t *value_len;
    uint32_t *headers_pos;      /* first header byte                                */
    uint32_t *headers_len;      /* bytes of all the record's headers                */
    int32_t *header_count;
} plg_decoded_records_t;

typedef struct {
    uint32_t key_pos;
    int32_t key_len;
    uint32_t value_pos;
    int32_t value_len;          /* -1: null                                         */
} plg_header_t;

/* ---- headers of many records, column-wise: caller-owned arrays of `cap` -- */
typedef struct {
    uint32_t *key_pos;
    int32_t *key_len;
    uint32_t *value_pos;
    int32_t *value_len;         /* -1: null                                         */
} plg_header_columns_t;

/* ---- one legacy (v0/v1) message, positions relative to the message ---- */
typedef struct {
    int64_t offset;
    int8_t magic;
    int8_t attributes;
    int64_t timestamp;          /* -1 for v0                                        */
    int32_t key_len;
    uint32_t key_pos;
    int32_t value_len;
    uint32_t value_pos;
} plg_legacy_message_t;

/* ---- batch header fields supplied by the encoder's caller -------------- */
typedef struct {
    int64_t base_offset;
    int32_t partition_leader_epoch;
    int16_t attributes;
    int64_t base_timestamp;     /* record timestamps are stored as deltas from this */
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
} plg_batch_header_t;

/* Record columns for one batch: n records, each field a concatenated buffer
 * plus a length array. A NULL *_lens array means "all null" (keys) or
 * "no headers" (header_counts); timestamps NULL means every record has
 * base_timestamp. Header keys/values are concatenated across all records. */
typedef struct {
    uint32_t count;
    const int64_t *timestamps;
    const uint8_t *keys;
    const int32_t *key_lens;
    const uint8_t *values;
    const int32_t *value_lens;
    const int32_t *header_counts;
    const uint8_t *header_keys;
    const int32_t *header_key_lens;
    const uint8_t *header_values;
    const int32_t *header_value_lens;
} plg_record_columns_t;

/* ---- sparse index bookkeeping of one segment (Kafka's LogSegment.append) */
typedef struct {
    int64_t base_offset;
    uint64_t size;                      /* bytes in the .log                        */
    uint64_t bytes_since_last_index_entry;
    uint32_t index_interval_bytes;
    int64_t max_timestamp_so_far;       /* -1 until a batch with a timestamp        */
    int64_t offset_of_max_timestamp;
    int64_t last_index_offset;          /* absolute; base_offset-1 when empty        */
    int64_t last_time_index_timestamp;  /* -1 when empty                             */
    int64_t last_time_index_offset;
} plg_segment_state_t;

/* ---- API ---------------------------------------------------------------- */
const char *plg_version(void);
const char *plg_strerror(int rc);
int plg_crc32c_hardware(void);

int plg_crc32c(const uint8_t *buf, uint64_t len, uint32_t crc_in, uint32_t *crc_out);
int plg_crc32c_table(const uint8_t *buf, uint64_t len, uint32_t crc_in, uint32_t *crc_out);
int plg_crc32(const uint8_t *buf, uint64_t len, uint32_t crc_in, uint32_t *crc_out);

int plg_batch_size(const plg_record_columns_t *cols, int64_t base_timestamp, uint64_t *size_out);
int plg_batch_encode(const plg_batch_header_t *hdr, const plg_record_columns_t *cols,
                     uint8_t *out, uint64_t cap, uint64_t *len_out);
int plg_batch_seal(uint8_t *batch, uint64_t len);
int plg_batch_encode_values(const uint8_t *values, const int32_t *value_lens, uint32_t count,
                            int64_t timestamp, int64_t producer_id, int16_t producer_epoch,
                            int32_t base_sequence, int16_t attributes,
                            uint8_t *out, uint64_t cap, uint64_t *len_out);
int plg_batch_check_one(const uint8_t *buf, uint64_t len, plg_batch_info_t *info_out);
int plg_batch_stamp_one(uint8_t *buf, uint64_t len, int64_t base_offset, int32_t partition_leader_epoch,
                        plg_batch_info_t *info_out);
int plg_batch_set_offsets(uint8_t *buf, uint64_t len, int64_t base_offset,
                          int32_t partition_leader_epoch, uint64_t *n_batches_out,
                          int64_t *next_offset_out);

int plg_scan(const uint8_t *buf, uint64_t len, uint32_t flags, plg_batch_info_t *out,
             uint64_t max_out, uint64_t *n_out, uint64_t *valid_bytes_out);
int plg_find_batch(const uint8_t *buf, uint64_t len, int64_t target_offset,
                   uint64_t *position_out, int64_t *last_offset_out);

int plg_decode_records(const uint8_t *buf, uint64_t len, uint32_t count,
                       const plg_decoded_records_t *out);
int plg_gather(const uint8_t *buf, uint64_t len, const uint32_t *pos, const int32_t *lens,
               uint32_t count, uint8_t *out, uint64_t cap, int32_t *offsets_out, uint64_t *used_out);
int plg_decode_headers(const uint8_t *buf, uint64_t len, uint32_t count, plg_header_t *out);
int plg_decode_header_columns(const uint8_t *buf, uint64_t len, const uint32_t *headers_pos,
                              const uint32_t *headers_len, const int32_t *header_count,
                              uint32_t count, const plg_header_columns_t *out, uint64_t cap);
int plg_decode_legacy(const uint8_t *buf, uint64_t len, plg_legacy_message_t *out);
int plg_varint_decode(const uint8_t *buf, uint64_t len, int64_t *value_out, uint64_t *used_out);
int plg_varint_encode(int64_t value, uint8_t *out, uint64_t cap, uint64_t *used_out);

int plg_segment_after_append(plg_segment_state_t *st, uint64_t append_bytes,
                             int64_t last_offset, int64_t max_timestamp,
                             int64_t offset_of_max_timestamp, uint8_t *index_entry_out,
                             uint8_t *time_entry_out, uint32_t *entries_out);
int plg_index_check(const uint8_t *idx, uint64_t len, int is_time_index, uint64_t log_size,
                    uint64_t *entries_out);
int plg_offset_index_lookup(const uint8_t *idx, uint64_t len, int32_t target_rel,
                            int32_t *rel_out, int32_t *pos_out);
int plg_time_index_lookup(const uint8_t *idx, uint64_t len, int64_t target_ts,
                          int64_t *ts_out, int32_t *rel_out);

/* ---- point lookup of one record (batch.c) -------------------------------- */
typedef struct {
    uint64_t batch_position;    /* absolute positions in the log buffer            */
    uint32_t batch_size;
    int64_t base_offset;
    int64_t last_offset;
    int16_t attributes;
    int64_t max_timestamp;
    int64_t timestamp;          /* the record's timestamp                          */
    int64_t offset;
    uint64_t key_pos;
    int32_t key_len;            /* -1: null                                        */
    uint64_t value_pos;
    int32_t value_len;          /* -1: null                                        */
    uint64_t headers_pos;
    uint32_t headers_len;
    int32_t header_count;
} plg_record_ref_t;

int plg_lookup_record(const uint8_t *log, uint64_t log_len, const uint8_t *idx, uint64_t idx_len,
                      int64_t base_offset, int64_t target, uint64_t verified_bytes,
                      plg_record_ref_t *out);

/* ---- point lookup with a per-segment cache (batch.c) --------------------- */
/* A cache belongs to one segment of one process and is used under that
 * segment's lock (it is mutated by lookups). It remembers, per batch
 * position (direct-mapped, at most max_batches batches), the batch's header
 * and an "anchor" - position and offset delta - for every
 * ceil(records / PLG_ANCHORS)-th record, so a lookup walks at most that many
 * record headers; and the set of byte ranges whose CRC this process checked
 * (merged, at most PLG_MAX_VERIFIED_RANGES), so a batch's CRC is checked
 * once, not once per lookup. A cached batch is trusted: bytes changed in the
 * file behind the process after that are not noticed (every read stays
 * inside the batch's bounds all the same). The owner calls
 * plg_lookup_cache_forget_from before the file shrinks or is rewritten. */
#define PLG_ANCHORS 64
#define PLG_MAX_VERIFIED_RANGES 1048576

typedef struct plg_lookup_cache plg_lookup_cache_t;

typedef struct {
    uint64_t hits;              /* lookups served from a cached batch               */
    uint64_t tables_built;      /* batches whose anchors were (re)built             */
    uint64_t crc_checks;        /* batch CRCs computed                              */
    uint64_t forgets;           /* plg_lookup_cache_forget_from calls               */
    uint64_t range_resets;      /* the verified set was emptied (memory, bound)     */
    uint64_t verified_ranges;   /* disjoint verified ranges now held                */
} plg_lookup_stats_t;

plg_lookup_cache_t *plg_lookup_cache_new(uint32_t max_batches);
void plg_lookup_cache_free(plg_lookup_cache_t *cache);
int plg_lookup_cache_forget_from(plg_lookup_cache_t *cache, uint64_t position);
int plg_lookup_cache_stats(const plg_lookup_cache_t *cache, plg_lookup_stats_t *out);
/* As plg_lookup_record, through the cache; PLG_EOVERFLOW when memory runs out. */
int plg_lookup_cached(const uint8_t *log, uint64_t log_len, const uint8_t *idx, uint64_t idx_len,
                      int64_t base_offset, int64_t target, uint64_t verified_bytes,
                      plg_lookup_cache_t *cache, plg_record_ref_t *out);

/* ---- a fetch response as consumer record columns (batch.c) ------------- */
/* One "run": consecutive plain v2 batches (uncompressed, not control, no
 * headers, no null value, keys all null or all present, one leader epoch and
 * one timestamp type) whose records become columns in one call. The caller
 * fills the array/format pointers and capacities; the rest is output.
 * Formats are Python `struct` formats over the fetched buffer ("8x100s9x...")
 * that unpack every key / value of the run as bytes in one call. */
typedef struct {
    int64_t *offsets;           /* in: cap entries                                  */
    int64_t *timestamps;        /* in: cap entries                                  */
    char *key_fmt;              /* in: fmt_cap bytes                                */
    char *value_fmt;            /* in: fmt_cap bytes                                */
    uint32_t cap;
    uint64_t fmt_cap;
    int64_t last_offset;        /* in: last offset of the batch before buf (-1:
                                   none), so offsets keep increasing across calls;
                                   out: that of the last batch taken              */
    uint32_t count;             /* records emitted                                  */
    uint64_t consumed;          /* bytes of the batches taken (skipped ones too)    */
    int64_t next_offset;        /* 1 + last offset of the batches taken, or -1      */
    uint64_t key_fmt_len;
    uint64_t value_fmt_len;
    int32_t leader_epoch;
    int16_t timestamp_type;     /* 0 CreateTime, 1 LogAppendTime                    */
    int8_t keys_null;           /* every key of the run is null                     */
    int8_t offsets_contiguous;  /* offsets[i] == offsets[0] + i                     */
    int8_t timestamps_equal;    /* every timestamp equals timestamps[0]             */
    int8_t stop;                /* PLG_RUN_*                                        */
    int32_t stop_rc;            /* PLG_RUN_CORRUPT: the status of the bad entry     */
} plg_fetch_run_t;

#define PLG_RUN_END 0      /* end of the buffer, or a torn tail                     */
#define PLG_RUN_SLOW 1     /* the next batch needs the general decoder              */
#define PLG_RUN_CORRUPT 2  /* the next entry is invalid (stop_rc says how)          */
#define PLG_RUN_FULL 3     /* cap or fmt_cap reached: call again after `consumed`   */

int plg_decode_fetch_run(const uint8_t *buf, uint64_t len, int64_t min_offset,
                         int64_t below_offset, plg_fetch_run_t *run);

/* ---- arrow.c: v2 records straight into Arrow column buffers (the Spark source) ---- */
/* Caller-owned buffers for rows [0, cap_rows): offset, timestamp (microseconds) and
 * timestamp_type columns; value and key binary columns as Arrow lays them out
 * (offsets: cap_rows + 1 entries; validity: one bit per row; data: `cap` bytes).
 * header_count may be NULL. The counters are the progress so far (start at 0);
 * a call advances them only for batches it decoded whole. */
typedef struct {
    int64_t *offset;
    int64_t *timestamp;
    int32_t *timestamp_type;
    int32_t *value_offsets;
    uint8_t *value_validity;
    uint8_t *value_data;
    int32_t *key_offsets;
    uint8_t *key_validity;
    uint8_t *key_data;
    int32_t *header_count;
    uint64_t cap_rows;
    uint64_t value_cap;
    uint64_t key_cap;
    uint64_t rows;
    uint64_t value_used;
    uint64_t key_used;
    uint64_t value_nulls;
    uint64_t key_nulls;
    uint64_t header_rows;       /* rows with at least one header                    */
} plg_arrow_columns_t;

/* One uncompressed records section of `count` records. */
int plg_arrow_records(const uint8_t *buf, uint64_t len, uint32_t count, int64_t base_offset,
                      int64_t base_timestamp, int64_t max_timestamp, int16_t attributes,
                      plg_arrow_columns_t *out);
/* Consecutive v2 batches of buf[0, len) (framed and CRC-checked by plg_scan):
 * uncompressed data batches are decoded, control batches skipped; stops at
 * the first batch it does not take (compressed, legacy, not whole) with
 * PLG_OK. *consumed_out: bytes of the batches taken. */
int plg_arrow_batches(const uint8_t *buf, uint64_t len, plg_arrow_columns_t *out, uint64_t *consumed_out);

#endif /* PLG_H */
