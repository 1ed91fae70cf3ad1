/* pylog C core: v2 record batches straight into Arrow column buffers.
 *
 * The Spark source (pylog/spark/reader.py) turns chunks of a segment into
 * Arrow record batches with the columns of Spark's Kafka schema. These
 * functions write the per-record columns - offset, timestamp (microseconds),
 * timestamp type, and the value and key binary columns (Arrow offsets,
 * validity bitmap and the bytes back to back) - into caller-owned buffers in
 * one pass over the records, for every batch of a chunk in one call.
 *
 * Batches are CRC-checked by plg_scan before they get here; everything is
 * still bounds-checked (any bytes may be passed) and nothing is written past
 * the caps given. Rows are appended at out->rows; the counters in `out` are
 * only advanced for a batch decoded whole, so after an error the columns
 * hold exactly the rows of the batches before it.
 *
 * Thread-safety: re-entrant; no global state.
 */
#include <stdint.h>
#include <string.h>

#include "plg.h"

static int64_t rd_be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t rd_be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* A zigzag varint of at most max_bytes (5: int32, 10: int64) at buf[*pos, end). */
static int varint(const uint8_t *buf, uint64_t end, uint64_t *pos, uint32_t max_bytes, int64_t *out) {
    uint64_t u = 0;
    uint32_t shift = 0;
    for (uint32_t i = 0; i < max_bytes; i++) {
        if (*pos >= end) return PLG_ECORRUPT;
        uint8_t b = buf[(*pos)++];
        if (shift == 63 && b > 1) return PLG_ECORRUPT;
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (max_bytes == 5) {
                if (u > 0xffffffffu) return PLG_ECORRUPT;
                *out = (int32_t)(((uint32_t)u >> 1) ^ -(int32_t)(u & 1));
            } else {
                *out = (int64_t)((u >> 1) ^ -(u & 1));
            }
            return PLG_OK;
        }
        shift += 7;
    }
    return PLG_ECORRUPT;
}

static void set_bit(uint8_t *bitmap, uint64_t row, int valid) {
    if (!(row & 7)) bitmap[row >> 3] = 0; /* rows are written in order: start each byte clean */
    if (valid) bitmap[row >> 3] |= (uint8_t)(1u << (row & 7));
}

/* Appends the binary value buf[pos, pos + n) (n == -1: null) at `row`. */
static int put_binary(const uint8_t *buf, uint64_t pos, int64_t n, uint64_t row, int32_t *offsets,
                      uint8_t *validity, uint8_t *data, uint64_t cap, uint64_t *used, uint64_t *nulls) {
    set_bit(validity, row, n >= 0);
    if (n > 0) {
        if ((uint64_t)n > cap - *used || *used + (uint64_t)n > INT32_MAX) return PLG_EOVERFLOW;
        memcpy(data + *used, buf + pos, (size_t)n);
        *used += (uint64_t)n;
    } else if (n < 0) {
        (*nulls)++;
    }
    offsets[row + 1] = (int32_t)*used;
    return PLG_OK;
}

