/*
 * batch.c - Kafka RecordBatch v2 encode / validate / decode, and legacy
 * (magic 0 and 1) message decode.
 *
 * RecordBatch v2, big-endian (Kafka DefaultRecordBatch):
 *
 *   off size field
 *     0    8 baseOffset
 *     8    4 batchLength            bytes after this field: total = 12 + batchLength
 *    12    4 partitionLeaderEpoch   outside the CRC
 *    16    1 magic (2)
 *    17    4 crc                    CRC-32C over [21, end)
 *    21    2 attributes             bits 0-2 codec, 3 log-append-time, 4 txn, 5 control
 *    23    4 lastOffsetDelta
 *    27    8 baseTimestamp
 *    35    8 maxTimestamp
 *    43    8 producerId
 *    51    2 producerEpoch
 *    53    4 baseSequence
 *    57    4 recordsCount
 *    61    - records (compressed from here when the codec is not 0)
 *
 * Record v2: length varint (bytes after itself), attributes i8, timestampDelta
 * varlong, offsetDelta varint, keyLength varint (-1 null), key, valueLength
 * varint (-1 null), value, headerCount varint, then per header keyLength varint
 * (>= 0), key, valueLength varint (-1 null), value. Varints are zig-zag then
 * base-128 little-endian groups (protobuf); at most 5 bytes (varint) or 10
 * (varlong).
 *
 * Legacy message (magic 0 / 1), big-endian: offset i64, size i32, crc u32
 * (CRC-32 IEEE over magic..end), magic i8, attributes i8, [timestamp i64, v1],
 * keyLength i32 (-1 null), key, valueLength i32 (-1 null), value.
 *
 * Every reader treats its input as untrusted: positions are uint64_t, every
 * read is preceded by a `need > end - pos` check, and a short buffer yields
 * PLG_ETRUNCATED (torn tail) while an impossible field yields PLG_ECORRUPT /
 * PLG_ECRC / PLG_EMAGIC. Nothing here allocates or keeps a caller's pointer.
 * All functions are thread-safe (they touch only their arguments).
 */
#include "plg.h"

#include <stdlib.h>
#include <string.h>

