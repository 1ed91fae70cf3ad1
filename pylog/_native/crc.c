/*
 * crc.c - CRC-32C (Castagnoli) for RecordBatch v2 and CRC-32 (IEEE) for legacy
 * message sets.
 *
 * CRC-32C: reflected polynomial 0x82F63B78, init 0xFFFFFFFF, xorout 0xFFFFFFFF
 * (check value of "123456789" is 0xE3069283). Kafka computes it over the bytes
 * [21, end) of a batch: attributes to the end of the last record.
 * CRC-32: reflected polynomial 0xEDB88320 (zlib / java.util.zip.CRC32), over
 * magic..end of value of a legacy message.
 *
 * The hardware path uses the SSE4.2 crc32 instruction on x86-64 and the ARMv8
 * CRC extension on aarch64, chosen at run time. Large buffers are split into
 * three interleaved lanes (the instruction has a latency of 3 cycles and a
 * throughput of 1 per cycle) whose partial CRCs are combined with a
 * precomputed "append N zero bytes" operator; small buffers run one lane.
 * The table path is slicing-by-8.
 *
 * Thread-safety: tables are built once under pthread_once; everything else is
 * pure, so all functions may be called concurrently.
 */
#include "plg.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define PLG_HAVE_HW_CANDIDATE 1
#elif defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#define PLG_HAVE_HW_CANDIDATE 1
#endif

#define POLY_C 0x82F63B78u
#define POLY_IEEE 0xEDB88320u

/* Lane length for the 3-way hardware path; the combine operator shifts a
 * partial CRC past LANE bytes of zeros. */
#define LANE 8192u

static uint32_t table_c[8][256];
static uint32_t table_ieee[8][256];
static uint32_t shift_lane[4][256]; /* x -> crc register after LANE zero bytes */
static int hw_available;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void build_table(uint32_t table[8][256], uint32_t poly) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int k = 1; k < 8; k++) {
            c = table[0][c & 0xff] ^ (c >> 8);
            table[k][n] = c;
        }
    }
}

/* Raw register update (no pre/post inversion), slicing-by-8. */
static uint32_t crc_sw(uint32_t table[8][256], uint32_t crc, const uint8_t *p, uint64_t n) {
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
              table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^
              table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static uint32_t shift_zeros_slow(uint32_t crc, uint64_t nbytes) {
    while (nbytes--) crc = table_c[0][crc & 0xff] ^ (crc >> 8);
    return crc;
}

static void init_tables(void) {
    build_table(table_c, POLY_C);
    build_table(table_ieee, POLY_IEEE);
    /* The zero-append operator is linear over GF(2): build it per byte lane
     * from its action on each basis vector. */
    uint32_t basis[32];
    for (int b = 0; b < 32; b++) basis[b] = shift_zeros_slow(1u << b, LANE);
    for (int k = 0; k < 4; k++) {
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1u << b)) r ^= basis[8 * k + b];
            shift_lane[k][v] = r;
        }
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    hw_available = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#elif defined(__aarch64__)
    hw_available = (getauxval(AT_HWCAP) & HWCAP_CRC32) ? 1 : 0;
#else
    hw_available = 0;
#endif
}

static inline uint32_t shift_by_lane(uint32_t x) {
    return shift_lane[0][x & 0xff] ^ shift_lane[1][(x >> 8) & 0xff] ^
           shift_lane[2][(x >> 16) & 0xff] ^ shift_lane[3][x >> 24];
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p,
                                                         uint64_t n) {
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    while (n >= 3 * LANE) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *p1 = p + LANE, *p2 = p + 2 * LANE;
        for (uint32_t i = 0; i < LANE; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, p1 + i, 8);
            memcpy(&d, p2 + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
        }
        c0 = shift_by_lane(shift_by_lane((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * LANE;
        n -= 3 * LANE;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#elif defined(__aarch64__)
__attribute__((target("+crc"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p,
                                                      uint64_t n) {
    uint32_t c0 = crc;
    while (n >= 3 * LANE) {
        uint32_t c1 = 0, c2 = 0;
        const uint8_t *p1 = p + LANE, *p2 = p + 2 * LANE;
        for (uint32_t i = 0; i < LANE; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, p1 + i, 8);
            memcpy(&d, p2 + i, 8);
            c0 = __builtin_aarch64_crc32cx(c0, a);
            c1 = __builtin_aarch64_crc32cx(c1, b);
            c2 = __builtin_aarch64_crc32cx(c2, d);
        }
        c0 = shift_by_lane(shift_by_lane(c0) ^ c1) ^ c2;
        p += 3 * LANE;
        n -= 3 * LANE;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = __builtin_aarch64_crc32cx(c0, a);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = __builtin_aarch64_crc32cb(c0, *p++);
    return c0;
}
#endif

int plg_crc32c_hardware(void) {
    pthread_once(&init_once, init_tables);
    return hw_available;
}

/* Returns PLG_OK; buf is only read during the call; thread-safe. */
int plg_crc32c(const uint8_t *buf, uint64_t len, uint32_t crc_in, uint32_t *crc_out) {
    pthread_once(&init_once, init_tables);
    if (!crc_out || (!buf && len)) return PLG_EINVAL;
    uint32_t c = ~crc_in;
#if defined(PLG_HAVE_HW_CANDIDATE)
    if (hw_available) {
        *crc_out = ~crc_hw(c, buf, len);
        return PLG_OK;
    }
#endif
    *crc_out = ~crc_sw(table_c, c, buf, len);
    return PLG_OK;
}

/* The table path regardless of the CPU; used by tests to cross-check. */
int plg_crc32c_table(const uint8_t *buf, uint64_t len, uint32_t crc_in, uint32_t *crc_out) {
    pthread_once(&init_once, init_tables);
    if (!crc_out || (!buf && len)) return PLG_EINVAL;
    *crc_out = ~crc_sw(table_c, ~crc_in, buf, len);
    return PLG_OK;
}

int plg_crc32(const uint8_t *buf, uint64_t len, uint32_t crc_in, uint32_t *crc_out) {
    pthread_once(&init_once, init_tables);
    if (!crc_out || (!buf && len)) return PLG_EINVAL;
    *crc_out = ~crc_sw(table_ieee, ~crc_in, buf, len);
    return PLG_OK;
}