int plg_arrow_records(const uint8_t *buf, uint64_t len, uint32_t count, int64_t base_offset,
                      int64_t base_timestamp, int64_t max_timestamp, int16_t attributes,
                      plg_arrow_columns_t *out) {
    if ((!buf && len) || !out || !out->offset || !out->timestamp || !out->timestamp_type ||
        !out->value_offsets || !out->value_validity || (!out->value_data && out->value_cap) ||
        !out->key_offsets || !out->key_validity || (!out->key_data && out->key_cap))
        return PLG_EINVAL;
    if (count > len / 7) return PLG_ECORRUPT; /* a record is at least 7 bytes */
    if (count > out->cap_rows - out->rows) return PLG_EOVERFLOW;
    /* Work on copies of the counters: they are stored only when the batch decodes whole. */
    uint64_t row = out->rows, vused = out->value_used, kused = out->key_used;
    uint64_t vnulls = out->value_nulls, knulls = out->key_nulls, hrows = out->header_rows;
    if (row == 0) out->value_offsets[0] = out->key_offsets[0] = 0;
    else if (out->value_offsets[row] != (int32_t)vused || out->key_offsets[row] != (int32_t)kused)
        return PLG_EINVAL; /* counters and offsets disagree: a caller bug */
    int log_append = (attributes & PLG_ATTR_LOG_APPEND_TIME) != 0;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < count; i++, row++) {
        int64_t rlen, v, tsd;
        if (varint(buf, len, &pos, 5, &rlen) != PLG_OK) return PLG_ECORRUPT;
        if (rlen < 1 || (uint64_t)rlen > len - pos) return PLG_ECORRUPT;
        uint64_t rend = pos + (uint64_t)rlen;
        pos++; /* attributes, unused */
        if (varint(buf, rend, &pos, 10, &tsd) != PLG_OK) return PLG_ECORRUPT;
        if (varint(buf, rend, &pos, 5, &v) != PLG_OK || v < 0) return PLG_ECORRUPT;
        /* unsigned arithmetic: wraps as Arrow's unchecked kernels do, never undefined */
        out->offset[row] = (int64_t)((uint64_t)base_offset + (uint64_t)v);
        uint64_t ts_ms = log_append ? (uint64_t)max_timestamp : (uint64_t)base_timestamp + (uint64_t)tsd;
        out->timestamp[row] = (int64_t)(ts_ms * 1000u);
        out->timestamp_type[row] = log_append ? 1 : 0;
        if (varint(buf, rend, &pos, 5, &v) != PLG_OK || v < -1) return PLG_ECORRUPT;
        if (v > 0 && (uint64_t)v > rend - pos) return PLG_ECORRUPT;
        int rc = put_binary(buf, pos, v, row, out->key_offsets, out->key_validity, out->key_data, out->key_cap,
                            &kused, &knulls);
        if (rc != PLG_OK) return rc;
        if (v > 0) pos += (uint64_t)v;
        if (varint(buf, rend, &pos, 5, &v) != PLG_OK || v < -1) return PLG_ECORRUPT;
        if (v > 0 && (uint64_t)v > rend - pos) return PLG_ECORRUPT;
        rc = put_binary(buf, pos, v, row, out->value_offsets, out->value_validity, out->value_data, out->value_cap,
                        &vused, &vnulls);
        if (rc != PLG_OK) return rc;
        if (v > 0) pos += (uint64_t)v;
        if (varint(buf, rend, &pos, 5, &v) != PLG_OK || v < 0) return PLG_ECORRUPT;
        if ((uint64_t)v > (rend - pos) / 2) return PLG_ECORRUPT; /* a header is >= 2 bytes */
        int32_t hc = (int32_t)v;
        for (int32_t j = 0; j < hc; j++) {
            int64_t hk, hv;
            if (varint(buf, rend, &pos, 5, &hk) != PLG_OK || hk < 0) return PLG_ECORRUPT;
            if ((uint64_t)hk > rend - pos) return PLG_ECORRUPT;
            pos += (uint64_t)hk;
            if (varint(buf, rend, &pos, 5, &hv) != PLG_OK || hv < -1) return PLG_ECORRUPT;
            if (hv > 0) {
                if ((uint64_t)hv > rend - pos) return PLG_ECORRUPT;
                pos += (uint64_t)hv;
            }
        }
        if (hc) hrows++;
        if (out->header_count) out->header_count[row] = hc;
        if (pos != rend) return PLG_ECORRUPT;
    }
    if (pos != len) return PLG_ECORRUPT;
    out->rows = row;
    out->value_used = vused;
    out->key_used = kused;
    out->value_nulls = vnulls;
    out->key_nulls = knulls;
    out->header_rows = hrows;
    return PLG_OK;
}

int plg_arrow_batches(const uint8_t *buf, uint64_t len, plg_arrow_columns_t *out, uint64_t *consumed_out) {
    if ((!buf && len) || !out || !consumed_out) return PLG_EINVAL;
    uint64_t pos = 0;
    *consumed_out = 0;
    while (len - pos >= PLG_LOG_OVERHEAD) {
        const uint8_t *b = buf + pos;
        int32_t blen = rd_be32(b + 8);
        if (blen < PLG_BATCH_OVERHEAD - PLG_LOG_OVERHEAD || (uint64_t)blen > len - pos - PLG_LOG_OVERHEAD)
            return PLG_OK; /* not a whole v2 batch: the caller decides (plg_scan framed it) */
        uint64_t size = PLG_LOG_OVERHEAD + (uint64_t)blen;
        int16_t attributes = (int16_t)(((uint16_t)b[PLG_ATTRIBUTES_OFFSET] << 8) | b[PLG_ATTRIBUTES_OFFSET + 1]);
        if (b[PLG_MAGIC_OFFSET] != 2 || (attributes & PLG_ATTR_COMPRESSION_MASK)) return PLG_OK;
        if (!(attributes & PLG_ATTR_CONTROL)) {
            int32_t count = rd_be32(b + 57);
            if (count < 0) return PLG_ECORRUPT;
            int rc = plg_arrow_records(b + PLG_BATCH_OVERHEAD, size - PLG_BATCH_OVERHEAD, (uint32_t)count,
                                       rd_be64(b), rd_be64(b + 27), rd_be64(b + 35), attributes, out);
            if (rc != PLG_OK) return rc;
        }
        pos += size;
        *consumed_out = pos;
    }
    return PLG_OK;
}