/* ---- big-endian helpers (callers have checked bounds) ------------------ */
static inline uint16_t be16_unchecked(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32_unchecked(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static inline uint64_t be64_unchecked(const uint8_t *p) {
    return (uint64_t)be32_unchecked(p) << 32 | be32_unchecked(p + 4);
}
static inline void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
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

/* ---- varints ------------------------------------------------------------ */
static inline uint64_t zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t unzigzag64(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

static inline uint32_t varint_size_u(uint64_t u) {
    uint32_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}
static inline uint32_t varint_size(int64_t v) { return varint_size_u(zigzag64(v)); }

static inline uint8_t *put_varint(uint8_t *p, int64_t v) {
    uint64_t u = zigzag64(v);
    while (u >= 0x80) {
        *p++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

/* Reads a zig-zag varint of at most max_bytes (5 or 10) from [*pos, end).
 * Returns PLG_OK, PLG_ETRUNCATED when the bytes run out, or PLG_ECORRUPT when
 * the varint is longer than max_bytes or overflows its width (a 5-byte varint
 * above 32 bits, or a 10th varlong byte above 1, whose bits would fall off
 * the top of 64). */
static int get_varint(const uint8_t *buf, uint64_t end, uint64_t *pos, uint32_t max_bytes,
                      int64_t *out) {
    uint64_t u = 0;
    uint32_t shift = 0;
    for (uint32_t i = 0; i < max_bytes; i++) {
        if (*pos >= end) return PLG_ETRUNCATED;
        uint8_t b = buf[(*pos)++];
        if (shift == 63 && b > 1) return PLG_ECORRUPT;
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (max_bytes == 5 && u > 0xffffffffu) return PLG_ECORRUPT;
            int64_t v = unzigzag64(u);
            if (max_bytes == 5) v = (int32_t)(((uint32_t)u >> 1) ^ -(int32_t)(u & 1));
            *out = v;
            return PLG_OK;
        }
        shift += 7;
    }
    return PLG_ECORRUPT;
}

int plg_varint_decode(const uint8_t *buf, uint64_t len, int64_t *value_out, uint64_t *used_out) {
    if (!buf || !value_out || !used_out) return PLG_EINVAL;
    uint64_t pos = 0;
    int rc = get_varint(buf, len, &pos, 10, value_out);
    if (rc == PLG_OK) *used_out = pos;
    return rc;
}

int plg_varint_encode(int64_t value, uint8_t *out, uint64_t cap, uint64_t *used_out) {
    if (!out || !used_out) return PLG_EINVAL;
    uint32_t n = varint_size(value);
    if (n > cap) return PLG_EOVERFLOW;
    put_varint(out, value);
    *used_out = n;
    return PLG_OK;
}

/* ---- encoding ----------------------------------------------------------- */

/* a - b with Java's long wrap-around (Kafka computes timestampDelta in long
 * arithmetic); signed overflow would be undefined behaviour in C. */
static inline int64_t ts_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }

/* Size of the records section and checks on the columns. Returns PLG_EINVAL
 * for a length below -1 (keys, header values), below 0 (header keys) or a
 * record whose size does not fit Kafka's int32 fields. */
static int records_size(const plg_record_columns_t *c, int64_t base_ts, uint64_t *out) {
    uint64_t total = 0;
    uint64_t h = 0; /* running header index */
    if (!c || c->count == 0 || !c->value_lens) return PLG_EINVAL;
    if (c->header_counts && (!c->header_key_lens || !c->header_value_lens)) return PLG_EINVAL;
    for (uint32_t i = 0; i < c->count; i++) {
        int64_t ts_delta = c->timestamps ? ts_sub(c->timestamps[i], base_ts) : 0;
        int32_t kl = c->key_lens ? c->key_lens[i] : -1;
        int32_t vl = c->value_lens[i];
        int32_t hc = c->header_counts ? c->header_counts[i] : 0;
        if (kl < -1 || vl < -1 || hc < 0) return PLG_EINVAL;
        uint64_t body = 1 + varint_size(ts_delta) + varint_size((int64_t)i) + varint_size(kl) +
                        (kl > 0 ? (uint64_t)kl : 0) + varint_size(vl) + (vl > 0 ? (uint64_t)vl : 0) +
                        varint_size(hc);
        for (int32_t j = 0; j < hc; j++, h++) {
            int32_t hk = c->header_key_lens[h];
            int32_t hv = c->header_value_lens[h];
            if (hk < 0 || hv < -1) return PLG_EINVAL;
            body += varint_size(hk) + (uint64_t)hk + varint_size(hv) + (hv > 0 ? (uint64_t)hv : 0);
        }
        if (body > 0x7fffffffu) return PLG_EINVAL;
        total += varint_size((int64_t)body) + body;
        if (total > 0x7fffffffu) return PLG_EINVAL;
    }
    *out = total;
    return PLG_OK;
}

int plg_batch_size(const plg_record_columns_t *cols, int64_t base_timestamp, uint64_t *size_out) {
    uint64_t rs;
    if (!size_out) return PLG_EINVAL;
    int rc = records_size(cols, base_timestamp, &rs);
    if (rc != PLG_OK) return rc;
    if (rs > 0x7fffffffu - PLG_BATCH_OVERHEAD) return PLG_EINVAL;
    *size_out = PLG_BATCH_OVERHEAD + rs;
    return PLG_OK;
}

/* Sets batchLength and the CRC of one v2 batch occupying exactly buf[0, len).
 * Returns PLG_EINVAL when len is below the header size or above INT32_MAX. */
int plg_batch_seal(uint8_t *batch, uint64_t len) {
    uint32_t crc;
    if (!batch || len < PLG_BATCH_OVERHEAD || len > 0x7fffffffu) return PLG_EINVAL;
    put32(batch + 8, (uint32_t)(len - PLG_LOG_OVERHEAD));
    plg_crc32c(batch + PLG_ATTRIBUTES_OFFSET, len - PLG_ATTRIBUTES_OFFSET, 0, &crc);
    put32(batch + PLG_CRC_OFFSET, crc);
    return PLG_OK;
}

/* Encodes one uncompressed v2 batch of cols->count records into out[0, cap).
 * The caller owns out; *len_out receives the bytes written. Returns PLG_OK,
 * PLG_EINVAL (bad columns), or PLG_EOVERFLOW (cap too small). */
int plg_batch_encode(const plg_batch_header_t *hdr, const plg_record_columns_t *c,
                     uint8_t *out, uint64_t cap, uint64_t *len_out) {
    uint64_t size;
    if (!hdr || !out || !len_out) return PLG_EINVAL;
    int rc = plg_batch_size(c, hdr->base_timestamp, &size);
    if (rc != PLG_OK) return rc;
    if (size > cap) return PLG_EOVERFLOW;

    put64(out, (uint64_t)hdr->base_offset);
    put32(out + 12, (uint32_t)hdr->partition_leader_epoch);
    out[16] = 2;
    put16(out + 21, (uint16_t)hdr->attributes);
    put32(out + 23, c->count - 1);
    put64(out + 27, (uint64_t)hdr->base_timestamp);
    put64(out + 35, (uint64_t)hdr->max_timestamp);
    put64(out + 43, (uint64_t)hdr->producer_id);
    put16(out + 51, (uint16_t)hdr->producer_epoch);
    put32(out + 53, (uint32_t)hdr->base_sequence);
    put32(out + 57, c->count);

    uint8_t *p = out + PLG_BATCH_OVERHEAD;
    const uint8_t *key = c->keys, *val = c->values, *hkey = c->header_keys, *hval = c->header_values;
    uint64_t h = 0;
    for (uint32_t i = 0; i < c->count; i++) {
        int64_t ts_delta = c->timestamps ? ts_sub(c->timestamps[i], hdr->base_timestamp) : 0;
        int32_t kl = c->key_lens ? c->key_lens[i] : -1;
        int32_t vl = c->value_lens[i];
        int32_t hc = c->header_counts ? c->header_counts[i] : 0;
        uint64_t body = 1 + varint_size(ts_delta) + varint_size((int64_t)i) + varint_size(kl) +
                        (kl > 0 ? (uint64_t)kl : 0) + varint_size(vl) + (vl > 0 ? (uint64_t)vl : 0) +
                        varint_size(hc);
        for (int32_t j = 0; j < hc; j++) {
            int32_t hk = c->header_key_lens[h + (uint64_t)j];
            int32_t hv = c->header_value_lens[h + (uint64_t)j];
            body += varint_size(hk) + (uint64_t)hk + varint_size(hv) + (hv > 0 ? (uint64_t)hv : 0);
        }
        p = put_varint(p, (int64_t)body);
        *p++ = 0;
        p = put_varint(p, ts_delta);
        p = put_varint(p, (int64_t)i);
        p = put_varint(p, kl);
        if (kl > 0) {
            memcpy(p, key, (size_t)kl);
            p += kl;
            key += kl;
        }
        p = put_varint(p, vl);
        if (vl > 0) {
            memcpy(p, val, (size_t)vl);
            p += vl;
            val += vl;
        }
        p = put_varint(p, hc);
        for (int32_t j = 0; j < hc; j++, h++) {
            int32_t hk = c->header_key_lens[h];
            int32_t hv = c->header_value_lens[h];
            p = put_varint(p, hk);
            memcpy(p, hkey, (size_t)hk);
            p += hk;
            hkey += hk;
            p = put_varint(p, hv);
            if (hv > 0) {
                memcpy(p, hval, (size_t)hv);
                p += hv;
                hval += hv;
            }
        }
    }
    *len_out = (uint64_t)(p - out);
    if (*len_out != size) return PLG_EINVAL; /* cannot happen: sizes computed above */
    return plg_batch_seal(out, size);
}

/* ---- scanning ----------------------------------------------------------- */

/* Validates the entry at buf[pos, end) and fills *info. Returns PLG_OK,
 * PLG_ETRUNCATED (the entry runs past end), PLG_ECORRUPT, PLG_EMAGIC or
 * PLG_ECRC. With verify_crc == 0 only the framing is checked. */
static int parse_entry(const uint8_t *buf, uint64_t end, uint64_t pos, int verify_crc,
                       plg_batch_info_t *info) {
    uint64_t left = end - pos;
    const uint8_t *p = buf + pos;
    if (left < PLG_MAGIC_OFFSET + 1) return PLG_ETRUNCATED;
    int64_t size = (int32_t)be32_unchecked(p + 8);
    int8_t magic = (int8_t)p[PLG_MAGIC_OFFSET];
    if (magic < 0 || magic > 2) return PLG_EMAGIC;
    int64_t min_size = magic == 2   ? PLG_BATCH_OVERHEAD - PLG_LOG_OVERHEAD
                       : magic == 1 ? PLG_LEGACY_V1_OVERHEAD
                                    : PLG_LEGACY_V0_OVERHEAD;
    if (size < min_size) return PLG_ECORRUPT;
    if ((uint64_t)size > left - PLG_LOG_OVERHEAD) return PLG_ETRUNCATED;
    uint64_t total = (uint64_t)size + PLG_LOG_OVERHEAD;
    int64_t offset = (int64_t)be64_unchecked(p);
    if (offset < 0) return PLG_ECORRUPT;
    uint32_t stored = be32_unchecked(p + (magic == 2 ? PLG_CRC_OFFSET : 12));

    memset(info, 0, sizeof(*info));
    info->position = pos;
    info->size = (uint32_t)total;
    info->magic = magic;
    info->crc = stored;
    if (magic == 2) {
        if (verify_crc) {
            uint32_t crc;
            plg_crc32c(p + PLG_ATTRIBUTES_OFFSET, total - PLG_ATTRIBUTES_OFFSET, 0, &crc);
            if (crc != stored) return PLG_ECRC;
        }
        int32_t last_delta = (int32_t)be32_unchecked(p + 23);
        int32_t count = (int32_t)be32_unchecked(p + 57);
        uint16_t attrs = be16_unchecked(p + 21);
        if (last_delta < 0 || count < 0) return PLG_ECORRUPT;
        if ((uint64_t)offset > (uint64_t)INT64_MAX - (uint64_t)last_delta) return PLG_ECORRUPT;
        if ((attrs & PLG_ATTR_COMPRESSION_MASK) == 0 &&
            (uint64_t)count > (total - PLG_BATCH_OVERHEAD) / 7)
            return PLG_ECORRUPT; /* an uncompressed record is at least 7 bytes */
        info->partition_leader_epoch = (int32_t)be32_unchecked(p + 12);
        info->attributes = (int16_t)attrs;
        info->base_offset = offset;
        info->last_offset = offset + last_delta;
        info->base_timestamp = (int64_t)be64_unchecked(p + 27);
        info->max_timestamp = (int64_t)be64_unchecked(p + 35);
        info->producer_id = (int64_t)be64_unchecked(p + 43);
        info->producer_epoch = (int16_t)be16_unchecked(p + 51);
        info->base_sequence = (int32_t)be32_unchecked(p + 53);
        info->records_count = count;
    } else {
        if (verify_crc) {
            uint32_t crc;
            plg_crc32(p + PLG_MAGIC_OFFSET, total - PLG_MAGIC_OFFSET, 0, &crc);
            if (crc != stored) return PLG_ECRC;
        }
        info->partition_leader_epoch = -1;
        info->attributes = p[17];
        info->base_offset = offset;
        info->last_offset = offset;
        info->base_timestamp = magic == 1 ? (int64_t)be64_unchecked(p + 18) : -1;
        info->max_timestamp = info->base_timestamp;
        info->producer_id = -1;
        info->producer_epoch = -1;
        info->base_sequence = -1;
        info->records_count = 1;
    }
    return PLG_OK;
}

/* Walks consecutive batches in buf[0, len), filling up to max_out infos.
 * Stops with PLG_OK at the end of the buffer or when max_out infos are full;
 * otherwise returns the first entry's error. *n_out is the number of valid
 * entries returned and *valid_bytes_out where the next (or bad) entry starts.
 * Offsets must strictly increase from one entry to the next (PLG_ECORRUPT).
 * The caller owns buf and out; nothing is kept. */
int plg_scan(const uint8_t *buf, uint64_t len, uint32_t flags, plg_batch_info_t *out,
             uint64_t max_out, uint64_t *n_out, uint64_t *valid_bytes_out) {
    if (!n_out || !valid_bytes_out || (!buf && len) || (!out && max_out)) return PLG_EINVAL;
    uint64_t pos = 0, n = 0;
    int64_t prev_last = -1;
    int rc = PLG_OK;
    while (pos < len && n < max_out) {
        rc = parse_entry(buf, len, pos, (flags & PLG_SCAN_VERIFY_CRC) != 0, &out[n]);
        if (rc != PLG_OK) break;
        if (out[n].base_offset <= prev_last && out[n].magic == 2) {
            rc = PLG_ECORRUPT;
            break;
        }
        if (out[n].magic != 2 && out[n].last_offset <= prev_last) {
            rc = PLG_ECORRUPT;
            break;
        }
        prev_last = out[n].last_offset;
        pos += out[n].size;
        n++;
    }
    *n_out = n;
    *valid_bytes_out = pos;
    return rc;
}

/* Returns in *position_out the start of the first batch in buf whose last
 * offset is >= target (framing checked, CRC not), with its last offset in
 * *last_offset_out; when there is none, *position_out is where the walk
 * stopped and *last_offset_out is -1. PLG_OK unless an entry is corrupt. */
int plg_find_batch(const uint8_t *buf, uint64_t len, int64_t target_offset,
                   uint64_t *position_out, int64_t *last_offset_out) {
    if (!position_out || !last_offset_out || (!buf && len)) return PLG_EINVAL;
    uint64_t pos = 0;
    plg_batch_info_t info;
    while (pos < len) {
        int rc = parse_entry(buf, len, pos, 0, &info);
        if (rc == PLG_ETRUNCATED) break;
        if (rc != PLG_OK) {
            *position_out = pos;
            *last_offset_out = -1;
            return rc;
        }
        if (info.last_offset >= target_offset) {
            *position_out = pos;
            *last_offset_out = info.last_offset;
            return PLG_OK;
        }
        pos += info.size;
    }
    *position_out = pos;
    *last_offset_out = -1;
    return PLG_OK;
}

/* ---- decoding records --------------------------------------------------- */

/* Decodes `count` v2 records from the (uncompressed) records section
 * buf[0, len) into the caller's column arrays (each at least `count` long).
 * Every field is bounds-checked; each record must end exactly where its
 * length says and the section must be consumed exactly. Returns PLG_OK or
 * PLG_ECORRUPT (never PLG_ETRUNCATED: the batch framing already fixed the
 * section's length). */
int plg_decode_records(const uint8_t *buf, uint64_t len, uint32_t count,
                       const plg_decoded_records_t *out) {
    if ((!buf && len) || !out || len > 0xffffffffu) return PLG_EINVAL;
    if (count > len / 7) return PLG_ECORRUPT; /* a record is at least 7 bytes */
    uint64_t pos = 0;
    for (uint32_t i = 0; i < count; i++) {
        int64_t rlen, v, tsd;
        if (get_varint(buf, len, &pos, 5, &rlen) != PLG_OK) return PLG_ECORRUPT;
        if (rlen < 1 || (uint64_t)rlen > len - pos) return PLG_ECORRUPT;
        uint64_t rend = pos + (uint64_t)rlen;
        pos++; /* attributes, unused */
        if (get_varint(buf, rend, &pos, 10, &tsd) != PLG_OK) return PLG_ECORRUPT;
        out->timestamp_delta[i] = tsd;
        if (get_varint(buf, rend, &pos, 5, &v) != PLG_OK || v < 0) return PLG_ECORRUPT;
        out->offset_delta[i] = (int32_t)v;
        if (get_varint(buf, rend, &pos, 5, &v) != PLG_OK || v < -1) return PLG_ECORRUPT;
        out->key_len[i] = (int32_t)v;
        out->key_pos[i] = (uint32_t)pos;
        if (v > 0) {
            if ((uint64_t)v > rend - pos) return PLG_ECORRUPT;
            pos += (uint64_t)v;
        }
        if (get_varint(buf, rend, &pos, 5, &v) != PLG_OK || v < -1) return PLG_ECORRUPT;
        out->value_len[i] = (int32_t)v;
        out->value_pos[i] = (uint32_t)pos;
        if (v > 0) {
            if ((uint64_t)v > rend - pos) return PLG_ECORRUPT;
            pos += (uint64_t)v;
        }
        if (get_varint(buf, rend, &pos, 5, &v) != PLG_OK || v < 0) return PLG_ECORRUPT;
        if ((uint64_t)v > (rend - pos) / 2) return PLG_ECORRUPT; /* a header is >= 2 bytes */
        int32_t hc = (int32_t)v;
        uint64_t hstart = pos;
        for (int32_t j = 0; j < hc; j++) {
            int64_t hk, hv;
            if (get_varint(buf, rend, &pos, 5, &hk) != PLG_OK || hk < 0) return PLG_ECORRUPT;
            if ((uint64_t)hk > rend - pos) return PLG_ECORRUPT;
            pos += (uint64_t)hk;
            if (get_varint(buf, rend, &pos, 5, &hv) != PLG_OK || hv < -1) return PLG_ECORRUPT;
            if (hv > 0) {
                if ((uint64_t)hv > rend - pos) return PLG_ECORRUPT;
                pos += (uint64_t)hv;
            }
        }
        out->header_count[i] = hc;
        out->headers_pos[i] = (uint32_t)hstart;
        out->headers_len[i] = (uint32_t)(pos - hstart);
        if (pos != rend) return PLG_ECORRUPT;
    }
    if (pos != len) return PLG_ECORRUPT;
    return PLG_OK;
}

/* Copies `count` spans buf[pos[i], pos[i] + max(lens[i], 0)) back to back into
 * out[0, cap) and writes Arrow-style offsets (count + 1 entries, starting at
 * 0; a null span adds nothing) to offsets_out. Every span is bounds-checked
 * against len. *used_out gets the bytes written. Returns PLG_OK, PLG_ECORRUPT
 * (a span outside buf) or PLG_EOVERFLOW. */
int plg_gather(const uint8_t *buf, uint64_t len, const uint32_t *pos, const int32_t *lens,
               uint32_t count, uint8_t *out, uint64_t cap, int32_t *offsets_out, uint64_t *used_out) {
    if ((!buf && len) || (!out && cap) || !pos || !lens || !offsets_out || !used_out) return PLG_EINVAL;
    uint64_t w = 0;
    offsets_out[0] = 0;
    for (uint32_t i = 0; i < count; i++) {
        int32_t n = lens[i];
        if (n > 0) {
            if (pos[i] > len || (uint64_t)n > len - pos[i]) return PLG_ECORRUPT;
            if ((uint64_t)n > cap - w) return PLG_EOVERFLOW;
            memcpy(out + w, buf + pos[i], (size_t)n);
            w += (uint64_t)n;
            if (w > INT32_MAX) return PLG_EOVERFLOW;
        }
        offsets_out[i + 1] = (int32_t)w;
    }
    *used_out = w;
    return PLG_OK;
}

/* Decodes `count` headers from buf[0, len) (a record's headers_pos/len span,
 * already validated by plg_decode_records; checked again here because the
 * caller may pass any bytes). Positions are relative to buf. */
int plg_decode_headers(const uint8_t *buf, uint64_t len, uint32_t count, plg_header_t *out) {
    if ((!buf && len) || (!out && count) || len > 0xffffffffu) return PLG_EINVAL;
    uint64_t pos = 0;
    for (uint32_t j = 0; j < count; j++) {
        int64_t hk, hv;
        if (get_varint(buf, len, &pos, 5, &hk) != PLG_OK || hk < 0) return PLG_ECORRUPT;
        if ((uint64_t)hk > len - pos) return PLG_ECORRUPT;
        out[j].key_pos = (uint32_t)pos;
        out[j].key_len = (int32_t)hk;
        pos += (uint64_t)hk;
        if (get_varint(buf, len, &pos, 5, &hv) != PLG_OK || hv < -1) return PLG_ECORRUPT;
        out[j].value_pos = (uint32_t)pos;
        out[j].value_len = (int32_t)hv;
        if (hv > 0) {
            if ((uint64_t)hv > len - pos) return PLG_ECORRUPT;
            pos += (uint64_t)hv;
        }
    }
    return pos == len ? PLG_OK : PLG_ECORRUPT;
}

/* Decodes the headers of `count` records at once: record i's headers are the
 * span buf[headers_pos[i], headers_pos[i] + headers_len[i]) holding
 * header_count[i] headers (the columns plg_decode_records produced). Header k
 * (in record order) goes to slot k of the caller's out arrays, which hold
 * `cap` entries; positions are relative to buf. Every span and field is
 * checked again (the columns may come from anywhere). Returns PLG_OK,
 * PLG_ECORRUPT, PLG_EOVERFLOW (more headers than cap) or PLG_EINVAL. */
int plg_decode_header_columns(const uint8_t *buf, uint64_t len, const uint32_t *headers_pos,
                              const uint32_t *headers_len, const int32_t *header_count,
                              uint32_t count, const plg_header_columns_t *out, uint64_t cap) {
    if ((!buf && len) || !out || len > 0xffffffffu) return PLG_EINVAL;
    if (count && (!headers_pos || !headers_len || !header_count)) return PLG_EINVAL;
    uint64_t k = 0;
    for (uint32_t i = 0; i < count; i++) {
        int32_t hc = header_count[i];
        if (hc == 0) continue;
        if (hc < 0 || headers_pos[i] > len || headers_len[i] > len - headers_pos[i])
            return PLG_ECORRUPT;
        if ((uint64_t)hc > cap - k) return PLG_EOVERFLOW;
        uint64_t pos = headers_pos[i], end = pos + headers_len[i];
        for (int32_t j = 0; j < hc; j++, k++) {
            int64_t hk, hv;
            if (get_varint(buf, end, &pos, 5, &hk) != PLG_OK || hk < 0) return PLG_ECORRUPT;
            if ((uint64_t)hk > end - pos) return PLG_ECORRUPT;
            out->key_pos[k] = (uint32_t)pos;
            out->key_len[k] = (int32_t)hk;
            pos += (uint64_t)hk;
            if (get_varint(buf, end, &pos, 5, &hv) != PLG_OK || hv < -1) return PLG_ECORRUPT;
            out->value_pos[k] = (uint32_t)pos;
            out->value_len[k] = (int32_t)hv;
            if (hv > 0) {
                if ((uint64_t)hv > end - pos) return PLG_ECORRUPT;
                pos += (uint64_t)hv;
            }
        }
        if (pos != end) return PLG_ECORRUPT;
    }
    return PLG_OK;
}

/* Decodes the legacy message at buf[0, len) (12-byte log header included;
 * len must be exactly the entry's size as plg_scan reported). Positions are
 * relative to buf. Returns PLG_OK, PLG_ETRUNCATED or PLG_ECORRUPT. */
int plg_decode_legacy(const uint8_t *buf, uint64_t len, plg_legacy_message_t *out) {
    if (!buf || !out) return PLG_EINVAL;
    if (len < PLG_LOG_OVERHEAD + PLG_LEGACY_V0_OVERHEAD) return PLG_ETRUNCATED;
    int8_t magic = (int8_t)buf[16];
    if (magic != 0 && magic != 1) return PLG_EMAGIC;
    int64_t size = (int32_t)be32_unchecked(buf + 8);
    if (size < 0 || (uint64_t)size != len - PLG_LOG_OVERHEAD) return PLG_ECORRUPT;
    uint64_t pos = 18;
    out->offset = (int64_t)be64_unchecked(buf);
    out->magic = magic;
    out->attributes = (int8_t)buf[17];
    out->timestamp = -1;
    if (magic == 1) {
        if (8 > len - pos) return PLG_ECORRUPT;
        out->timestamp = (int64_t)be64_unchecked(buf + pos);
        pos += 8;
    }
    if (4 > len - pos) return PLG_ECORRUPT;
    int32_t kl = (int32_t)be32_unchecked(buf + pos);
    pos += 4;
    if (kl < -1 || (kl > 0 && (uint64_t)kl > len - pos)) return PLG_ECORRUPT;
    out->key_len = kl;
    out->key_pos = (uint32_t)pos;
    if (kl > 0) pos += (uint64_t)kl;
    if (4 > len - pos) return PLG_ECORRUPT;
    int32_t vl = (int32_t)be32_unchecked(buf + pos);
    pos += 4;
    if (vl < -1 || (vl > 0 && (uint64_t)vl > len - pos)) return PLG_ECORRUPT;
    out->value_len = vl;
    out->value_pos = (uint32_t)pos;
    if (vl > 0) pos += (uint64_t)vl;
    return pos == len ? PLG_OK : PLG_ECORRUPT;
}


/* The producer's common case: encodes `count` records with no key, no headers
 * and non-null values (values concatenated, value_lens[i] >= 0), every record
 * at `timestamp`, as one uncompressed v2 batch at base offset 0 with no
 * partition leader epoch. The header fields are scalars, so a caller needs no
 * structs. Same results (bytes and return codes) as plg_batch_encode with those
 * columns, without its per-record branches for timestamps, keys and headers.
 * The caller owns out (cap bytes) and promises values holds the sum of
 * value_lens bytes. Thread-safe. */
int plg_batch_encode_values(const uint8_t *values, const int32_t *value_lens, uint32_t count,
                            int64_t timestamp, int64_t producer_id, int16_t producer_epoch,
                            int32_t base_sequence, int16_t attributes,
                            uint8_t *out, uint64_t cap, uint64_t *len_out) {
    if (!values || !value_lens || count == 0 || !out || !len_out) return PLG_EINVAL;
    /* Pass 1: sizes, with records_size's limits. A record here is: length varint, attributes
     * (0), timestampDelta (0: one byte), offsetDelta varint, keyLength (-1: one byte),
     * valueLength varint, value, headerCount (0: one byte). */
    uint64_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        int32_t vl = value_lens[i];
        if (vl < 0) return PLG_EINVAL;
        uint64_t body = 4 + varint_size((int64_t)i) + varint_size(vl) + (uint64_t)vl;
        if (body > 0x7fffffffu) return PLG_EINVAL;
        total += varint_size((int64_t)body) + body;
        if (total > 0x7fffffffu) return PLG_EINVAL;
    }
    if (total > 0x7fffffffu - PLG_BATCH_OVERHEAD) return PLG_EINVAL;
    uint64_t size = PLG_BATCH_OVERHEAD + total;
    if (size > cap) return PLG_EOVERFLOW;

    put64(out, 0);
    put32(out + 12, (uint32_t)-1);
    out[16] = 2;
    put16(out + 21, (uint16_t)attributes);
    put32(out + 23, count - 1);
    put64(out + 27, (uint64_t)timestamp);
    put64(out + 35, (uint64_t)timestamp);
    put64(out + 43, (uint64_t)producer_id);
    put16(out + 51, (uint16_t)producer_epoch);
    put32(out + 53, (uint32_t)base_sequence);
    put32(out + 57, count);

    /* Pass 2: the records; pass 1 sized exactly these bytes, so size <= cap bounds every write. */
    uint8_t *p = out + PLG_BATCH_OVERHEAD;
    const uint8_t *val = values;
    for (uint32_t i = 0; i < count; i++) {
        int32_t vl = value_lens[i];
        uint64_t body = 4 + varint_size((int64_t)i) + varint_size(vl) + (uint64_t)vl;
        p = put_varint(p, (int64_t)body);
        *p++ = 0; /* attributes */
        *p++ = 0; /* timestampDelta 0 */
        p = put_varint(p, (int64_t)i);
        *p++ = 1; /* keyLength -1 (zig-zag) */
        p = put_varint(p, vl);
        if (vl > 0) {
            memcpy(p, val, (size_t)vl);
            p += vl;
            val += vl;
        }
        *p++ = 0; /* headerCount 0 */
    }
    *len_out = (uint64_t)(p - out);
    if (*len_out != size) return PLG_EINVAL; /* cannot happen: sizes computed above */
    return plg_batch_seal(out, size);
}

/* Checks that buf[0, len) is exactly one v2 batch with a valid CRC and fills
 * *info_out with its header (a follower appending a fetched batch as is).
 * Returns PLG_OK, or the framing error (PLG_ETRUNCATED / PLG_ECORRUPT /
 * PLG_ECRC / PLG_EMAGIC), or PLG_EINVAL when bytes follow the batch. */
int plg_batch_check_one(const uint8_t *buf, uint64_t len, plg_batch_info_t *info_out) {
    plg_batch_info_t info;
    if (!buf || !info_out) return PLG_EINVAL;
    int rc = parse_entry(buf, len, 0, 1, &info);
    if (rc != PLG_OK) return rc;
    if (info.magic != 2) return PLG_EMAGIC;
    if ((uint64_t)info.size != len) return PLG_EINVAL;
    *info_out = info;
    return PLG_OK;
}

/* A leader appending a producer's request: plg_batch_check_one, then stamps
 * base_offset and the partition leader epoch (neither is under the CRC) and
 * fills *info_out with the stamped batch's header. Nothing is written unless
 * every check passes; PLG_EINVAL also when the offsets would pass INT64_MAX. */
int plg_batch_stamp_one(uint8_t *buf, uint64_t len, int64_t base_offset, int32_t partition_leader_epoch,
                        plg_batch_info_t *info_out) {
    plg_batch_info_t info;
    if (!buf || !info_out || base_offset < 0) return PLG_EINVAL;
    int rc = plg_batch_check_one(buf, len, &info);
    if (rc != PLG_OK) return rc;
    int64_t span = info.last_offset - info.base_offset;
    if (span < 0 || span > INT64_MAX - base_offset) return PLG_EINVAL;
    put64(buf, (uint64_t)base_offset);
    put32(buf + 12, (uint32_t)partition_leader_epoch);
    info.base_offset = base_offset;
    info.last_offset = base_offset + span;
    info.partition_leader_epoch = partition_leader_epoch;
    *info_out = info;
    return PLG_OK;
}

/* Re-stamps baseOffset and partitionLeaderEpoch of every v2 batch in
 * buf[0, len) with consecutive offsets starting at base_offset (neither field
 * is covered by the CRC). The framing of every batch is checked first, so on
 * error nothing has been modified. Returns PLG_OK, PLG_ECORRUPT, PLG_EMAGIC
 * (legacy entries cannot be re-stamped) or PLG_ETRUNCATED. */
int plg_batch_set_offsets(uint8_t *buf, uint64_t len, int64_t base_offset,
                          int32_t partition_leader_epoch, uint64_t *n_batches_out,
                          int64_t *next_offset_out) {
    if (!buf || !n_batches_out || !next_offset_out || base_offset < 0) return PLG_EINVAL;
    plg_batch_info_t info;
    uint64_t pos = 0, n = 0;
    int64_t room = INT64_MAX - base_offset; /* offsets left before overflow */
    while (pos < len) { /* validate first */
        int rc = parse_entry(buf, len, pos, 0, &info);
        if (rc != PLG_OK) return rc;
        if (info.magic != 2) return PLG_EMAGIC;
        int64_t span = info.last_offset - info.base_offset + 1;
        if (span > room) return PLG_EINVAL;
        room -= span;
        pos += info.size;
        n++;
    }
    int64_t next = base_offset;
    pos = 0;
    while (pos < len) {
        parse_entry(buf, len, pos, 0, &info); /* cannot fail: validated above */
        put64(buf + pos, (uint64_t)next);
        put32(buf + pos + 12, (uint32_t)partition_leader_epoch);
        next += info.last_offset - info.base_offset + 1;
        pos += info.size;
    }
    *n_batches_out = n;
    *next_offset_out = next;
    return PLG_OK;
}

/* ---- point lookup --------------------------------------------------------- */

/* Finds the record at absolute offset `target` in one segment: the offset
 * index idx[0, idx_len) (8-byte entries relative to base_offset) gives a
 * start position, batch headers are walked from there in log[0, log_len),
 * then the records of the batch holding `target` until its offset delta.
 * Fills *out with absolute positions in `log` (the caller copies what it
 * needs before the buffer goes away). A batch that ends past verified_bytes
 * has its CRC checked first.
 *
 * Returns PLG_OK, PLG_ENOTFOUND (no record with that offset in the segment:
 * beyond its end, or a gap left by compaction), PLG_EUNSUPPORTED (the batch
 * is compressed or legacy: the caller decodes it the general way),
 * PLG_ECRC / PLG_ECORRUPT / PLG_EMAGIC for bad bytes. A torn tail reads as
 * PLG_ENOTFOUND. Thread-safe; keeps no pointer. */
/* The batch of `log` holding offset `target` (a magic-2, uncompressed batch),
 * found from the sparse index's entry at or below it: PLG_OK with its
 * position and header, PLG_ENOTFOUND (not in this segment, or past its
 * valid end), PLG_EUNSUPPORTED (legacy or compressed), or the parse error. */
static int find_batch(const uint8_t *log, uint64_t log_len, const uint8_t *idx, uint64_t idx_len,
                      int64_t base_offset, int64_t target, uint64_t *pos_out, plg_batch_info_t *info) {
    if (target < base_offset || base_offset < 0) return PLG_ENOTFOUND;
    int64_t rel = target - base_offset; /* no overflow: both non-negative here */
    int32_t rel_out = 0, pos_out_idx = 0;
    plg_offset_index_lookup(idx, idx_len, rel > INT32_MAX ? INT32_MAX : (int32_t)rel, &rel_out, &pos_out_idx);
    uint64_t pos = pos_out_idx < 0 ? 0 : (uint64_t)pos_out_idx;
    if (pos > log_len) pos = 0; /* a stale index entry: walk from the start */
    for (;;) {
        if (pos >= log_len) return PLG_ENOTFOUND;
        int rc = parse_entry(log, log_len, pos, 0, info);
        if (rc == PLG_ETRUNCATED) return PLG_ENOTFOUND;
        if (rc != PLG_OK) return rc;
        if (info->last_offset >= target) break;
        pos += info->size;
    }
    if (info->base_offset > target) return PLG_ENOTFOUND;
    if (info->magic != 2 || (info->attributes & PLG_ATTR_COMPRESSION_MASK)) return PLG_EUNSUPPORTED;
    *pos_out = pos;
    return PLG_OK;
}

/* Key, value and headers of the record whose fields start at rb[p] (after
 * its offset delta) and end at rend, as positions in the file (the batch is
 * at `pos`). Every length is checked against rend first: PLG_ECORRUPT. */
static int record_fields(const uint8_t *rb, uint64_t rend, uint64_t p, uint64_t pos, plg_record_ref_t *out) {
    int64_t v;
    if (get_varint(rb, rend, &p, 5, &v) != PLG_OK || v < -1) return PLG_ECORRUPT;
    out->key_len = (int32_t)v;
    out->key_pos = pos + PLG_BATCH_OVERHEAD + p;
    if (v > 0) {
        if ((uint64_t)v > rend - p) return PLG_ECORRUPT;
        p += (uint64_t)v;
    }
    if (get_varint(rb, rend, &p, 5, &v) != PLG_OK || v < -1) return PLG_ECORRUPT;
    out->value_len = (int32_t)v;
    out->value_pos = pos + PLG_BATCH_OVERHEAD + p;
    if (v > 0) {
        if ((uint64_t)v > rend - p) return PLG_ECORRUPT;
        p += (uint64_t)v;
    }
    if (get_varint(rb, rend, &p, 5, &v) != PLG_OK || v < 0) return PLG_ECORRUPT;
    out->header_count = (int32_t)v;
    out->headers_pos = pos + PLG_BATCH_OVERHEAD + p;
    out->headers_len = (uint32_t)(rend - p);
    out->batch_position = pos;
    return PLG_OK;
}

/* The batch-level fields of a found record; its timestamp is the batch's
 * max timestamp under LogAppendTime, else base + delta (wrapping like a Java long). */
static void batch_fields(plg_record_ref_t *out, uint32_t size, int64_t base_offset, int64_t last_offset,
                         int16_t attributes, int64_t max_timestamp, int64_t base_timestamp, int64_t tsd,
                         int64_t target) {
    out->batch_size = size;
    out->base_offset = base_offset;
    out->last_offset = last_offset;
    out->attributes = attributes;
    out->max_timestamp = max_timestamp;
    out->timestamp = (attributes & PLG_ATTR_LOG_APPEND_TIME) ? max_timestamp
                                                             : (int64_t)((uint64_t)base_timestamp + (uint64_t)tsd);
    out->offset = target;
}

/* Walk the record section rb[0..len) of a batch from byte p, at most `count` records, to the
 * record at offset delta `want`: fills `out`'s record fields and *tsd (its timestamp delta).
 * Records with index < skip_below are stepped over by their length alone (a dense batch has
 * record i at delta i). end_is_notfound: reaching the end of the section before `count`
 * records is PLG_ENOTFOUND (a walk from an anchor) instead of PLG_ECORRUPT. Bounds are
 * checked before every read; O(records walked). */
static int walk_to_record(const uint8_t *rb, uint64_t len, uint64_t p, uint32_t count, int64_t want,
                          int64_t skip_below, int end_is_notfound, uint64_t pos, plg_record_ref_t *out,
                          int64_t *tsd) {
    for (uint32_t i = 0; i < count; i++) {
        int64_t rlen, od;
        if (end_is_notfound && p >= len) break;
        if (get_varint(rb, len, &p, 5, &rlen) != PLG_OK) return PLG_ECORRUPT;
        if (rlen < 1 || (uint64_t)rlen > len - p) return PLG_ECORRUPT;
        uint64_t rend = p + (uint64_t)rlen;
        if ((int64_t)i < skip_below) {
            p = rend;
            continue;
        }
        p++; /* attributes */
        if (get_varint(rb, rend, &p, 10, tsd) != PLG_OK) return PLG_ECORRUPT;
        if (get_varint(rb, rend, &p, 5, &od) != PLG_OK || od < 0) return PLG_ECORRUPT;
        if (od > want) return PLG_ENOTFOUND;
        if (od < want) {
            p = rend;
            continue;
        }
        return record_fields(rb, rend, p, pos, out);
    }
    return PLG_ENOTFOUND;
}

int plg_lookup_record(const uint8_t *log, uint64_t log_len, const uint8_t *idx, uint64_t idx_len,
                      int64_t base_offset, int64_t target, uint64_t verified_bytes,
                      plg_record_ref_t *out) {
    if ((!log && log_len) || (!idx && idx_len) || !out) return PLG_EINVAL;
    plg_batch_info_t info;
    uint64_t pos;
    int found = find_batch(log, log_len, idx, idx_len, base_offset, target, &pos, &info);
    if (found != PLG_OK) return found;
    if (pos + info.size > verified_bytes) {
        uint32_t crc;
        plg_crc32c(log + pos + PLG_ATTRIBUTES_OFFSET, info.size - PLG_ATTRIBUTES_OFFSET, 0, &crc);
        if (crc != info.crc) return PLG_ECRC;
    }
    const uint8_t *rb = log + pos + PLG_BATCH_OVERHEAD;
    uint64_t len = info.size - PLG_BATCH_OVERHEAD, p = 0;
    int64_t want = target - info.base_offset;
    /* A dense batch (no compaction gaps) has record i at offset delta i: skip
     * the records before it by their lengths alone. */
    int dense = (int64_t)info.records_count == info.last_offset - info.base_offset + 1;
    uint32_t count = info.records_count < 0 ? 0 : (uint32_t)info.records_count;
    int64_t tsd = 0;
    int rc = walk_to_record(rb, len, p, count, want, dense ? want : 0, 0, pos, out, &tsd);
    if (rc != PLG_OK) return rc;
    batch_fields(out, info.size, info.base_offset, info.last_offset, info.attributes, info.max_timestamp,
                 info.base_timestamp, tsd, target);
    return PLG_OK;
}

/* ---- point lookup with a per-segment cache ------------------------------- */

/* A cached batch: where it is, its header fields, and up to PLG_ANCHORS
 * "anchors" - the position and offset delta of every stride-th record - so a
 * lookup walks at most stride - 1 record headers instead of the records
 * before the target. */
typedef struct {
    uint64_t position;
    uint32_t size;
    uint32_t crc;
    int64_t base_offset;
    int64_t last_offset;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int16_t attributes;
    int32_t records_count;
    uint32_t anchors;
    uint32_t anchor_pos[PLG_ANCHORS]; /* relative to the records section        */
    int32_t anchor_od[PLG_ANCHORS];   /* offset delta of that record            */
} lookup_entry_t;

struct plg_lookup_cache {
    uint32_t nslots;                /* power of two                                */
    lookup_entry_t **slots;         /* direct-mapped by batch position; NULL: empty */
    uint64_t *ranges;               /* verified [start, end) pairs, sorted, disjoint,
                                       not touching                                  */
    uint64_t nranges, cap_ranges;
    plg_lookup_stats_t stats;
};

plg_lookup_cache_t *plg_lookup_cache_new(uint32_t max_batches) {
    uint32_t n = 1;
    if (max_batches < 1) max_batches = 1;
    if (max_batches > (1u << 20)) max_batches = 1u << 20;
    while (n < max_batches) n <<= 1;
    plg_lookup_cache_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->slots = calloc(n, sizeof(*c->slots));
    if (!c->slots) {
        free(c);
        return NULL;
    }
    c->nslots = n;
    return c;
}

void plg_lookup_cache_free(plg_lookup_cache_t *c) {
    if (!c) return;
    for (uint32_t i = 0; i < c->nslots; i++) free(c->slots[i]);
    free(c->slots);
    free(c->ranges);
    free(c);
}

int plg_lookup_cache_forget_from(plg_lookup_cache_t *c, uint64_t position) {
    if (!c) return PLG_EINVAL;
    for (uint32_t i = 0; i < c->nslots; i++) {
        lookup_entry_t *e = c->slots[i];
        if (e && e->position + e->size > position) {
            free(e);
            c->slots[i] = NULL;
        }
    }
    uint64_t n = 0;
    while (n < c->nranges && c->ranges[2 * n] < position) {
        if (c->ranges[2 * n + 1] > position) c->ranges[2 * n + 1] = position;
        n++;
    }
    c->nranges = n;
    c->stats.forgets++;
    return PLG_OK;
}

int plg_lookup_cache_stats(const plg_lookup_cache_t *c, plg_lookup_stats_t *out) {
    if (!c || !out) return PLG_EINVAL;
    *out = c->stats;
    out->verified_ranges = c->nranges;
    return PLG_OK;
}

/* Index of the first range whose end is > position (nranges when none). */
static uint64_t range_after(const plg_lookup_cache_t *c, uint64_t position) {
    uint64_t lo = 0, hi = c->nranges;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (c->ranges[2 * mid + 1] <= position) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int range_verified(const plg_lookup_cache_t *c, uint64_t start, uint64_t end) {
    uint64_t i = range_after(c, start);
    return i < c->nranges && c->ranges[2 * i] <= start && c->ranges[2 * i + 1] >= end;
}

/* Adds [start, end) to the verified set, merging with neighbours it overlaps
 * or touches. Out of memory, or the set at its bound: the set is emptied
 * (batches are then CRC-checked again, which is safe). */
static void range_add(plg_lookup_cache_t *c, uint64_t start, uint64_t end) {
    uint64_t i = range_after(c, start); /* ranges before i end before start (none touch: < start or == start) */
    if (i > 0 && c->ranges[2 * (i - 1) + 1] == start) i--;
    uint64_t j = i;
    while (j < c->nranges && c->ranges[2 * j] <= end) {
        if (c->ranges[2 * j] < start) start = c->ranges[2 * j];
        if (c->ranges[2 * j + 1] > end) end = c->ranges[2 * j + 1];
        j++;
    }
    if (j == i) { /* insert a new range at i */
        if (c->nranges == c->cap_ranges) {
            uint64_t cap = c->cap_ranges ? 2 * c->cap_ranges : 16;
            uint64_t *r = cap <= PLG_MAX_VERIFIED_RANGES ? realloc(c->ranges, cap * 2 * sizeof(uint64_t)) : NULL;
            if (!r) {
                c->nranges = 0;
                c->stats.range_resets++;
                return;
            }
            c->ranges = r;
            c->cap_ranges = cap;
        }
        memmove(c->ranges + 2 * (i + 1), c->ranges + 2 * i, (size_t)(c->nranges - i) * 2 * sizeof(uint64_t));
        c->nranges++;
        j = i + 1;
    } else if (j > i + 1) { /* ranges i..j-1 become one */
        memmove(c->ranges + 2 * (i + 1), c->ranges + 2 * j, (size_t)(c->nranges - j) * 2 * sizeof(uint64_t));
        c->nranges -= j - i - 1;
    }
    c->ranges[2 * i] = start;
    c->ranges[2 * i + 1] = end;
}

static uint32_t slot_of(const plg_lookup_cache_t *c, uint64_t position) {
    uint64_t h = position * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (c->nslots - 1);
}

/* Walks the record headers of a (CRC-checked) plain v2 batch and fills e's
 * anchors. Every length is bounds-checked: a CRC proves only that the bytes
 * are the ones written, not that the writer was honest. */
static int build_entry(const uint8_t *log, const plg_batch_info_t *info, lookup_entry_t *e) {
    const uint8_t *rb = log + info->position + PLG_BATCH_OVERHEAD;
    uint64_t len = info->size - PLG_BATCH_OVERHEAD, p = 0;
    uint32_t count = (uint32_t)info->records_count;
    uint32_t stride = (count + PLG_ANCHORS - 1) / PLG_ANCHORS;
    if (stride == 0) stride = 1;
    e->anchors = 0;
    int64_t prev_od = -1;
    for (uint32_t i = 0; i < count; i++) {
        int64_t rlen, tsd, od;
        uint64_t start = p;
        if (get_varint(rb, len, &p, 5, &rlen) != PLG_OK) return PLG_ECORRUPT;
        if (rlen < 1 || (uint64_t)rlen > len - p) return PLG_ECORRUPT;
        uint64_t rend = p + (uint64_t)rlen;
        p++; /* attributes */
        if (get_varint(rb, rend, &p, 10, &tsd) != PLG_OK) return PLG_ECORRUPT;
        if (get_varint(rb, rend, &p, 5, &od) != PLG_OK || od <= prev_od) return PLG_ECORRUPT;
        if (od > info->last_offset - info->base_offset) return PLG_ECORRUPT;
        prev_od = od;
        if (i % stride == 0 && e->anchors < PLG_ANCHORS) {
            e->anchor_pos[e->anchors] = (uint32_t)start;
            e->anchor_od[e->anchors] = (int32_t)od;
            e->anchors++;
        }
        p = rend;
    }
    e->position = info->position;
    e->size = info->size;
    e->crc = info->crc;
    e->base_offset = info->base_offset;
    e->last_offset = info->last_offset;
    e->base_timestamp = info->base_timestamp;
    e->max_timestamp = info->max_timestamp;
    e->attributes = info->attributes;
    e->records_count = info->records_count;
    return PLG_OK;
}

int plg_lookup_cached(const uint8_t *log, uint64_t log_len, const uint8_t *idx, uint64_t idx_len,
                      int64_t base_offset, int64_t target, uint64_t verified_bytes,
                      plg_lookup_cache_t *cache, plg_record_ref_t *out) {
    if ((!log && log_len) || (!idx && idx_len) || !out || !cache) return PLG_EINVAL;
    plg_batch_info_t info;
    uint64_t pos;
    int found = find_batch(log, log_len, idx, idx_len, base_offset, target, &pos, &info);
    if (found != PLG_OK) return found;
    uint32_t slot = slot_of(cache, pos);
    lookup_entry_t *e = cache->slots[slot];
    if (e && e->position == pos && e->size == info.size && e->crc == info.crc) {
        cache->stats.hits++;
    } else {
        uint64_t end = pos + info.size;
        if (end > verified_bytes && !range_verified(cache, pos, end)) {
            uint32_t crc;
            cache->stats.crc_checks++;
            plg_crc32c(log + pos + PLG_ATTRIBUTES_OFFSET, info.size - PLG_ATTRIBUTES_OFFSET, 0, &crc);
            if (crc != info.crc) return PLG_ECRC;
            range_add(cache, pos, end);
        }
        if (!e) {
            e = malloc(sizeof(*e));
            if (!e) return PLG_EOVERFLOW;
            cache->slots[slot] = e;
        }
        int rc = build_entry(log, &info, e);
        if (rc != PLG_OK) {
            free(e);
            cache->slots[slot] = NULL;
            return rc;
        }
        cache->stats.tables_built++;
    }
    /* the last anchor at or before the target's offset delta */
    int64_t want = target - e->base_offset;
    uint32_t lo = 0, hi = e->anchors;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if ((int64_t)e->anchor_od[mid] <= want) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return PLG_ENOTFOUND;
    const uint8_t *rb = log + pos + PLG_BATCH_OVERHEAD;
    uint64_t len = e->size - PLG_BATCH_OVERHEAD, p = e->anchor_pos[lo - 1];
    if (p >= len) return PLG_ECORRUPT;
    int64_t tsd = 0;
    /* never walk more records than the batch holds */
    int rc = walk_to_record(rb, len, p, e->records_count, want, 0, 1, pos, out, &tsd);
    if (rc != PLG_OK) return rc;
    batch_fields(out, e->size, e->base_offset, e->last_offset, e->attributes, e->max_timestamp,
                 e->base_timestamp, tsd, target);
    return PLG_OK;
}

/* ---- a fetch response as consumer record columns ------------------------ */

/* Appends "<gap>x<len>s" (the gap omitted when 0) to fmt[*at, cap). Returns 0
 * when it does not fit. */
static int fmt_span(char *fmt, uint64_t cap, uint64_t *at, uint64_t gap, uint64_t len) {
    char tmp[48];
    int n = 0;
    char digits[24];
    int d;
    if (gap) {
        d = 0;
        do { digits[d++] = (char)('0' + gap % 10); gap /= 10; } while (gap);
        while (d) tmp[n++] = digits[--d];
        tmp[n++] = 'x';
    }
    d = 0;
    do { digits[d++] = (char)('0' + len % 10); len /= 10; } while (len);
    while (d) tmp[n++] = digits[--d];
    tmp[n++] = 's';
    if ((uint64_t)n > cap - *at) return 0;
    memcpy(fmt + *at, tmp, (size_t)n);
    *at += (uint64_t)n;
    return 1;
}

/* Decodes the records of the plain v2 batch at buf[pos, pos + info->size)
 * into the run's columns from index run->count. Returns 1 when every record
 * was plain and fitted (run->count and both formats advanced), 0 when the
 * batch needs the general decoder or does not fit (nothing advanced; *full
 * says which), PLG_ECORRUPT (negative) for malformed records. */
static int run_take_batch(const uint8_t *buf, uint64_t pos, const plg_batch_info_t *info,
                          int64_t min_offset, plg_fetch_run_t *run, uint64_t *key_end,
                          uint64_t *value_end, int *full) {
    uint64_t rec = pos + PLG_BATCH_OVERHEAD, end = pos + info->size;
    uint32_t n = run->count;
    uint64_t kat = run->key_fmt_len, vat = run->value_fmt_len;
    uint64_t kend = *key_end, vend = *value_end;
    int log_append = (info->attributes & PLG_ATTR_LOG_APPEND_TIME) != 0;
    int first = n == 0;
    *full = 0;
    /* An empty batch (the cleaner keeps them for producer state) holds nothing to take; what
     * follows its header is never read, as Kafka's record iterator never reads it. */
    if (info->records_count == 0) return 1;
    for (int32_t i = 0; i < info->records_count; i++) {
        int64_t rlen, tsd, od, kl, vl, hc;
        if (get_varint(buf, end, &rec, 5, &rlen) != PLG_OK) return PLG_ECORRUPT;
        if (rlen < 1 || (uint64_t)rlen > end - rec) return PLG_ECORRUPT;
        uint64_t rend = rec + (uint64_t)rlen;
        rec++; /* attributes, unused */
        if (get_varint(buf, rend, &rec, 10, &tsd) != PLG_OK) return PLG_ECORRUPT;
        if (get_varint(buf, rend, &rec, 5, &od) != PLG_OK || od < 0) return PLG_ECORRUPT;
        if (get_varint(buf, rend, &rec, 5, &kl) != PLG_OK || kl < -1) return PLG_ECORRUPT;
        uint64_t kpos = rec;
        if (kl > 0) {
            if ((uint64_t)kl > rend - rec) return PLG_ECORRUPT;
            rec += (uint64_t)kl;
        }
        if (get_varint(buf, rend, &rec, 5, &vl) != PLG_OK || vl < -1) return PLG_ECORRUPT;
        uint64_t vpos = rec;
        if (vl > 0) {
            if ((uint64_t)vl > rend - rec) return PLG_ECORRUPT;
            rec += (uint64_t)vl;
        }
        if (get_varint(buf, rend, &rec, 5, &hc) != PLG_OK || hc < 0) return PLG_ECORRUPT;
        if (hc != 0 || vl < 0) return 0; /* headers or a null value: the general decoder */
        if (rec != rend) return PLG_ECORRUPT;
        int64_t offset = info->base_offset + od; /* base_offset >= 0, od < 2^31: no overflow */
        /* A record past the batch's declared last offset (a CRC-valid but inconsistent batch):
         * the run's HW check was made on the last offset, so the general decoder decides. */
        if (offset > info->last_offset) return 0;
        if (offset < min_offset) continue;
        int64_t ts;
        if (log_append) {
            ts = info->max_timestamp;
        } else if (__builtin_add_overflow(info->base_timestamp, tsd, &ts)) {
            return 0; /* beyond int64: the general decoder gives Python's exact integer */
        }
        int key_null = kl < 0;
        if (first) {
            run->keys_null = (int8_t)key_null;
            first = 0;
        } else if (key_null != run->keys_null) {
            return 0; /* null and present keys mixed in one run */
        }
        if (n >= run->cap) { *full = 1; return 0; }
        if (!key_null) {
            if (!fmt_span(run->key_fmt, run->fmt_cap, &kat, kpos - kend, (uint64_t)kl)) { *full = 1; return 0; }
            kend = kpos + (uint64_t)kl;
        }
        if (!fmt_span(run->value_fmt, run->fmt_cap, &vat, vpos - vend, (uint64_t)vl)) { *full = 1; return 0; }
        vend = vpos + (uint64_t)vl;
        run->offsets[n] = offset;
        run->timestamps[n] = ts;
        n++;
    }
    if (rec != end) return PLG_ECORRUPT;
    run->count = n;
    run->key_fmt_len = kat;
    run->value_fmt_len = vat;
    *key_end = kend;
    *value_end = vend;
    return 1;
}

/* Walks the batches at the start of buf[0, len) (framing and CRC checked)
 * and takes, as one run, every record with min_offset <= offset of the
 * leading plain v2 batches whose last offset is below below_offset. Batches
 * entirely below min_offset are skipped (consumed, no records); control
 * batches are consumed too. The run stops before the first batch that is
 * not plain, belongs to another leader epoch or timestamp type, reaches
 * below_offset, or does not fit: run->stop says why. Returns PLG_OK, or
 * PLG_EINVAL for bad arguments; malformed bytes are reported through
 * PLG_RUN_CORRUPT with stop_rc (a run taken before them stays valid), as
 * is a v2 batch whose base offset is not above run->last_offset. */
int plg_decode_fetch_run(const uint8_t *buf, uint64_t len, int64_t min_offset,
                         int64_t below_offset, plg_fetch_run_t *run) {
    if (!run || (!buf && len) || (run->cap && (!run->offsets || !run->timestamps)) ||
        (run->fmt_cap && (!run->key_fmt || !run->value_fmt)))
        return PLG_EINVAL;
    run->count = 0;
    run->consumed = 0;
    run->next_offset = -1;
    run->key_fmt_len = run->value_fmt_len = 0;
    run->leader_epoch = -1;
    run->timestamp_type = 0;
    run->keys_null = 1;
    run->offsets_contiguous = 1;
    run->timestamps_equal = 1;
    run->stop = PLG_RUN_END;
    run->stop_rc = PLG_OK;
    uint64_t pos = 0, key_end = 0, value_end = 0;
    int64_t prev_last = run->last_offset;
    while (pos < len) {
        plg_batch_info_t info;
        int rc = parse_entry(buf, len, pos, 1, &info);
        if (rc == PLG_ETRUNCATED) break;
        if (rc == PLG_OK && info.magic == 2 && info.base_offset <= prev_last) rc = PLG_ECORRUPT;
        if (rc != PLG_OK) {
            run->stop = PLG_RUN_CORRUPT;
            run->stop_rc = rc;
            break;
        }
        if (info.magic != 2 || info.last_offset >= below_offset ||
            (info.attributes & PLG_ATTR_COMPRESSION_MASK) != 0) {
            run->stop = PLG_RUN_SLOW;
            break;
        }
        int skip = info.last_offset < min_offset || (info.attributes & PLG_ATTR_CONTROL) != 0;
        if (!skip) {
            int16_t tst = (info.attributes & PLG_ATTR_LOG_APPEND_TIME) ? 1 : 0;
            if (run->count > 0 && (info.partition_leader_epoch != run->leader_epoch ||
                                   tst != run->timestamp_type)) {
                run->stop = PLG_RUN_SLOW;
                break;
            }
            uint32_t before = run->count;
            int full = 0;
            rc = run_take_batch(buf, pos, &info, min_offset, run, &key_end, &value_end, &full);
            if (rc < 0) {
                run->stop = PLG_RUN_CORRUPT;
                run->stop_rc = rc;
                break;
            }
            if (rc == 0) {
                run->stop = full && before > 0 ? PLG_RUN_FULL : PLG_RUN_SLOW;
                break;
            }
            if (before == 0 && run->count > 0) {
                run->leader_epoch = info.partition_leader_epoch;
                run->timestamp_type = tst;
            }
            if (info.last_offset + 1 > run->next_offset) run->next_offset = info.last_offset + 1;
        } else if (info.magic == 2 && (info.attributes & PLG_ATTR_CONTROL) != 0) {
            if (info.last_offset + 1 > run->next_offset) run->next_offset = info.last_offset + 1;
        }
        prev_last = info.last_offset;
        pos += info.size;
        run->consumed = pos;
    }
    run->last_offset = prev_last;
    for (uint32_t i = 1; i < run->count; i++) {
        if (run->offsets[i] != run->offsets[0] + (int64_t)i) run->offsets_contiguous = 0;
        if (run->timestamps[i] != run->timestamps[0]) run->timestamps_equal = 0;
    }
    return PLG_OK;
}
