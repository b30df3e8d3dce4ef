/* The decode matrix-vector products (see gemv.h). Large products split their rows over the
 * helper threads of base/parallel.h. */
#include "gemv.h"

#include <stdint.h>

#include "../base/cpu.h"
#include "../base/fp16.h"
#include "../base/parallel.h"
#include "blas.h"
#include "gemm.h"
#include "lut4_avx2.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

/* How far ahead of the weights being read the AVX2 kernels of fp16 and quantized rows (float
 * and integer activations) ask for the next ones (the rows are one stream; the hardware
 * prefetcher alone left their loads waiting on memory: Stories110M fp16 decode 58-60 -> 70-75
 * tok/s with it, measured when the AVX-512 kernels were single-row too; fp32 rows, read twice
 * as fast per element, gain nothing). The AVX-512 kernels read four rows at once and do
 * without (see below). */
#define PREFETCH_BYTES 1024

__attribute__((target("avx2"))) static inline float horizontal_sum(__m256 sum) {
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_shuffle_ps(half, half, 1));
    return _mm_cvtss_f32(half);
}

/* |values| (the sign bit cleared), and the largest of the eight. */
__attribute__((target("avx2"))) static inline __m256 abs_ps(__m256 values) {
    return _mm256_and_ps(values, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

__attribute__((target("avx2"))) static inline float horizontal_max_abs(__m256 values) {
    __m256 magnitudes = abs_ps(values);
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(magnitudes), _mm256_extractf128_ps(magnitudes, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_shuffle_ps(half, half, 1));
    return _mm_cvtss_f32(half);
}

/* AVX2: 32 elements an iteration in four accumulators (an FMA's latency is four of its
 * issue slots, so two chains left half of them idle), and the weights prefetched ahead as
 * in the AVX-512 kernels below. */
__attribute__((target("avx2,fma,f16c"))) static float dot_avx2(const uint16_t *w, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(w + j) + PREFETCH_BYTES, _MM_HINT_T0);
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j))), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 8))), _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 16))), _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 24))), _mm256_loadu_ps(x + j + 24), a3);
    }
    for (; j + 8 <= k; j += 8)
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j))), _mm256_loadu_ps(x + j), a0);
    float total = horizontal_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

/* fp32 rows in dot_avx2's order (the same chains, tails and sums), so an fp16 row and its
 * values in fp32 give the same result bit for bit, as the AVX-512 and scalar kernels do:
 * weights fed to a program as inputs compute what the same weights as fp16 consts do. */
__attribute__((target("avx2,fma"))) static float dot32_avx2(const float *w, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
    }
    for (; j + 8 <= k; j += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
    float total = horizontal_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < k; j++) total += w[j] * x[j];
    return total;
}

/* int8 row: sum q[j] x[j] (the row's scale is applied by the caller). */
__attribute__((target("avx2,fma"))) static float dot_int8_avx2(const int8_t *q, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(q + j) + PREFETCH_BYTES, _MM_HINT_T0);
        /* 8-byte loads the widening takes as its memory operand: no shifts to reach a half */
#define INT8_EIGHT(at) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + (at)))))
        a0 = _mm256_fmadd_ps(INT8_EIGHT(j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(INT8_EIGHT(j + 8), _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(INT8_EIGHT(j + 16), _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(INT8_EIGHT(j + 24), _mm256_loadu_ps(x + j + 24), a3);
#undef INT8_EIGHT
    }
    float total = horizontal_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < k; j++) total += (float)q[j] * x[j];
    return total;
}

/* 4-bit row: sum palette[index j] x[j], the palette's fp32 values looked up exactly
 * (lut4_avx2.h). */
__attribute__((target("avx2,fma"))) static float dot_lut4_avx2(const uint8_t *packed, const float *palette,
                                                                const float *x, int64_t k) {
    __m256i tables[4];
    lut4_byte_tables_avx2(palette, tables);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(packed + j / 2) + PREFETCH_BYTES, _MM_HINT_T0);
        __m256 w[4];
        lut4_values_avx2(packed + j / 2, tables, w);
        a0 = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + j + 24), a3);
    }
    float total = horizontal_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}

/* 4-bit row whose palette entries have 8 significant bits (bf16's; the quantizer rounds them
 * so): an entry's fp32 bits are its top two bytes followed by two zero bytes, so two byte
 * lookups, an interleave of them into words and a shift or a mask of each word rebuild it
 * exactly: four shuffles per 32 weights against the thirteen of dot_lut4_avx2's four lookups
 * and two rounds of interleaving. The values come out of the registers in an order of their
 * own (lut4_split_slot), the one x_split was written in once per product. A palette with any
 * other entry takes dot_lut4_avx2. */
enum { LUT4_SPLIT_CHUNK = 64 };

/* The element (0-63) of a 64-weight chunk that slot s of x_split holds: the kernel's eight
 * registers of eight values, in order, are the even elements' then the odd ones' four (each
 * 128-bit lane of an index register holds 16 of the chunk's 32 bytes; an interleave of the
 * low and high bytes makes 8 words of a lane, and a shift and a mask take its even and odd
 * words). */
static int lut4_split_slot(int s) {
    int group = s / 8, dword = s % 8, odd = group / 4, form = group % 4;
    int byte = 16 * (dword / 4) + (form >= 2 ? 8 : 0) + 2 * (dword % 4) + (form & 1);
    return 2 * byte + odd;
}

__attribute__((target("avx2,fma"))) static float dot_lut4_bf16_avx2(const uint8_t *packed, const float *palette,
                                                                     const float *x_split, const float *x, int64_t k) {
    __m256i first = _mm256_loadu_si256((const __m256i *)palette), second = _mm256_loadu_si256((const __m256i *)(palette + 8));
    if (!_mm256_testz_si256(_mm256_or_si256(first, second), _mm256_set1_epi32(0xFFFF)))
        return dot_lut4_avx2(packed, palette, x, k);
    /* the entries' top halves as 16 words in order, then their low bytes (lower lane) and high bytes */
    __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_srli_epi32(first, 16), _mm256_srli_epi32(second, 16)),
                                             _MM_SHUFFLE(3, 1, 2, 0));
    const __m256i bytes_apart = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                                 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    __m256i planes = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, bytes_apart), _MM_SHUFFLE(3, 1, 2, 0));
    const __m256i low_table = _mm256_permute2x128_si256(planes, planes, 0x00);
    const __m256i high_table = _mm256_permute2x128_si256(planes, planes, 0x11);
    const __m256i nibble = _mm256_set1_epi8(0x0F), top_word = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 sums[8]; /* one a register: eight sums in flight cover an FMA's latency */
    for (int i = 0; i < 8; i++) sums[i] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + LUT4_SPLIT_CHUNK <= k; j += LUT4_SPLIT_CHUNK) {
        _mm_prefetch((const char *)(packed + j / 2) + PREFETCH_BYTES, _MM_HINT_T0);
        __m256i bytes = _mm256_loadu_si256((const __m256i *)(packed + j / 2));
        const float *xs = x_split + j;
        for (int odd = 0; odd < 2; odd++) {
            __m256i indices = odd ? _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble) : _mm256_and_si256(bytes, nibble);
            __m256i low = _mm256_shuffle_epi8(low_table, indices), high = _mm256_shuffle_epi8(high_table, indices);
            __m256i front = _mm256_unpacklo_epi8(low, high), back = _mm256_unpackhi_epi8(low, high);
            __m256 *s = sums + 4 * odd;
            s[0] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(front, 16)), _mm256_loadu_ps(xs), s[0]);
            s[1] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(front, top_word)), _mm256_loadu_ps(xs + 8), s[1]);
            s[2] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(back, 16)), _mm256_loadu_ps(xs + 16), s[2]);
            s[3] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(back, top_word)), _mm256_loadu_ps(xs + 24), s[3]);
            xs += 32;
        }
    }
    __m256 even = _mm256_add_ps(_mm256_add_ps(sums[0], sums[1]), _mm256_add_ps(sums[2], sums[3]));
    __m256 odd = _mm256_add_ps(_mm256_add_ps(sums[4], sums[5]), _mm256_add_ps(sums[6], sums[7]));
    float total = horizontal_sum(_mm256_add_ps(even, odd));
    for (; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}

/* AVX-512: sixteen lanes (one conversion turns 16 halves into floats; the 16-entry palette
 * is one register that vpermps indexes), and four rows at a time, so each load of x serves
 * four rows of weights: fewer loads per byte of weights leave more of them waiting on memory
 * at once (fp16 [8192, 4096] from memory, 2 threads, Zen 4: 24 -> 30 GB/s; the 4-bit
 * kernel's arithmetic below is lighter too). The four rows are far apart (rows_in_groups:
 * the quarters of a thread's share), so each is one long stream the hardware prefetcher
 * follows; four neighbouring rows of a decode-sized matrix are four short streams in the
 * same pages, which it does not follow ([2048, 768]: 26-33 GB/s one row at a time and four
 * quarters apart alike, ~14 four neighbours). A software prefetch, which the single-row
 * kernels had, cost the grouped ones 20% of a Stories110M fp16 decode. A row's sums are the
 * same in any group (two accumulators, elements j .. j + 15 and j + 16 .. j + 31 of each 32,
 * the same tail), so its result does not depend on how the rows were split.
 *
 * ROWS_AVX512(name, type, WEIGHTS32, ELEMENT) defines name(w, row_bytes, k, x, tables,
 * table_stride, y, y_stride, count), a rows_kernel: for r < count (1 or 4), y[r y_stride] = row
 * r (at w + r row_bytes, of `type`) times x, the row's table at tables + r table_stride. In it,
 * WEIGHTS32(row, table, j, w0, w1) sets w0 and w1 to the row's fp32 weights j .. j + 15 and
 * j + 16 .. j + 31 (j a multiple of 32; in the order x is in) and ELEMENT(row, table, j) is one
 * weight (in the tail). */
#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define GEMV_GROUP 4

#define ROWS_AVX512(name, type, WEIGHTS32, ELEMENT)                                                         \
    AVX512 static inline __attribute__((always_inline)) void name##_inline(                                 \
        const char *w, int64_t row_bytes, int64_t k, const float *x, const float *tables, int64_t table_stride, \
        float *y, int64_t y_stride, int count) {                                                            \
        const type *rows[GEMV_GROUP];                                                                       \
        const float *row_tables[GEMV_GROUP]; /* (unused by kernels without tables) */                       \
        __m512 a0[GEMV_GROUP], a1[GEMV_GROUP];                                                              \
        for (int r = 0; r < count; r++) {                                                                   \
            rows[r] = (const type *)(w + r * row_bytes);                                                    \
            row_tables[r] = tables ? tables + r * table_stride : NULL;                                      \
            a0[r] = a1[r] = _mm512_setzero_ps();                                                            \
        }                                                                                                   \
        (void)row_tables;                                                                                   \
        int64_t j = 0;                                                                                      \
        for (; j + 32 <= k; j += 32) {                                                                      \
            __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);                            \
            for (int r = 0; r < count; r++) {                                                               \
                __m512 w0, w1;                                                                              \
                WEIGHTS32(rows[r], row_tables[r], j, w0, w1);                                               \
                a0[r] = _mm512_fmadd_ps(w0, x0, a0[r]);                                                     \
                a1[r] = _mm512_fmadd_ps(w1, x1, a1[r]);                                                     \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < count; r++) {                                                                   \
            float total = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));                                \
            for (int64_t t = j; t < k; t++) total += ELEMENT(rows[r], row_tables[r], t) * x[t];             \
            y[r * y_stride] = total;                                                                        \
        }                                                                                                   \
    }                                                                                                       \
    AVX512 static void name(const void *w, int64_t row_bytes, int64_t k, const float *x, const float *tables, \
                            int64_t table_stride, float *y, int64_t y_stride, int count) {                  \
        if (count == GEMV_GROUP) name##_inline(w, row_bytes, k, x, tables, table_stride, y, y_stride, GEMV_GROUP); \
        else name##_inline(w, row_bytes, k, x, tables, table_stride, y, y_stride, 1);                       \
    }

#define FP16_WEIGHTS32(row, table, j, w0, w1)                                                               \
    (w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((row) + (j)))),                               \
     w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((row) + (j) + 16))))
#define FP16_ELEMENT(row, table, j) ane_fp16_to_fp32((row)[j])
ROWS_AVX512(rows_avx512_fp16, uint16_t, FP16_WEIGHTS32, FP16_ELEMENT)

/* fp32 rows one at a time: grouped, a Stories110M fp32 decode lost 6-10% (paired). */
AVX512 static float dot32_avx512(const float *w, const float *x, int64_t k) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), a0); /* no prefetch: slower here */
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 16), _mm512_loadu_ps(x + j + 16), a1);
    }
    float total = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; j < k; j++) total += w[j] * x[j];
    return total;
}

/* int8 rows: the codes times x (the caller applies each row's scale). */
#define INT8_SIXTEEN(at) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(at))))
#define INT8_WEIGHTS32(row, table, j, w0, w1) (w0 = INT8_SIXTEEN((row) + (j)), w1 = INT8_SIXTEEN((row) + (j) + 16))
#define INT8_ELEMENT(row, table, j) (float)(row)[j]
ROWS_AVX512(rows_avx512_int8, int8_t, INT8_WEIGHTS32, INT8_ELEMENT)

/* 4-bit rows (k even; a table is the row's 16-entry palette). vpermps reads only the low four
 * bits of an index, so the 16 bytes of a 32-weight chunk, copied into each 128-bit lane, need
 * one shift per lane to bring a different index into each lane's low bits: dword d holds
 * elements 8d .. 8d + 7 (element 8d + n in nibble n), so lane L of the first vector, shifted
 * by 4 (L / 4), holds element 8 (L % 4) + L / 4, and of the second, shifted 16 bits further,
 * element 8 (L % 4) + 4 + L / 4. x comes in that order (lut4_avx512_slot; x_split, written once
 * per product); the tail, after the whole chunks, in its own. */
enum { LUT4_AVX512_CHUNK = 32 };

static int lut4_avx512_slot(int s) { return 8 * (s % 4) + 4 * (s / 16) + (s % 16) / 4; }

#define LUT4_WEIGHTS32(row, table, j, w0, w1)                                                               \
    do {                                                                                                    \
        __m512 palette_ = _mm512_loadu_ps(table);                                                           \
        __m512i chunk_ = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)((row) + (j) / 2)));         \
        const __m512i shifts_ = _mm512_set_epi32(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);         \
        w0 = _mm512_permutexvar_ps(_mm512_srlv_epi32(chunk_, shifts_), palette_);                           \
        w1 = _mm512_permutexvar_ps(_mm512_srlv_epi32(chunk_, _mm512_add_epi32(shifts_, _mm512_set1_epi32(16))), palette_); \
    } while (0)
#define LUT4_INDEX(row, j) (((row)[(j) / 2] >> 4 * ((j) & 1)) & 15u) /* element j's palette index */
#define LUT4_ELEMENT(row, table, j) (table)[LUT4_INDEX(row, j)]
ROWS_AVX512(rows_avx512_lut4, uint8_t, LUT4_WEIGHTS32, LUT4_ELEMENT)

/* 4-bit rows where the CPU has AVX512_BF16 (Zen 4, Sapphire Rapids), 128 weights (64 packed
 * bytes) a step, in two thirds of the vector operations of the kernel above (per 128 weights and
 * row: a load, 3 shifts, 4 vpermw and 8 vdpbf16ps, against 8 shifts, 8 vpermps and 8 FMAs,
 * and Zen 4 issues two 512-bit operations a cycle: ~1.5x from cache). A row whose palette
 * entries have 8 significant bits (bf16's; the quantizer writes them so) looks its entries up as
 * bf16 words: vpermw reads an index's low five bits, so a table of the 16 words twice takes the
 * word of 4 packed nibbles as an index for its first nibble, and the word shifted by 4, 8 and 12
 * for the others (32 weights per lookup; slot p of lookup v holds element 4 p + v of the chunk).
 * vdpbf16ps multiplies pairs of bf16 numbers, each product exact in fp32, and adds them to fp32
 * sums; x comes as two bf16 parts (x_split: x rounded to bf16, then the rest rounded), whose sum
 * is x to 16 significant bits: off by at most 2^-16 |x| (exact for fp16 activations, whose 11
 * bits two parts hold; parts below 2^-126, which the instruction reads as zero, aside). A third
 * part would make it x itself at ~20% more time from cache; the device multiplies fp16
 * activations. A row with any other palette takes its fp32 entries through vpermps against the
 * parts added back together, and the tail after the whole chunks is summed element by element
 * against x itself; a row's path depends on its palette alone, so its result does not depend on
 * its group. */
enum { LUT4_BF16_CHUNK = 128, LUT4_BF16_PARTS = 2, LUT4_BF16_PREFETCH_BYTES = 1024 };

/* Slot s (0-127) of each part of a chunk of x_split holds the chunk's element 4 (s % 32) + s / 32
 * (the order lookup v's 32 words come in: split_bf16 writes it). */

#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma,f16c")))

/* Sums 0 and 1 of a row (even and odd lookups) gain a chunk's 128 products (parts: the chunk's
 * parts of x, 128 words each); two_bytes: the row's entries are its bf16 table `words`,
 * else its fp32 palette. */
AVX512_BF16 static inline __attribute__((always_inline)) void lut4_bf16_chunk(__m512i packed, const uint16_t *parts,
                                                                             int two_bytes, __m512i words,
                                                                             __m512 palette, __m512 *sum0, __m512 *sum1) {
    for (int v = 0; v < 4; v++) {
        __m512i indices = v ? _mm512_srli_epi16(packed, 4 * v) : packed;
        __m512 sum = v % 2 ? *sum1 : *sum0;
        if (two_bytes) {
            __m512bh entries = (__m512bh)_mm512_permutexvar_epi16(indices, words);
            for (int part = 0; part < LUT4_BF16_PARTS; part++)
                sum = _mm512_dpbf16_ps(sum, entries, (__m512bh)_mm512_loadu_si512(parts + LUT4_BF16_CHUNK * part + 32 * v));
        } else {
            for (int half = 0; half < 2; half++) { /* 16 words at a time, widened (vpermps reads 4 bits) */
                __m512i wide = _mm512_cvtepu16_epi32(half ? _mm512_extracti64x4_epi64(indices, 1)
                                                          : _mm512_castsi512_si256(indices));
                __m512 x = _mm512_setzero_ps();
                for (int part = 0; part < LUT4_BF16_PARTS; part++) {
                    const __m256i *bf16 = (const __m256i *)(parts + LUT4_BF16_CHUNK * part + 32 * v + 16 * half);
                    x = _mm512_add_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(bf16)), 16)));
                }
                sum = _mm512_fmadd_ps(_mm512_permutexvar_ps(wide, palette), x, sum);
            }
        }
        if (v % 2) *sum1 = sum;
        else *sum0 = sum;
    }
}

/* count rows (1 or 4); all_two_bytes: every one of them has a bf16 table (the common case,
 * compiled without the other path); else each row takes its own. */
AVX512_BF16 static inline __attribute__((always_inline)) void rows_avx512_lut4_bf16_inline(
    const uint8_t *w, int64_t row_bytes, int64_t k, const float *x_split, const float *tables, int64_t table_stride,
    float *y, int64_t y_stride, int count, int all_two_bytes, int given_words) {
    __m512 a0[GEMV_GROUP], a1[GEMV_GROUP], palettes[GEMV_GROUP];
    __m512i words[GEMV_GROUP]; /* each row's 16 bf16 entries, twice */
    int two_bytes[GEMV_GROUP];
    for (int r = 0; r < count; r++) {
        a0[r] = a1[r] = _mm512_setzero_ps();
        if (given_words) { /* tables: the rows' words */
            words[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(tables + r * table_stride)));
            palettes[r] = _mm512_setzero_ps(), two_bytes[r] = 1;
            continue;
        }
        palettes[r] = _mm512_loadu_ps(tables + r * table_stride);
        __m512i bits = _mm512_castps_si512(palettes[r]);
        two_bytes[r] = all_two_bytes || _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0xFFFF)) == 0;
        __m256i top_words = _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16));
        words[r] = _mm512_inserti64x4(_mm512_castsi256_si512(top_words), top_words, 1);
    }
    int64_t j = 0;
    for (; j + LUT4_BF16_CHUNK <= k; j += LUT4_BF16_CHUNK) {
        const uint16_t *parts = (const uint16_t *)x_split + LUT4_BF16_PARTS * j;
        /* the rows' bytes ahead, asked for as non-temporal: each is read once a token, and a
         * decode's weights outgrow L3, where they only pushed out what is read again soon (KV
         * caches, activations). Stories110M and Qwen3-0.6B int4 decode, the two hints alternating
         * in one process every 0.25 s: 0.97-0.99x the time per token. (The other row kernels,
         * prefetching nothing, lost 2-15% with non-temporal prefetches added.) */
        for (int r = 0; r < count; r++)
            _mm_prefetch((const char *)(w + r * row_bytes + j / 2) + LUT4_BF16_PREFETCH_BYTES, _MM_HINT_NTA);
        for (int r = 0; r < count; r++)
            lut4_bf16_chunk(_mm512_loadu_si512(w + r * row_bytes + j / 2), parts, all_two_bytes || two_bytes[r], words[r],
                            palettes[r], &a0[r], &a1[r]);
    }
    const float *tail = (const float *)((const uint16_t *)x_split + LUT4_BF16_PARTS * j); /* x from element j on */
    for (int r = 0; r < count; r++) {
        const uint8_t *row = w + r * row_bytes;
        const float *palette = tables + r * table_stride;
        float total = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
        for (int64_t t = j; t < k; t++)
            total += (given_words ? ane_bf16_to_fp32(((const uint16_t *)palette)[LUT4_INDEX(row, t)])
                                  : LUT4_ELEMENT(row, palette, t)) * tail[t - j];
        y[r * y_stride] = total;
    }
}

AVX512_BF16 static void rows_avx512_lut4_bf16(const void *w, int64_t row_bytes, int64_t k, const float *x_split,
                                             const float *tables, int64_t table_stride, float *y, int64_t y_stride,
                                             int count) {
    __m512i low_bits = _mm512_setzero_si512();
    for (int r = 0; r < count; r++) low_bits = _mm512_or_si512(low_bits, _mm512_loadu_si512(tables + r * table_stride));
    int all_two_bytes = _mm512_test_epi32_mask(low_bits, _mm512_set1_epi32(0xFFFF)) == 0;
#define LUT4_BF16_ROWS(n, all) rows_avx512_lut4_bf16_inline(w, row_bytes, k, x_split, tables, table_stride, y, y_stride, n, all, 0)
    if (count == GEMV_GROUP) {
        if (all_two_bytes) LUT4_BF16_ROWS(GEMV_GROUP, 1);
        else LUT4_BF16_ROWS(GEMV_GROUP, 0);
    } else if (all_two_bytes) LUT4_BF16_ROWS(1, 1);
    else LUT4_BF16_ROWS(1, 0);
#undef LUT4_BF16_ROWS
}

/* The same rows with their palettes given as bf16 words (ane_palette_codes under float
 * activations: 16 a row, 32 bytes, every entry a bf16 value), in `tables` (table_stride
 * counted in floats, 8 a row): no fp32 palette read and converted per row, half the bytes of
 * the rows' second stream. The same sums: a row's words are its palette's entries. 4-bit
 * products from memory, [3072, 1024], alternating in one process: 0.87-0.91x the time; whole
 * decodes, alternating in one process: Qwen3-0.6B int4 0.90-0.95x, Stories110M int4
 * 0.94-1.00x. */
AVX512_BF16 static void rows_avx512_lut4_words(const void *w, int64_t row_bytes, int64_t k, const float *x_split,
                                              const float *tables, int64_t table_stride, float *y, int64_t y_stride,
                                              int count) {
    if (count == GEMV_GROUP)
        rows_avx512_lut4_bf16_inline(w, row_bytes, k, x_split, tables, table_stride, y, y_stride, GEMV_GROUP, 1, 1);
    else
        rows_avx512_lut4_bf16_inline(w, row_bytes, k, x_split, tables, table_stride, y, y_stride, 1, 1, 1);
}

/* x_split for rows_avx512_lut4_bf16: per 128 elements, the parts of x as 128 bf16 words each in
 * the slot order above (x rounded to nearest even, then the rest rounded; an infinite x leaves
 * no rest, a NaN stays NaN, and an x beyond bf16's largest number, 3.39e38, rounds to infinity:
 * 4 bytes per element, a float's), then x's tail as it is. */
AVX512_BF16 static void split_bf16(float *x_split, const float *x, int64_t k) {
    /* A chunk's 128 elements convert in order, as 4 vectors of 32 words (elements 32 q ..
     * 32 q + 31); slot vector v (elements 4 i + v) gathers from them in two rounds of word
     * permutes: gather[u] takes, for v = 2u and 2u + 1, elements 4 i + v of i < 16 from vectors
     * 0 and 1 (applied to 2 and 3: of i >= 16) into its halves; join[v % 2] then puts v's
     * halves of the two together. (A gather instruction per 16 elements took ~6% of the main
     * thread's time in a Stories110M int4 decode.) */
    uint16_t gather[2][32], join[2][32];
    for (int t = 0; t < 16; t++)
        for (int half = 0; half < 2; half++) {
            for (int u = 0; u < 2; u++) {
                int v = 2 * u + half;
                gather[u][16 * half + t] = (uint16_t)(t < 8 ? 4 * t + v : 32 + 4 * (t - 8) + v);
            }
            join[half][t] = (uint16_t)(16 * half + t), join[half][16 + t] = (uint16_t)(32 + 16 * half + t);
        }
    __m512i gather_index[2], join_index[2];
    for (int u = 0; u < 2; u++)
        gather_index[u] = _mm512_loadu_si512(gather[u]), join_index[u] = _mm512_loadu_si512(join[u]);
    int64_t whole = k / LUT4_BF16_CHUNK * LUT4_BF16_CHUNK;
    for (int64_t c = 0; c < whole; c += LUT4_BF16_CHUNK) {
        __m256i words[LUT4_BF16_PARTS][8]; /* each part of elements 16 g .. 16 g + 15 of the chunk */
        for (int g = 0; g < 8; g++) {
            __m512 rest = _mm512_loadu_ps(x + c + 16 * g);
            for (int part = 0; part < LUT4_BF16_PARTS; part++) {
                __m256i rounded = (__m256i)_mm512_cvtneps_pbh(rest);
                words[part][g] = rounded;
                __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(rounded), 16));
                rest = _mm512_sub_ps(rest, back); /* exact; NaN where x is infinite, then 0 */
                rest = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(rest, rest, _CMP_ORD_Q), rest);
            }
        }
        uint16_t *parts = (uint16_t *)x_split + LUT4_BF16_PARTS * c;
        for (int part = 0; part < LUT4_BF16_PARTS; part++) {
            __m512i vectors[4];
            for (int q = 0; q < 4; q++)
                vectors[q] = _mm512_inserti64x4(_mm512_castsi256_si512(words[part][2 * q]), words[part][2 * q + 1], 1);
            for (int u = 0; u < 2; u++) {
                __m512i low = _mm512_permutex2var_epi16(vectors[0], gather_index[u], vectors[1]);
                __m512i high = _mm512_permutex2var_epi16(vectors[2], gather_index[u], vectors[3]);
                for (int half = 0; half < 2; half++)
                    _mm512_storeu_si512(parts + LUT4_BF16_CHUNK * part + 32 * (2 * u + half),
                                        _mm512_permutex2var_epi16(low, join_index[half], high));
            }
        }
    }
    memcpy((uint16_t *)x_split + LUT4_BF16_PARTS * whole, x + whole, (size_t)(k - whole) * sizeof *x);
}
#endif

static float dot_int8_scalar(const int8_t *q, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += (float)q[j] * x[j];
    return total;
}

static float dot_lut4_scalar(const uint8_t *packed, const float *palette, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}

static float dot32_scalar(const float *w, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += w[j] * x[j];
    return total;
}

static float dot_scalar(const uint16_t *w, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

typedef struct gemv_job {
    float *y;
    const void *w; /* [rows, k], fp16 or fp32; or encoded (quantize.h) */
    const float *x;
    int64_t k;
    int64_t row_stride; /* elements from one fp16 / fp32 row to the next: k, or more (the first k of longer rows) */
    const float *table; /* encoded: per-row scales [rows] or palettes [rows, 16] */
    const float *x_split; /* 4-bit rows: x [k] as rows_avx512_lut4_bf16, rows_avx512_lut4 or dot_lut4_bf16_avx2 read it (split_for_lut4), else NULL */
    const uint16_t *words; /* 4-bit rows: their palettes as bf16 words [rows, 16] (ane_palette_codes), or NULL */
} gemv_job;

#if defined(__x86_64__)
/* Rows first .. last of a share in groups: four rows a quarter of the share apart at a time
 * (row i of each quarter), then the rows left over one by one; body(context, row, apart,
 * count) takes rows row, row + apart, ... (count of them). */
typedef void (*row_group_body)(const void *context, int64_t row, int64_t apart, int count);

static void in_row_groups(int64_t first, int64_t last, row_group_body body, const void *context) {
    int64_t quarter = (last - first) / GEMV_GROUP;
    for (int64_t i = 0; i < quarter; i++) body(context, first + i, quarter, GEMV_GROUP);
    for (int64_t r = first + GEMV_GROUP * quarter; r < last; r++) body(context, r, 1, 1);
}

/* A kernel of ROWS_AVX512 over a job's rows (x: the job's x, or x_split); a row's weights are
 * row_bytes apart, its table entries table_stride. */
typedef void (*rows_kernel)(const void *w, int64_t row_bytes, int64_t k, const float *x, const float *tables,
                            int64_t table_stride, float *y, int64_t y_stride, int count);

typedef struct float_groups {
    const gemv_job *job;
    const float *x;
    rows_kernel kernel;
    int64_t row_bytes;
    const float *tables; /* the rows' tables (the job's, or its palettes' bf16 words), or NULL */
    int64_t table_stride;
} float_groups;

static void float_group(const void *context, int64_t row, int64_t apart, int count) {
    const float_groups *g = context;
    const float *tables = g->tables ? g->tables + row * g->table_stride : NULL;
    g->kernel((const char *)g->job->w + row * g->row_bytes, apart * g->row_bytes, g->job->k, g->x, tables,
              apart * g->table_stride, g->job->y + row, apart, count);
}

static void rows_in_groups(const gemv_job *job, const float *x, int64_t first, int64_t last, rows_kernel kernel,
                           int64_t row_bytes, const float *tables, int64_t table_stride) {
    float_groups groups = {job, x, kernel, row_bytes, tables, table_stride};
    in_row_groups(first, last, float_group, &groups);
}
#endif

static void rows_fp16(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const uint16_t *, const float *, int64_t) = dot_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx512f()) {
        rows_in_groups(job, job->x, first, last, rows_avx512_fp16, job->row_stride * 2, NULL, 0);
        return;
    }
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot_avx2;
#endif
    const uint16_t *w = job->w;
    for (int64_t r = first; r < last; r++) job->y[r] = dot(w + r * job->row_stride, job->x, job->k);
}

static void rows_fp32(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const float *, const float *, int64_t) = dot32_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot32_avx2;
    if (ane_cpu_has_avx512f()) dot = dot32_avx512;
#endif
    const float *w = job->w;
    for (int64_t r = first; r < last; r++) job->y[r] = dot(w + r * job->row_stride, job->x, job->k);
}

static void rows_int8(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const int8_t *, const float *, int64_t) = dot_int8_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx512f()) {
        rows_in_groups(job, job->x, first, last, rows_avx512_int8, job->k, NULL, 0);
        for (int64_t r = first; r < last; r++) job->y[r] *= job->table[r];
        return;
    }
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot_int8_avx2;
#endif
    const int8_t *q = job->w;
    for (int64_t r = first; r < last; r++) job->y[r] = dot(q + r * job->k, job->x, job->k) * job->table[r];
}

static void rows_lut4(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const uint8_t *, const float *, const float *, int64_t) = dot_lut4_scalar;
    const uint8_t *packed = job->w;
#if defined(__x86_64__)
    if (job->x_split && ane_cpu_has_avx512_bf16()) {
        if (job->words) /* (the words ride in the tables' place, 8 floats' bytes a row) */
            rows_in_groups(job, job->x_split, first, last, rows_avx512_lut4_words, job->k / 2, (const float *)job->words,
                           ANE_LUT4_ENTRIES / 2);
        else
            rows_in_groups(job, job->x_split, first, last, rows_avx512_lut4_bf16, job->k / 2, job->table, ANE_LUT4_ENTRIES);
        return;
    }
    if (job->x_split && ane_cpu_has_avx512f()) {
        rows_in_groups(job, job->x_split, first, last, rows_avx512_lut4, job->k / 2, job->table, ANE_LUT4_ENTRIES);
        return;
    }
    if (job->x_split) {
        for (int64_t r = first; r < last; r++)
            job->y[r] = dot_lut4_bf16_avx2(packed + r * (job->k / 2), job->table + r * ANE_LUT4_ENTRIES, job->x_split,
                                           job->x, job->k);
        return;
    }
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot_lut4_avx2;
#endif
    for (int64_t r = first; r < last; r++)
        job->y[r] = dot(packed + r * (job->k / 2), job->table + r * ANE_LUT4_ENTRIES, job->x, job->k);
}

/* Shares of at least GRAIN_BYTES of weights: below that, handing rows to a helper costs
 * more than it saves. */
#define GRAIN_BYTES ((int64_t)1 << 16)

static int64_t grain_rows(int64_t row_bytes) { return row_bytes > 0 ? GRAIN_BYTES / row_bytes + 1 : 1; }

/* A matrix-vector product's rows over the helper threads (row_bytes: a row's bytes of
 * weights). Rows shorter than SHORT_ROW_BYTES go in two chunks a thread, not four: each chunk
 * starts new streams of weights (in_row_groups: four rows a quarter of the chunk apart), and
 * short rows make short streams, which read slower than better-balanced chunks finish.
 * Stories110M decodes, the chunk counts alternating in one process every 0.25 s: int4 rows
 * (384 B and 1 KB) in two chunks 0.92-0.97x the time per token of four, int8 (768 B) 0.93x;
 * fp16 rows (1.5 KB) in two chunks 1.01-1.05x, so long rows keep four. */
enum { SHORT_ROW_BYTES = 1024 };

static void rows_parallel_for(int64_t rows, int64_t row_bytes, ane_range_body body, void *job) {
    ane_parallel_for_chunks(rows, grain_rows(row_bytes), row_bytes < SHORT_ROW_BYTES ? 2 : 4, body, job);
}

void ane_gemv_fp16_strided(float *y, const uint16_t *w, int64_t row_stride, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k, row_stride, NULL, NULL, NULL};
    rows_parallel_for(rows, k * 2, rows_fp16, &job);
}

void ane_gemv_fp16(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k) {
    ane_gemv_fp16_strided(y, w, k, x, rows, k);
}

/* y[first..n) = x^T M's columns, element by element: the one order every vecmat kernel
 * below keeps (per column, rows 0..k-1, one fused multiply-add each), so an fp16 matrix
 * gives the very sums of its values converted to fp32, and a column's sum does not depend on
 * how many columns are computed. AT(i, j) reads M[i, j] as fp32 (rows ld elements apart). */
#define VECMAT_COLUMNS(y, x, k, first, n, AT)                                                      \
    for (int64_t j_ = (first); j_ < (n); j_++) (y)[j_] = 0.0f;                                      \
    for (int64_t i_ = 0; i_ < (k); i_++)                                                            \
        for (int64_t j_ = (first); j_ < (n); j_++) (y)[j_] = fmaf((x)[i_], AT(i_, j_), (y)[j_]);

#if defined(__x86_64__)
/* AVX2: 64 columns of y held in eight registers over all k rows (a decode step's head is
 * 64-256 columns wide), so y is written once per tile instead of loaded and stored per row.
 * LOAD8(i, j) loads M[i, j .. j + 7] as fp32; the fp32 and fp16 kernels differ only there. */
#define VECMAT_AVX2(y, x, k, n, LOAD8, AT)                                                          \
    int64_t j = 0;                                                                                  \
    for (; j + 64 <= (n); j += 64) {                                                                \
        __m256 a[8];                                                                                \
        for (int t = 0; t < 8; t++) a[t] = _mm256_setzero_ps();                                     \
        for (int64_t i = 0; i < (k); i++) {                                                         \
            __m256 weight = _mm256_broadcast_ss((x) + i);                                           \
            for (int t = 0; t < 8; t++) a[t] = _mm256_fmadd_ps(weight, LOAD8(i, j + 8 * t), a[t]);  \
        }                                                                                           \
        for (int t = 0; t < 8; t++) _mm256_storeu_ps((y) + j + 8 * t, a[t]);                        \
    }                                                                                               \
    for (; j + 8 <= (n); j += 8) {                                                                  \
        __m256 a = _mm256_setzero_ps();                                                             \
        for (int64_t i = 0; i < (k); i++) a = _mm256_fmadd_ps(_mm256_broadcast_ss((x) + i), LOAD8(i, j), a); \
        _mm256_storeu_ps((y) + j, a);                                                               \
    }                                                                                               \
    VECMAT_COLUMNS(y, x, k, j, n, AT)

__attribute__((target("avx2,fma"))) static void vecmat_avx2(float *y, const float *x, const float *m, int64_t ld, int64_t k,
                                                             int64_t n) {
#define LOAD8(i, j) _mm256_loadu_ps(m + (i) * ld + (j))
#define AT(i, j) m[(i) * ld + (j)]
    VECMAT_AVX2(y, x, k, n, LOAD8, AT)
#undef LOAD8
#undef AT
}

__attribute__((target("avx2,fma,f16c"))) static void vecmat_fp16_avx2(float *y, const float *x, const uint16_t *m, int64_t ld,
                                                                     int64_t k, int64_t n) {
#define LOAD8(i, j) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(m + (i) * ld + (j))))
#define AT(i, j) ane_fp16_to_fp32(m[(i) * ld + (j)])
    VECMAT_AVX2(y, x, k, n, LOAD8, AT)
#undef LOAD8
#undef AT
}

/* AVX-512, for a decode step's products over a cache, which it reads from memory (the last
 * step read that layer's cache a whole token of weights ago): such a product is bound by the
 * memory's latency, not its arithmetic. So each panel of up to 128 columns is one pass down
 * the rows, in order (a row's columns at once, eight registers), with the row
 * VECMAT_PREFETCH_ROWS ahead asked for: [128, 128 of 256] fp16 from memory 3.1-3.5 -> ~1.8 us
 * (a throwaway driver; from cache the same ~0.4 us); decodes at 1,000 positions (Stories110M
 * int4) 0.96x the time, at ~70 within noise. Narrower panels (64, then 16 columns) take what
 * is left; each column's sum is the chain VECMAT_COLUMNS computes. */
enum { VECMAT_PREFETCH_ROWS = 16 };

#define VECMAT_AVX512_PANEL(y, x, k, j, VECTORS, LOAD16, ROW_ADDRESS, ROW_BYTES)                    \
    {                                                                                               \
        __m512 a[VECTORS];                                                                          \
        for (int t = 0; t < (VECTORS); t++) a[t] = _mm512_setzero_ps();                             \
        for (int64_t i = 0; i < (k); i++) {                                                         \
            if (i + VECMAT_PREFETCH_ROWS < (k))                                                     \
                for (int b = 0; b < (ROW_BYTES); b += 64)                                           \
                    _mm_prefetch((const char *)ROW_ADDRESS(i + VECMAT_PREFETCH_ROWS, j) + b, _MM_HINT_T0); \
            __m512 weight = _mm512_set1_ps((x)[i]);                                                 \
            for (int t = 0; t < (VECTORS); t++) a[t] = _mm512_fmadd_ps(weight, LOAD16(i, (j) + 16 * t), a[t]); \
        }                                                                                           \
        for (int t = 0; t < (VECTORS); t++) _mm512_storeu_ps((y) + (j) + 16 * t, a[t]);             \
    }

#define VECMAT_AVX512(y, x, k, n, LOAD16, AT, ROW_ADDRESS, ELEMENT_BYTES)                           \
    int64_t j = 0;                                                                                  \
    for (; j + 128 <= (n); j += 128) VECMAT_AVX512_PANEL(y, x, k, j, 8, LOAD16, ROW_ADDRESS, 128 * (ELEMENT_BYTES)) \
    for (; j + 64 <= (n); j += 64) VECMAT_AVX512_PANEL(y, x, k, j, 4, LOAD16, ROW_ADDRESS, 64 * (ELEMENT_BYTES))     \
    for (; j + 16 <= (n); j += 16) VECMAT_AVX512_PANEL(y, x, k, j, 1, LOAD16, ROW_ADDRESS, 16 * (ELEMENT_BYTES))     \
    VECMAT_COLUMNS(y, x, k, j, n, AT)

AVX512 static void vecmat_avx512(float *y, const float *x, const float *m, int64_t ld, int64_t k, int64_t n) {
#define ROW_ADDRESS(i, j) (m + (i) * ld + (j))
#define LOAD16(i, j) _mm512_loadu_ps(ROW_ADDRESS(i, j))
#define AT(i, j) m[(i) * ld + (j)]
    VECMAT_AVX512(y, x, k, n, LOAD16, AT, ROW_ADDRESS, 4)
#undef ROW_ADDRESS
#undef LOAD16
#undef AT
}

AVX512 static void vecmat_fp16_avx512(float *y, const float *x, const uint16_t *m, int64_t ld, int64_t k, int64_t n) {
#define ROW_ADDRESS(i, j) (m + (i) * ld + (j))
#define LOAD16(i, j) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)ROW_ADDRESS(i, j)))
#define AT(i, j) ane_fp16_to_fp32(m[(i) * ld + (j)])
    VECMAT_AVX512(y, x, k, n, LOAD16, AT, ROW_ADDRESS, 2)
#undef ROW_ADDRESS
#undef LOAD16
#undef AT
}
#undef VECMAT_AVX512
#undef VECMAT_AVX512_PANEL
#endif

void ane_vecmat_fp32(float *y, const float *x, const float *m, int64_t ld, int64_t k, int64_t n) {
#if defined(__x86_64__)
    if (ane_cpu_has_avx512f()) {
        vecmat_avx512(y, x, m, ld, k, n);
        return;
    }
    if (ane_cpu_has_avx2_fma_f16c()) {
        vecmat_avx2(y, x, m, ld, k, n);
        return;
    }
#endif
#define AT(i, j) m[(i) * ld + (j)]
    VECMAT_COLUMNS(y, x, k, 0, n, AT)
#undef AT
}

void ane_vecmat_fp16(float *y, const float *x, const uint16_t *m, int64_t ld, int64_t k, int64_t n) {
#if defined(__x86_64__)
    if (ane_cpu_has_avx512f()) {
        vecmat_fp16_avx512(y, x, m, ld, k, n);
        return;
    }
    if (ane_cpu_has_avx2_fma_f16c()) {
        vecmat_fp16_avx2(y, x, m, ld, k, n);
        return;
    }
#endif
#define AT(i, j) ane_fp16_to_fp32(m[(i) * ld + (j)])
    VECMAT_COLUMNS(y, x, k, 0, n, AT)
#undef AT
}

void ane_gemv_fp32_strided(float *y, const float *w, int64_t row_stride, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k, row_stride, NULL, NULL, NULL};
    rows_parallel_for(rows, k * 4, rows_fp32, &job);
}

void ane_gemv_fp32(float *y, const float *w, const float *x, int64_t rows, int64_t k) {
    ane_gemv_fp32_strided(y, w, k, x, rows, k);
}

/* ------------------------------------------------ int8 activations (integer dot products) */

/* x quantized per block of 32 consecutive elements: scale = max |x| / 127, code =
 * round(x / scale). The vector loop covers whole 64-element chunks and feeds VNNI's
 * unsigned-by-signed byte products the weight codes plus 128; each 4-element lane starts
 * from -128 times its activation codes' sum, so every lane's integer sum is exact. */
#define Q8_BLOCK 32
#define Q8_CHUNK 64

/* An activation vector quantized in blocks of 32 for integer products: int8 codes (the int8
 * activations, here) or int16 codes (below), the same block scales; the lane arrays of the
 * VNNI kernels with int8 codes only. */
typedef struct code_vector {
    int64_t k, chunked;  /* elements; those in whole 64-element chunks */
    int8_t *codes8;      /* [k] (int8 activations) */
    int16_t *codes16;    /* [k] (int16 activations) */
    float *block_scales; /* [ceil(k / 32)]: NaN where the block holds a NaN or inf */
    float *lane_scales;  /* [chunked / 4]: the scale of each 4-element lane's block (VNNI only) */
    int32_t *lane_bias;  /* [chunked / 4]: -128 x the lane's code sum (VNNI only) */
    int8_t *split8;      /* [chunked]: per 64-element chunk, the codes of its even elements then of
                            its odd ones, the order 4-bit rows unpack in (AVX2's lookup; else NULL) */
    int16_t *split16;    /* [chunked]: the int16 codes in the order AVX2's 4-bit products read them
                            (q16_split_chunk; else NULL) */
    float *chunk_scales; /* [chunked / 8]: per 64-element chunk, its first block's scale four times,
                            then its second's: the lanes of 8 elements of the 4-bit products (else NULL) */
    int32_t *bias8;      /* [chunked / 8]: -128 x the codes' sum of each 8 elements (VNNI's 4-bit
                            products; else NULL) */
} code_vector;

static size_t q8_bytes(int64_t k) {
    int64_t lanes = k / Q8_CHUNK * Q8_CHUNK / 4, blocks = (k + Q8_BLOCK - 1) / Q8_BLOCK;
    return (size_t)(lanes * 8 + blocks * 4 + 2 * ((k + 3) / 4 * 4) + k + 64); /* codes8, split8, chunk_scales, bias8 */
}

/* Per 64-element chunk, its two blocks' scales as the lanes of AVX2's 4-bit products take them. */
static void fill_chunk_scales(code_vector *v) {
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK)
        for (int lane = 0; lane < 8; lane++) v->chunk_scales[j / 8 + lane] = v->block_scales[j / Q8_BLOCK + lane / 4];
}

#if defined(__x86_64__)
/* 32 contiguous values into four registers, and their largest magnitude; returns 0 when one
 * of them is a NaN or an inf. */
__attribute__((target("avx2"))) static inline int load_block_avx2(const float *x, __m256 v[4], float *top) {
    __m256 largest = _mm256_setzero_ps(), not_finite = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        __m256 a = abs_ps(v[i]);
        not_finite = _mm256_or_ps(not_finite, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
        largest = _mm256_max_ps(largest, a);
    }
    if (_mm256_movemask_ps(not_finite)) return 0;
    *top = horizontal_max_abs(largest);
    return 1;
}

/* One whole block of contiguous x: the same scale and codes as the scalar loop below
 * (cvtps rounds to nearest even under the default rounding mode, as lrintf does; the packs
 * cannot saturate, |x| x 127 / max |x| <= 127). Returns 0 when the block holds a NaN or inf. */
__attribute__((target("avx2"))) static int q8_block_quantize_avx2(const float *x, int8_t *codes, float *scale) {
    __m256 v[4];
    float top;
    if (!load_block_avx2(x, v, &top)) return 0;
    *scale = top / 127.0f;
    __m256 inverse = _mm256_set1_ps(top > 0.0f ? 127.0f / top : 0.0f);
    __m256i c[4];
    for (int i = 0; i < 4; i++) c[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse));
    __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    /* the in-lane packs leave 4-byte groups in the order 0 2 4 6 1 3 5 7 */
    _mm256_storeu_si256((__m256i *)codes, _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return 1;
}
#endif

/* Whether the lane arrays are read: by the VNNI kernels only. */
static int q8_lanes_read(void) {
#if defined(__x86_64__)
    return ane_cpu_has_avx512_vnni();
#else
    return 0;
#endif
}

#if defined(__x86_64__)
/* 64 codes -> the 32 of even elements, then the 32 of odd ones. */
__attribute__((target("avx2"))) static void q8_split_chunk_avx2(const int8_t *codes, int8_t *split) {
    const __m256i apart = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                           0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    /* per 16 codes: evens then odds; then per 32: evens 0-15, evens 16-31 | odds 0-15, odds 16-31 */
    __m256i first = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)codes), apart),
                                             _MM_SHUFFLE(3, 1, 2, 0));
    __m256i second = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(codes + 32)), apart),
                                              _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256((__m256i *)split, _mm256_permute2x128_si256(first, second, 0x20));
    _mm256_storeu_si256((__m256i *)(split + 32), _mm256_permute2x128_si256(first, second, 0x31));
}
#endif

/* VNNI's 4-bit products take 128 elements at a time: the codes of the even elements, then of
 * the odd ones, the order their packed indices unpack in (q8_lut4_vnni). */
enum { Q8_LUT4_VNNI_CHUNK = 128 };

/* Quantizes x [k] (element j at x[j * stride]) into v, laid out in memory (q8_bytes(k)); the
 * lane arrays and split8 only where a kernel reads them (for_lut4: the product's weights are
 * 4-bit rows, whose kernels read split8, chunk_scales and with VNNI bias8; else the lanes). */
static void q8_quantize(code_vector *v, void *memory, const float *x, int64_t stride, int64_t k, int for_lut4) {
    v->k = k;
    v->chunked = k / Q8_CHUNK * Q8_CHUNK;
    v->lane_scales = memory;
    v->lane_bias = (int32_t *)(v->lane_scales + v->chunked / 4);
    v->block_scales = (float *)(v->lane_bias + v->chunked / 4);
    v->codes8 = (int8_t *)(v->block_scales + (k + Q8_BLOCK - 1) / Q8_BLOCK);
    v->split8 = NULL, v->split16 = NULL, v->chunk_scales = NULL, v->bias8 = NULL;
#if defined(__x86_64__)
    int vector_blocks = stride == 1 && ane_cpu_has_avx2_fma_f16c();
#endif
    for (int64_t first = 0, b = 0; first < k; first += Q8_BLOCK, b++) {
        int64_t last = first + Q8_BLOCK < k ? first + Q8_BLOCK : k;
#if defined(__x86_64__)
        if (vector_blocks && last - first == Q8_BLOCK && q8_block_quantize_avx2(x + first, v->codes8 + first, &v->block_scales[b]))
            continue;
#endif
        float largest = 0.0f;
        int not_finite = 0;
        for (int64_t j = first; j < last; j++) {
            float a = fabsf(x[j * stride]);
            not_finite |= !isfinite(a);
            largest = a > largest ? a : largest;
        }
        float inverse = largest > 0.0f && !not_finite ? 127.0f / largest : 0.0f;
        v->block_scales[b] = not_finite ? NAN : largest / 127.0f; /* a NaN or inf makes the products NaN */
        for (int64_t j = first; j < last; j++) v->codes8[j] = (int8_t)lrintf(x[j * stride] * inverse);
    }
#if defined(__x86_64__)
    if (for_lut4 && ane_cpu_has_avx2_fma_f16c()) {
        v->split8 = v->codes8 + k;
        v->chunk_scales = (float *)(v->codes8 + 2 * ((k + 3) / 4 * 4)); /* past split8, 4-byte aligned */
        fill_chunk_scales(v);
        if (!q8_lanes_read()) {
            for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) q8_split_chunk_avx2(v->codes8 + j, v->split8 + j);
            return;
        }
        v->bias8 = (int32_t *)(v->chunk_scales + v->chunked / 8);
        int64_t whole = k / Q8_LUT4_VNNI_CHUNK * Q8_LUT4_VNNI_CHUNK;
        for (int64_t j = 0; j < whole; j += Q8_LUT4_VNNI_CHUNK)
            for (int i = 0; i < Q8_LUT4_VNNI_CHUNK / 2; i++) {
                v->split8[j + i] = v->codes8[j + 2 * i];
                v->split8[j + Q8_LUT4_VNNI_CHUNK / 2 + i] = v->codes8[j + 2 * i + 1];
            }
        for (int64_t lane = 0; lane < whole / 8; lane++) {
            int32_t sum = 0;
            for (int i = 0; i < 8; i++) sum += v->codes8[8 * lane + i];
            v->bias8[lane] = -128 * sum;
        }
        return;
    }
#endif
    if (!q8_lanes_read()) return;
    for (int64_t lane = 0; lane < v->chunked / 4; lane++) {
        const int8_t *c = v->codes8 + lane * 4;
        v->lane_scales[lane] = v->block_scales[lane * 4 / Q8_BLOCK];
        v->lane_bias[lane] = -128 * (c[0] + c[1] + c[2] + c[3]);
    }
}

/* A row's palette as integer entries times one scale, quantized like an activation block:
 * int8 entries for int8 activations, 15-bit ones for int16 activations. A weight's rows keep
 * theirs in one array (ane_palette_codes), the scale first in both. */
typedef struct palette8 {
    float scale;
    int8_t entries[ANE_LUT4_ENTRIES];
} palette8;

typedef struct palette16 {
    float scale;
    int16_t entries[ANE_LUT4_ENTRIES];
} palette16;

static void q8_palette_scalar(palette8 *p, const float *palette) {
    float largest = 0.0f;
    for (int i = 0; i < ANE_LUT4_ENTRIES; i++) largest = fabsf(palette[i]) > largest ? fabsf(palette[i]) : largest;
    float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    p->scale = largest / 127.0f;
    for (int i = 0; i < ANE_LUT4_ENTRIES; i++) p->entries[i] = (int8_t)lrintf(palette[i] * inverse);
}

/* Blocks from element `from` (a chunk boundary) on: sum over blocks of scale x integer sum. */
static float q8_int8_from(const int8_t *q, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q8_BLOCK) {
        int64_t last = first + Q8_BLOCK < v->k ? first + Q8_BLOCK : v->k;
        int32_t sum = 0;
        for (int64_t j = first; j < last; j++) sum += q[j] * v->codes8[j];
        total += v->block_scales[first / Q8_BLOCK] * (float)sum;
    }
    return total;
}

static float q8_lut4_from(const uint8_t *packed, const palette8 *p, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q8_BLOCK) {
        int64_t last = first + Q8_BLOCK < v->k ? first + Q8_BLOCK : v->k;
        int32_t sum = 0;
        for (int64_t j = first; j < last; j++) sum += p->entries[(packed[j / 2] >> (4 * (j & 1))) & 15u] * v->codes8[j];
        total += v->block_scales[first / Q8_BLOCK] * (float)sum;
    }
    return total;
}

static float q8_int8_scalar(const int8_t *q, const code_vector *v) { return q8_int8_from(q, v, 0); }
static float q8_lut4_scalar(const uint8_t *packed, const void *palette, const code_vector *v) {
    return q8_lut4_from(packed, palette, v, 0);
}

#if defined(__x86_64__)
/* AVX2 (no VNNI): a block of 32 products at a time. vpmaddubsw multiplies unsigned by signed
 * bytes, so the weight codes' signs move onto the activation codes (|w| x sign(w) x) and each
 * pair sums to a word (at most 2 x 128 x 127, no saturation); vpmaddwd adds word pairs into
 * eight exact 4-product lane sums, which take the block's scale. */
#define Q8_AVX2 __attribute__((target("avx2,fma")))

Q8_AVX2 static inline __m256 q8_block_avx2(__m256 sum, __m256i weights, const code_vector *v, int64_t j) {
    __m256i codes = _mm256_loadu_si256((const __m256i *)(v->codes8 + j));
    __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(weights, weights), _mm256_sign_epi8(codes, weights));
    __m256i lanes = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(v->block_scales[j / Q8_BLOCK]), sum);
}

Q8_AVX2 static float q8_int8_avx2(const int8_t *q, const code_vector *v) {
    int64_t whole = v->k / Q8_BLOCK * Q8_BLOCK, j = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; j + 2 * Q8_BLOCK <= whole; j += 2 * Q8_BLOCK) {
        _mm_prefetch((const char *)(q + j + PREFETCH_BYTES), _MM_HINT_T0);
        a0 = q8_block_avx2(a0, _mm256_loadu_si256((const __m256i *)(q + j)), v, j);
        a1 = q8_block_avx2(a1, _mm256_loadu_si256((const __m256i *)(q + j + Q8_BLOCK)), v, j + Q8_BLOCK);
    }
    if (j < whole) a0 = q8_block_avx2(a0, _mm256_loadu_si256((const __m256i *)(q + j)), v, j), j += Q8_BLOCK;
    return horizontal_sum(_mm256_add_ps(a0, a1)) + q8_int8_from(q, v, j);
}

/* The palette as int8 entries times one scale (q8_palette_scalar's values: palettes are
 * finite, and cvtps rounds to nearest even as lrintf does). */
Q8_AVX2 static void q8_palette_avx2(palette8 *p, const float *palette) {
    __m256 low = _mm256_loadu_ps(palette), high = _mm256_loadu_ps(palette + 8);
    float largest = horizontal_max_abs(_mm256_max_ps(abs_ps(low), abs_ps(high)));
    __m256 inverse = _mm256_set1_ps(largest > 0.0f ? 127.0f / largest : 0.0f);
    p->scale = largest / 127.0f;
    __m256i words = _mm256_packs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(low, inverse)),
                                       _mm256_cvtps_epi32(_mm256_mul_ps(high, inverse))); /* 0-3 8-11 | 4-7 12-15 */
    __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
    _mm_storeu_si128((__m128i *)p->entries, _mm_shuffle_epi32(bytes, _MM_SHUFFLE(3, 1, 2, 0)));
}

/* 64 weights from 32 packed bytes: byte i holds element 2i's index in its low nibble and
 * element 2i + 1's in its high one, so the two nibble masks give the even and the odd
 * elements, looked up (vpshufb) in the palette's int8 entries; the activation codes come in
 * the same order (split8). Bytes 0-15 of either half are elements of the chunk's first block
 * of 32, bytes 16-31 of its second: each 32-bit lane sums 8 products of one block (exact,
 * |sum| <= 8 x 127 x 128), the lower four lanes take the first block's scale, the upper four
 * the second's (chunk_scales). */
Q8_AVX2 static inline __m256 q8_lut4_chunk_avx2(__m256 sum, const uint8_t *packed, __m256i table, const code_vector *v,
                                               int64_t j) {
    const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256i bytes = _mm256_loadu_si256((const __m256i *)packed);
    __m256i even = _mm256_shuffle_epi8(table, _mm256_and_si256(bytes, nibble));
    __m256i odd = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble));
    __m256i even_codes = _mm256_loadu_si256((const __m256i *)(v->split8 + j));
    __m256i odd_codes = _mm256_loadu_si256((const __m256i *)(v->split8 + j + 32));
    __m256i lanes = _mm256_add_epi32(
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(even, even), _mm256_sign_epi8(even_codes, even)), ones),
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(odd, odd), _mm256_sign_epi8(odd_codes, odd)), ones));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_loadu_ps(v->chunk_scales + j / 8), sum);
}

Q8_AVX2 static float q8_lut4_avx2(const uint8_t *packed, const void *palette, const code_vector *v) {
    const palette8 *p = palette;
    __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p->entries));
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * Q8_CHUNK <= v->chunked; j += 2 * Q8_CHUNK) {
        _mm_prefetch((const char *)(packed + j / 2 + PREFETCH_BYTES), _MM_HINT_T0);
        a0 = q8_lut4_chunk_avx2(a0, packed + j / 2, table, v, j);
        a1 = q8_lut4_chunk_avx2(a1, packed + (j + Q8_CHUNK) / 2, table, v, j + Q8_CHUNK);
    }
    if (j < v->chunked) a0 = q8_lut4_chunk_avx2(a0, packed + j / 2, table, v, j);
    return horizontal_sum(_mm256_add_ps(a0, a1)) + q8_lut4_from(packed, p, v, v->chunked);
}

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* The palette quantized in registers (the same operations as q8_palette_scalar: an exact
 * maximum, one multiply, round to nearest even). */
VNNI static void q8_palette_vnni(palette8 *p, const float *palette) {
    __m512 entries = _mm512_loadu_ps(palette);
    float largest = _mm512_reduce_max_ps(_mm512_abs_ps(entries));
    float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    p->scale = largest / 127.0f;
    _mm_storeu_si128((__m128i *)p->entries, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(entries, _mm512_set1_ps(inverse)))));
}

/* int8 rows, up to four at a time as the float kernels (rows_in_groups' quarters): a chunk's
 * activation codes, lane biases and lane scales are loaded once for all of them. A chunk's
 * 16 lane sums are integer and exact (VNNI's unsigned weights plus 128 against the signed
 * codes, from the lane's bias), then times their block scales; two accumulators a row,
 * alternate chunks, then the tail: a row's dot is the same in any group. dots[r] = row r (at
 * w + r row_bytes) times the codes of v, unscaled by the row, for count 1 or 4; the palette
 * arguments are the 4-bit kernel's (q8_lut4_vnni takes the same), unused here. */
VNNI static inline __attribute__((always_inline)) void q8_int8_vnni_inline(const char *w, int64_t row_bytes,
                                                                            const code_vector *v, float *dots, int count) {
    const char *rows[GEMV_GROUP];
    __m512 a0[GEMV_GROUP], a1[GEMV_GROUP];
    const __m512i plus128 = _mm512_set1_epi8((char)0x80);
    for (int r = 0; r < count; r++) {
        rows[r] = w + r * row_bytes;
        a0[r] = a1[r] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) {
        __m512i bias = _mm512_loadu_si512(v->lane_bias + j / 4), codes = _mm512_loadu_si512(v->codes8 + j);
        __m512 scales = _mm512_loadu_ps(v->lane_scales + j / 4);
        for (int r = 0; r < count; r++) {
            __m512i weights = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + j), plus128);
            __m512 lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, weights, codes));
            if ((j / Q8_CHUNK) % 2 == 0) a0[r] = _mm512_fmadd_ps(lanes, scales, a0[r]);
            else a1[r] = _mm512_fmadd_ps(lanes, scales, a1[r]);
        }
    }
    for (int r = 0; r < count; r++)
        dots[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r])) + q8_int8_from((const int8_t *)rows[r], v, v->chunked);
}

VNNI static void q8_int8_vnni(const void *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes,
                              const code_vector *v, float *dots, int count) {
    (void)palettes, (void)palette_bytes;
    if (count == GEMV_GROUP) q8_int8_vnni_inline(w, row_bytes, v, dots, GEMV_GROUP);
    else q8_int8_vnni_inline(w, row_bytes, v, dots, 1);
}

/* 4-bit rows, 128 weights a step: the 64 packed bytes' two nibble masks are the even and the
 * odd elements' indices, looked up (vpshufb) in the palette's entries plus 128, against the
 * codes in the same order (split8); lane L of both products holds elements 8L .. 8L + 7 of the
 * step, one block's, so two vpdpbusd from the 8 elements' bias (bias8) give each lane's exact
 * sum, which takes its block's scale (chunk_scales). Per 128 weights a row: 9 vector
 * operations, against 14 with the codes in element order (each index widened to its own
 * byte). Grouped as q8_int8_vnni (the same arguments); the elements after the whole steps in
 * scalar code (decode shapes have none: 768, 1024, 2048, 3072 are whole steps). */
VNNI static inline __attribute__((always_inline)) void q8_lut4_vnni_inline(
    const char *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes, const code_vector *v, float *dots,
    int count) {
    const char *rows[GEMV_GROUP];
    const palette8 *row_palettes[GEMV_GROUP];
    __m512i tables[GEMV_GROUP];
    __m512 a0[GEMV_GROUP], a1[GEMV_GROUP];
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (int r = 0; r < count; r++) {
        rows[r] = w + r * row_bytes;
        row_palettes[r] = (const palette8 *)(palettes + r * palette_bytes);
        tables[r] = _mm512_broadcast_i32x4(
            _mm_xor_si128(_mm_loadu_si128((const __m128i *)row_palettes[r]->entries), _mm_set1_epi8((char)0x80)));
        a0[r] = a1[r] = _mm512_setzero_ps();
    }
    int64_t whole = v->k / Q8_LUT4_VNNI_CHUNK * Q8_LUT4_VNNI_CHUNK, j = 0;
    for (; j < whole; j += Q8_LUT4_VNNI_CHUNK) {
        __m512i even_codes = _mm512_loadu_si512(v->split8 + j);
        __m512i odd_codes = _mm512_loadu_si512(v->split8 + j + Q8_LUT4_VNNI_CHUNK / 2);
        __m512i bias = _mm512_loadu_si512(v->bias8 + j / 8);
        __m512 scales = _mm512_loadu_ps(v->chunk_scales + j / 8);
        for (int r = 0; r < count; r++) {
            __m512i bytes = _mm512_loadu_si512(rows[r] + j / 2);
            __m512i even = _mm512_shuffle_epi8(tables[r], _mm512_and_si512(bytes, nibble));
            __m512i odd = _mm512_shuffle_epi8(tables[r], _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble));
            __m512i lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias, even, even_codes), odd, odd_codes);
            if ((j / Q8_LUT4_VNNI_CHUNK) % 2 == 0) a0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scales, a0[r]);
            else a1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scales, a1[r]);
        }
    }
    for (int r = 0; r < count; r++)
        dots[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r])) + q8_lut4_from((const uint8_t *)rows[r], row_palettes[r], v, whole);
}

VNNI static void q8_lut4_vnni(const void *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes,
                              const code_vector *v, float *dots, int count) {
    if (count == GEMV_GROUP) q8_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, GEMV_GROUP);
    else q8_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, 1);
}
#endif

#if defined(__x86_64__)
/* The AVX-512 chunks of x_split: each 32 elements of x permuted by two two-source permutes
 * (the same elements as the scalar gather, a decode step's product wrote them one by one). */
AVX512 static void split_avx512(float *x_split, const float *x, int64_t whole, const int slot_element[LUT4_AVX512_CHUNK]) {
    __m512i first = _mm512_loadu_si512(slot_element), second = _mm512_loadu_si512(slot_element + 16);
    for (int64_t c = 0; c < whole; c += LUT4_AVX512_CHUNK) {
        __m512 low = _mm512_loadu_ps(x + c), high = _mm512_loadu_ps(x + c + 16);
        _mm512_storeu_ps(x_split + c, _mm512_permutex2var_ps(low, first, high));
        _mm512_storeu_ps(x_split + c + 16, _mm512_permutex2var_ps(low, second, high));
    }
}
#endif

/* x_split [k] (memory for k floats, or NULL): x's whole chunks in the order the 4-bit kernel
 * reads them (bf16 parts in AVX512_BF16's 128-element chunks, AVX-512's 32-element chunks, else
 * AVX2's two-byte kernel's 64), the tail as it is. Returns x_split, or NULL where no kernel
 * reads it (or x_split is NULL). */
static const float *split_for_lut4(float *x_split, const float *x, int64_t k) {
#if defined(__x86_64__)
    if (ane_cpu_has_avx512_bf16()) {
        if (!x_split || k < LUT4_BF16_CHUNK) return NULL;
        split_bf16(x_split, x, k);
        return x_split;
    }
    int chunk = ane_cpu_has_avx512f() ? LUT4_AVX512_CHUNK : LUT4_SPLIT_CHUNK;
    int (*slot)(int) = ane_cpu_has_avx512f() ? lut4_avx512_slot : lut4_split_slot;
    if (!x_split || !ane_cpu_has_avx2_fma_f16c() || k < chunk) return NULL;
    int64_t whole = k / chunk * chunk;
    int slot_element[LUT4_SPLIT_CHUNK];
    for (int s = 0; s < chunk; s++) slot_element[s] = slot(s);
    if (ane_cpu_has_avx512f()) split_avx512(x_split, x, whole, slot_element);
    else
        for (int64_t c = 0; c < whole; c += chunk)
            for (int s = 0; s < chunk; s++) x_split[c + s] = x[c + slot_element[s]];
    memcpy(x_split + whole, x + whole, (size_t)(k - whole) * sizeof *x_split);
    return x_split;
#else
    (void)x_split, (void)x, (void)k;
    return NULL;
#endif
}

/* ane_gemv_parts: the parts' rows one after another as one loop; a share that crosses from one
 * part into the next runs as a share of each (its rows' results are the part's own loop's). */
typedef struct parts_job {
    gemv_job parts[ANE_GEMV_MAX_PARTS];
    int64_t first_row[ANE_GEMV_MAX_PARTS + 1]; /* part p: rows first_row[p] .. first_row[p + 1] - 1 of the loop */
    int count;
    void (*rows)(void *job, int64_t first, int64_t last); /* rows_fp16, rows_int8 or rows_lut4 */
} parts_job;

static void rows_of_parts(void *context, int64_t first, int64_t last) {
    parts_job *job = context;
    for (int p = 0; p < job->count; p++) {
        int64_t from = first > job->first_row[p] ? first : job->first_row[p];
        int64_t to = last < job->first_row[p + 1] ? last : job->first_row[p + 1];
        if (from < to) job->rows(&job->parts[p], from - job->first_row[p], to - job->first_row[p]);
    }
}

void ane_gemv_parts(const ane_gemv_part *parts, int count, const float *x, int64_t k) {
    for (; count > ANE_GEMV_MAX_PARTS; parts += ANE_GEMV_MAX_PARTS, count -= ANE_GEMV_MAX_PARTS)
        ane_gemv_parts(parts, ANE_GEMV_MAX_PARTS, x, k);
    if (count <= 0) return;
    ane_weight_encoding encoding = parts[0].encoding;
    parts_job job = {.count = count,
                     .rows = encoding == ANE_ENCODING_INT8 ? rows_int8 : encoding == ANE_ENCODING_LUT4 ? rows_lut4 : rows_fp16};
    float stack[4096];
    float *x_split = NULL; /* 4-bit rows: x split once for every part (split_for_lut4) */
    if (encoding == ANE_ENCODING_LUT4)
        x_split = k <= (int64_t)(sizeof stack / sizeof *stack) ? stack : malloc((size_t)k * sizeof *x_split);
    const float *split = encoding == ANE_ENCODING_LUT4 ? split_for_lut4(x_split, x, k) : NULL;
    for (int p = 0; p < count; p++) {
        job.parts[p] = (gemv_job){parts[p].y, parts[p].data, x, k, k, parts[p].table, split, parts[p].words};
        job.first_row[p + 1] = job.first_row[p] + parts[p].rows;
    }
    int64_t row_bytes = encoding == ANE_ENCODING_INT8 ? k : encoding == ANE_ENCODING_LUT4 ? k / 2 : 2 * k;
    rows_parallel_for(job.first_row[count], row_bytes, rows_of_parts, &job);
    if (x_split != stack) free(x_split);
}

void ane_gemv_encoded(float *y, ane_weight_encoding encoding, const void *data, const float *table, const float *x,
                      int64_t rows, int64_t k) {
    ane_gemv_part alone = {y, encoding, data, table, rows, NULL};
    ane_gemv_parts(&alone, 1, x, k);
}

/* y [rows, columns] = dequantized W x: the panel kernel (gemm.h), or on CPUs without one a block
 * of rows decoded exactly at a time and BLAS's product. */
static ane_status decoded_product(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                                  const float *x, int64_t rows, int64_t k, int64_t columns, ane_error *err) {
    if (ane_gemm_weights_available()) { /* decoded a panel at a time (gemm.h) */
        ane_weight_rows w = {encoding, 0, data, table, 0, 0};
        ane_gemm_weights(y, &w, x, rows, k, columns);
        return ANE_OK;
    }
    int64_t block = ((int64_t)1 << 18) / (k > 0 ? k : 1); /* rows decoded at a time: ~1 MB of fp32 */
    block = block < 1 ? 1 : block > rows ? rows : block;
    float *decoded = malloc((size_t)(block * k) * sizeof *decoded + 1);
    if (!decoded) return ane_fail(err, ANE_ERR_NOMEM, "out of memory multiplying a quantized weight");
    for (int64_t row = 0; row < rows; row += block) {
        int64_t count = rows - row < block ? rows - row : block;
        ane_dequantize_rows(encoding, data, table, k, row, count, decoded);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)count, (int)columns, (int)k, 1.0f, decoded, (int)k, x,
                    (int)columns, 0.0f, y + row * columns, (int)columns);
    }
    free(decoded);
    return ANE_OK;
}

/* ------------------------------------------------ int16 activations (integer dot products) */

/* x quantized per block of 32 consecutive elements to 16-bit codes: scale = max |x| / 32767,
 * code = round(x / scale); a 4-bit row's palette to 15-bit entries the same way (max |p| /
 * 16383). A block's products are exact 32-bit integer sums (4 products of at most 16383 x
 * 32767 fit in an int32), so only the rounding of x (at most 1/65534 of its block's largest)
 * and of the palette separates the result from the dequantized W times x. */
#define Q16_BLOCK 32
_Static_assert(Q16_BLOCK == Q8_BLOCK, "the BLAS path of integer activations reads one block size");
#define Q16_LEVELS 32767
#define Q16_PALETTE_LEVELS 16383
enum { Q16_LUT4_VNNI_CHUNK = 128 }; /* elements a step of q16_lut4_vnni */

/* block scales, codes16, split16, chunk_scales */
static size_t q16_bytes(int64_t k) { return (size_t)(((k + Q16_BLOCK - 1) / Q16_BLOCK) * 4 + k * 4 + k / 2 + 64); }

/* The scale and codes of one block of values (element j at x[j * stride]), `levels` the
 * largest code: the one definition the int16 kernels and the BLAS path below both use. */
static float block_codes(const float *x, int64_t stride, int64_t count, float levels, int16_t *codes) {
    float largest = 0.0f;
    int not_finite = 0;
    for (int64_t j = 0; j < count; j++) {
        float a = fabsf(x[j * stride]);
        not_finite |= !isfinite(a);
        largest = a > largest ? a : largest;
    }
    float inverse = largest > 0.0f && !not_finite ? levels / largest : 0.0f;
    for (int64_t j = 0; j < count; j++) codes[j] = (int16_t)lrintf(x[j * stride] * inverse);
    return not_finite ? NAN : largest / levels; /* a NaN or inf makes the block's products NaN */
}

#if defined(__x86_64__)
/* One whole block of contiguous x: block_codes' scale and codes (cvtps rounds to nearest even
 * as lrintf does; the packs cannot saturate). Returns 0 when the block holds a NaN or inf. */
__attribute__((target("avx2"))) static int q16_block_quantize_avx2(const float *x, int16_t *codes, float *scale) {
    __m256 v[4];
    float top;
    if (!load_block_avx2(x, v, &top)) return 0;
    *scale = top / (float)Q16_LEVELS;
    __m256 inverse = _mm256_set1_ps(top > 0.0f ? (float)Q16_LEVELS / top : 0.0f);
    for (int i = 0; i < 4; i += 2) { /* the in-lane pack leaves 4-element groups in the order 0 2 1 3 */
        __m256i words = _mm256_packs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse)),
                                           _mm256_cvtps_epi32(_mm256_mul_ps(v[i + 1], inverse)));
        _mm256_storeu_si256((__m256i *)(codes + 8 * i), _mm256_permute4x64_epi64(words, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    return 1;
}
#endif

/* 64 codes in the order q16_lut4_chunk_avx2's word products take them: four groups of 16,
 * (even elements of 0-15, 32-47), (odd ones), (even of 16-31, 48-63), (odd ones). */
static void q16_split_chunk(const int16_t *codes, int16_t *split) {
    for (int group = 0; group < 4; group++) {
        int odd = group & 1, base = group / 2 * 16;
        for (int i = 0; i < 8; i++) {
            split[group * 16 + i] = codes[base + 2 * i + odd];           /* lane 0: the first block */
            split[group * 16 + 8 + i] = codes[32 + base + 2 * i + odd];  /* lane 1: the second */
        }
    }
}

/* Quantizes x as q8_quantize does, to int16 codes; the split order and chunk scales for the
 * 4-bit products on AVX2 (for_lut4). */
static void q16_quantize(code_vector *v, void *memory, const float *x, int64_t stride, int64_t k, int for_lut4) {
    v->k = k;
    v->chunked = k / Q8_CHUNK * Q8_CHUNK;
    v->block_scales = memory;
    v->codes16 = (int16_t *)(v->block_scales + (k + Q16_BLOCK - 1) / Q16_BLOCK);
    v->split16 = NULL, v->chunk_scales = NULL;
#if defined(__x86_64__)
    int vector_blocks = stride == 1 && ane_cpu_has_avx2_fma_f16c();
#endif
    for (int64_t first = 0, b = 0; first < k; first += Q16_BLOCK, b++) {
        int64_t count = k - first < Q16_BLOCK ? k - first : Q16_BLOCK;
#if defined(__x86_64__)
        if (vector_blocks && count == Q16_BLOCK && q16_block_quantize_avx2(x + first, v->codes16 + first, &v->block_scales[b]))
            continue;
#endif
        v->block_scales[b] = block_codes(x + first * stride, stride, count, (float)Q16_LEVELS, v->codes16 + first);
    }
#if defined(__x86_64__)
    if (for_lut4 && ane_cpu_has_avx2_fma_f16c()) {
        v->split16 = v->codes16 + k;
        v->chunk_scales = (float *)(v->split16 + (k + 1) / 2 * 2); /* 4-byte aligned */
        fill_chunk_scales(v);
        if (q8_lanes_read()) { /* q16_lut4_vnni's order: per 128 elements, element 4 p + s in slot 32 s + p */
            for (int64_t j = 0; j + Q16_LUT4_VNNI_CHUNK <= k; j += Q16_LUT4_VNNI_CHUNK)
                for (int slot = 0; slot < Q16_LUT4_VNNI_CHUNK; slot++)
                    v->split16[j + slot] = v->codes16[j + 4 * (slot % 32) + slot / 32];
            return;
        }
        for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) q16_split_chunk(v->codes16 + j, v->split16 + j);
    }
#else
    (void)for_lut4;
#endif
}

static void q16_palette_scalar(palette16 *p, const float *palette) {
    p->scale = block_codes(palette, 1, ANE_LUT4_ENTRIES, (float)Q16_PALETTE_LEVELS, p->entries);
}

/* sum over blocks of scale x exact integer sum, from element `from` (a block boundary) on;
 * weight(j) is the integer weight of element j */
static float q16_int8_from(const int8_t *q, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q16_BLOCK) {
        int64_t last = first + Q16_BLOCK < v->k ? first + Q16_BLOCK : v->k, sum = 0;
        for (int64_t j = first; j < last; j++) sum += (int32_t)q[j] * v->codes16[j];
        total += v->block_scales[first / Q16_BLOCK] * (float)sum;
    }
    return total;
}

static float q16_lut4_from(const uint8_t *packed, const palette16 *p, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q16_BLOCK) {
        int64_t last = first + Q16_BLOCK < v->k ? first + Q16_BLOCK : v->k, sum = 0;
        for (int64_t j = first; j < last; j++) sum += (int32_t)p->entries[(packed[j / 2] >> (4 * (j & 1))) & 15u] * v->codes16[j];
        total += v->block_scales[first / Q16_BLOCK] * (float)sum;
    }
    return total;
}

#if defined(__x86_64__)
/* A block's 32 integer weights (two registers of 16 words, elements in order) times its
 * codes: vpmaddwd sums word pairs, the two halves add into 8 exact lane sums, which take
 * the block's scale. */
Q8_AVX2 static inline __m256 q16_block_avx2(__m256 sum, __m256i first16, __m256i second16, const code_vector *v, int64_t j) {
    __m256i lanes = _mm256_add_epi32(_mm256_madd_epi16(first16, _mm256_loadu_si256((const __m256i *)(v->codes16 + j))),
                                     _mm256_madd_epi16(second16, _mm256_loadu_si256((const __m256i *)(v->codes16 + j + 16))));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(v->block_scales[j / Q16_BLOCK]), sum);
}

Q8_AVX2 static float q16_int8_avx2(const int8_t *q, const code_vector *v) {
    int64_t whole = v->k / Q16_BLOCK * Q16_BLOCK, j = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
#define Q16_INT8_BLOCK(sum, at)                                                                                         \
    q16_block_avx2(sum, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + (at)))),                            \
                   _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + (at) + 16))), v, at)
    for (; j + 2 * Q16_BLOCK <= whole; j += 2 * Q16_BLOCK) {
        _mm_prefetch((const char *)(q + j + PREFETCH_BYTES), _MM_HINT_T0);
        a0 = Q16_INT8_BLOCK(a0, j);
        a1 = Q16_INT8_BLOCK(a1, j + Q16_BLOCK);
    }
    if (j < whole) a0 = Q16_INT8_BLOCK(a0, j), j += Q16_BLOCK;
#undef Q16_INT8_BLOCK
    return horizontal_sum(_mm256_add_ps(a0, a1)) + q16_int8_from(q, v, j);
}

/* 64 weights from 32 packed bytes (as q8_lut4_chunk_avx2): the even and the odd elements'
 * indices look up the entries' low and high bytes, and interleaving those gives words: per
 * 128-bit lane (lane 0 the chunk's first block, lane 1 its second), the even elements of the
 * lane's first 16, the odd ones, the even of its second 16, the odd ones; split16 holds the
 * codes in that order. Each 32-bit lane of `first` and `second` sums 4 exact products (at most
 * 4 x 16383 x 32767 < 2^31); both become floats and take their block's scale. */
Q8_AVX2 static inline __m256 q16_lut4_chunk_avx2(__m256 sum, const uint8_t *packed, __m256i low_table, __m256i high_table,
                                                const code_vector *v, int64_t j) {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i *codes = (const __m256i *)(v->split16 + j);
    __m256i bytes = _mm256_loadu_si256((const __m256i *)packed);
    __m256i even = _mm256_and_si256(bytes, nibble), odd = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
    __m256i even_low = _mm256_shuffle_epi8(low_table, even), even_high = _mm256_shuffle_epi8(high_table, even);
    __m256i odd_low = _mm256_shuffle_epi8(low_table, odd), odd_high = _mm256_shuffle_epi8(high_table, odd);
    __m256i first = _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi8(even_low, even_high), _mm256_loadu_si256(codes)),
                                     _mm256_madd_epi16(_mm256_unpacklo_epi8(odd_low, odd_high), _mm256_loadu_si256(codes + 1)));
    __m256i second = _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpackhi_epi8(even_low, even_high), _mm256_loadu_si256(codes + 2)),
                                      _mm256_madd_epi16(_mm256_unpackhi_epi8(odd_low, odd_high), _mm256_loadu_si256(codes + 3)));
    __m256 lanes = _mm256_add_ps(_mm256_cvtepi32_ps(first), _mm256_cvtepi32_ps(second));
    return _mm256_fmadd_ps(lanes, _mm256_loadu_ps(v->chunk_scales + j / 8), sum);
}

/* The palette's 15-bit entries in registers: q16_palette_scalar's values (palettes are finite;
 * cvtps rounds to nearest even as lrintf does; the packs cannot saturate). */
Q8_AVX2 static void q16_palette_avx2(palette16 *p, const float *palette) {
    __m256 low = _mm256_loadu_ps(palette), high = _mm256_loadu_ps(palette + 8);
    float largest = horizontal_max_abs(_mm256_max_ps(abs_ps(low), abs_ps(high)));
    __m256 inverse = _mm256_set1_ps(largest > 0.0f ? (float)Q16_PALETTE_LEVELS / largest : 0.0f);
    p->scale = largest / (float)Q16_PALETTE_LEVELS;
    __m256i words = _mm256_packs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(low, inverse)),
                                       _mm256_cvtps_epi32(_mm256_mul_ps(high, inverse))); /* 0-3 8-11 | 4-7 12-15 */
    _mm256_storeu_si256((__m256i *)p->entries, _mm256_permute4x64_epi64(words, _MM_SHUFFLE(3, 1, 2, 0)));
}

Q8_AVX2 static float q16_lut4_avx2(const uint8_t *packed, const void *palette, const code_vector *v) {
    const palette16 *p = palette;
    const __m128i bytes_apart = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    __m128i low8 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p->entries), bytes_apart);       /* entries 0-7 */
    __m128i high8 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p->entries + 8)), bytes_apart); /* 8-15 */
    __m256i low_table = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(low8, high8));
    __m256i high_table = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(low8, high8));
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * Q8_CHUNK <= v->chunked; j += 2 * Q8_CHUNK) {
        _mm_prefetch((const char *)(packed + j / 2) + PREFETCH_BYTES, _MM_HINT_T0);
        a0 = q16_lut4_chunk_avx2(a0, packed + j / 2, low_table, high_table, v, j);
        a1 = q16_lut4_chunk_avx2(a1, packed + (j + Q8_CHUNK) / 2, low_table, high_table, v, j + Q8_CHUNK);
    }
    if (j < v->chunked) a0 = q16_lut4_chunk_avx2(a0, packed + j / 2, low_table, high_table, v, j);
    return horizontal_sum(_mm256_add_ps(a0, a1)) + q16_lut4_from(packed, p, v, v->chunked);
}
#endif

#if defined(__x86_64__)
/* 4-bit rows with AVX-512 VNNI, 128 weights a step, grouped as q8_lut4_vnni (the same
 * arguments). The 64 packed bytes are 32 words, word p holding the indices of elements
 * 4p .. 4p + 3; vpermw reads an index's low five bits, so with the 16 entries twice in the
 * table the word shifted by 4 s looks up element 4p + s's entry in slot p (s = 0..3), against
 * the codes in the same order (split16). vpdpwssd adds the products of word pairs to 32-bit
 * lanes: lane L of a lookup takes elements 8L + s and 8L + 4 + s, one block's; lookups 0 and 2
 * go to one sum, 1 and 3 to another, so each lane sums 4 exact products (at most 4 x 16383 x
 * 32767 < 2^31), and both, as floats, take their block's scale (chunk_scales). Per 128 weights
 * a row: a load, 3 shifts, 4 lookups and 4 vpdpwssd, against 8 vdpbf16ps and their loads in
 * the float kernel. The elements after the whole steps in scalar code. */
VNNI static inline __attribute__((always_inline)) void q16_lut4_vnni_inline(
    const char *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes, const code_vector *v, float *dots,
    int count) {
    const char *rows[GEMV_GROUP];
    const palette16 *row_palettes[GEMV_GROUP];
    __m512i tables[GEMV_GROUP];
    __m512 sums[GEMV_GROUP];
    for (int r = 0; r < count; r++) {
        rows[r] = w + r * row_bytes;
        row_palettes[r] = (const palette16 *)(palettes + r * palette_bytes);
        __m256i entries = _mm256_loadu_si256((const __m256i *)row_palettes[r]->entries);
        tables[r] = _mm512_inserti64x4(_mm512_castsi256_si512(entries), entries, 1);
        sums[r] = _mm512_setzero_ps();
    }
    int64_t whole = v->k / Q16_LUT4_VNNI_CHUNK * Q16_LUT4_VNNI_CHUNK;
    for (int64_t j = 0; j < whole; j += Q16_LUT4_VNNI_CHUNK) {
        const int16_t *codes = v->split16 + j;
        __m512i c0 = _mm512_loadu_si512(codes), c1 = _mm512_loadu_si512(codes + 32);
        __m512i c2 = _mm512_loadu_si512(codes + 64), c3 = _mm512_loadu_si512(codes + 96);
        __m512 scales = _mm512_loadu_ps(v->chunk_scales + j / 8);
        for (int r = 0; r < count; r++) {
            __m512i packed = _mm512_loadu_si512(rows[r] + j / 2);
            __m512i even = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_permutexvar_epi16(packed, tables[r]), c0);
            __m512i odd = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                              _mm512_permutexvar_epi16(_mm512_srli_epi16(packed, 4), tables[r]), c1);
            even = _mm512_dpwssd_epi32(even, _mm512_permutexvar_epi16(_mm512_srli_epi16(packed, 8), tables[r]), c2);
            odd = _mm512_dpwssd_epi32(odd, _mm512_permutexvar_epi16(_mm512_srli_epi16(packed, 12), tables[r]), c3);
            __m512 lanes = _mm512_add_ps(_mm512_cvtepi32_ps(even), _mm512_cvtepi32_ps(odd));
            sums[r] = _mm512_fmadd_ps(lanes, scales, sums[r]);
        }
    }
    for (int r = 0; r < count; r++)
        dots[r] = _mm512_reduce_add_ps(sums[r]) + q16_lut4_from((const uint8_t *)rows[r], row_palettes[r], v, whole);
}

VNNI static void q16_lut4_vnni(const void *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes,
                               const code_vector *v, float *dots, int count) {
    if (count == GEMV_GROUP) q16_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, GEMV_GROUP);
    else q16_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, 1);
}
#endif

static float q16_int8_scalar(const int8_t *q, const code_vector *v) { return q16_int8_from(q, v, 0); }
static float q16_lut4_scalar(const uint8_t *packed, const void *palette, const code_vector *v) {
    return q16_lut4_from(packed, palette, v, 0);
}

/* ------------------------------------------------ integer activations: the codes */

static size_t code_bytes(int64_t k, ane_activations activations) {
    return activations == ANE_ACTIVATIONS_INT8 ? q8_bytes(k) : q16_bytes(k);
}

/* for_lut4: the codes are for the integer products with 4-bit rows (q8_quantize). */
static void quantize_codes(code_vector *v, void *memory, const float *x, int64_t stride, int64_t k,
                           ane_activations activations, int for_lut4) {
    if (activations == ANE_ACTIVATIONS_INT8) q8_quantize(v, memory, x, stride, k, for_lut4);
    else q16_quantize(v, memory, x, stride, k, for_lut4);
}

/* ------------------------------------------------ integer activations: the palettes */

size_t ane_palette_codes_stride(ane_activations activations) {
    return activations == ANE_ACTIVATIONS_INT8    ? sizeof(palette8)
           : activations == ANE_ACTIVATIONS_INT16 ? sizeof(palette16)
                                                  : ANE_LUT4_ENTRIES * sizeof(uint16_t);
}

int ane_palette_codes(void *codes, const float *table, int64_t rows, ane_activations activations) {
    if (activations == ANE_ACTIVATIONS_FLOAT) { /* bf16 words, when every entry is one */
        uint16_t *words = codes;
        for (int64_t i = 0; i < rows * ANE_LUT4_ENTRIES; i++) {
            uint32_t bits;
            memcpy(&bits, table + i, sizeof bits);
            if (bits & 0xFFFFu) return 0;
            words[i] = (uint16_t)(bits >> 16);
        }
        return 1;
    }
    if (activations == ANE_ACTIVATIONS_INT8) {
        void (*palette_of)(palette8 *, const float *) = q8_palette_scalar;
#if defined(__x86_64__)
        if (ane_cpu_has_avx2_fma_f16c()) palette_of = q8_palette_avx2;
        if (ane_cpu_has_avx512_vnni()) palette_of = q8_palette_vnni;
#endif
        for (int64_t r = 0; r < rows; r++) palette_of((palette8 *)codes + r, table + r * ANE_LUT4_ENTRIES);
    } else {
        void (*palette_of)(palette16 *, const float *) = q16_palette_scalar;
#if defined(__x86_64__)
        if (ane_cpu_has_avx2_fma_f16c()) palette_of = q16_palette_avx2;
#endif
        for (int64_t r = 0; r < rows; r++) palette_of((palette16 *)codes + r, table + r * ANE_LUT4_ENTRIES);
    }
    return 1;
}

/* A product's palette codes: the caller's, or (NULL) computed into *owned (freed by the caller). */
static const void *palette_codes_for(const void *given, void **owned, const float *table, int64_t rows,
                                     ane_activations activations) {
    *owned = NULL;
    if (given) return given;
    *owned = malloc((size_t)rows * ane_palette_codes_stride(activations) + 1);
    if (*owned) ane_palette_codes(*owned, table, rows, activations);
    return *owned;
}

/* ------------------------------------------------ integer activations: the products */

typedef struct integer_job {
    float *y; /* [rows, columns] */
    const void *data;
    const float *table;         /* int8 rows: [rows] scales */
    const char *palette_codes;  /* 4-bit rows: [rows] palette8 or palette16 */
    const code_vector *columns; /* [columns] */
    int64_t count, k;
    ane_weight_encoding encoding;
    ane_activations activations;
} integer_job;

#if defined(__x86_64__)
/* Rows of an integer job through the grouped VNNI kernels, each column's dots times the
 * rows' scales. */
static void integer_group_vnni(const void *context, int64_t row, int64_t apart, int count) {
    const integer_job *job = context;
    int lut = job->encoding == ANE_ENCODING_LUT4;
    int64_t row_bytes = lut ? job->k / 2 : job->k, palette_bytes = (int64_t)ane_palette_codes_stride(job->activations);
    const char *w = (const char *)job->data + row * row_bytes;
    const char *palettes = lut ? job->palette_codes + row * palette_bytes : NULL;
    void (*kernel)(const void *, int64_t, const char *, int64_t, const code_vector *, float *, int) =
        !lut ? q8_int8_vnni : job->activations == ANE_ACTIVATIONS_INT8 ? q8_lut4_vnni : q16_lut4_vnni;
    for (int64_t c = 0; c < job->count; c++) {
        float dots[GEMV_GROUP];
        kernel(w, apart * row_bytes, palettes, apart * palette_bytes, &job->columns[c], dots, count);
        for (int g = 0; g < count; g++) {
            int64_t r = row + g * apart;
            /* palette8 and palette16 both start with their scale */
            float scale = lut ? *(const float *)(job->palette_codes + r * palette_bytes) : job->table[r];
            job->y[r * job->count + c] = dots[g] * scale;
        }
    }
}
#endif

static void rows_integer(void *context, int64_t first, int64_t last) {
    const integer_job *job = context;
    float (*dot_int8)(const int8_t *, const code_vector *) = q16_int8_scalar;
    float (*dot_lut4)(const uint8_t *, const void *palette, const code_vector *) = q16_lut4_scalar;
    if (job->activations == ANE_ACTIVATIONS_INT8) {
        dot_int8 = q8_int8_scalar, dot_lut4 = q8_lut4_scalar;
#if defined(__x86_64__)
        if (ane_cpu_has_avx2_fma_f16c()) dot_int8 = q8_int8_avx2, dot_lut4 = q8_lut4_avx2;
        if (ane_cpu_has_avx512_vnni()) {
            in_row_groups(first, last, integer_group_vnni, job);
            return;
        }
#endif
    }
#if defined(__x86_64__)
    else {
        if (ane_cpu_has_avx2_fma_f16c()) dot_int8 = q16_int8_avx2, dot_lut4 = q16_lut4_avx2;
        if (job->encoding == ANE_ENCODING_LUT4 && ane_cpu_has_avx512_vnni()) {
            in_row_groups(first, last, integer_group_vnni, job);
            return;
        }
    }
#endif
    int64_t count = job->count;
    size_t stride = ane_palette_codes_stride(job->activations);
    for (int64_t r = first; r < last; r++) {
        float *y = job->y + r * count;
        if (job->encoding == ANE_ENCODING_INT8) {
            const int8_t *q = (const int8_t *)job->data + r * job->k;
            for (int64_t c = 0; c < count; c++) y[c] = dot_int8(q, &job->columns[c]) * job->table[r];
        } else {
            const char *palette = job->palette_codes + (size_t)r * stride;
            float scale = *(const float *)palette; /* palette8 and palette16 both start with it */
            const uint8_t *packed = (const uint8_t *)job->data + r * (job->k / 2);
            for (int64_t c = 0; c < count; c++) y[c] = dot_lut4(packed, palette, &job->columns[c]) * scale;
        }
    }
}

/* y [rows, columns] with the activations x [k, columns] quantized per column. */
static ane_status encoded_matmul_integer(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                                         const void *palette_codes, const float *x, int64_t rows, int64_t k,
                                         int64_t columns, ane_activations activations, ane_error *err) {
    size_t bytes = (code_bytes(k, activations) + 63) / 64 * 64;
    char stack[32768];
    char *memory = (size_t)columns * (bytes + sizeof(code_vector)) <= sizeof stack ? stack : malloc((size_t)columns * (bytes + sizeof(code_vector)));
    void *owned = NULL;
    if (encoding == ANE_ENCODING_LUT4) palette_codes = palette_codes_for(palette_codes, &owned, table, rows, activations);
    if (!memory || (encoding == ANE_ENCODING_LUT4 && !palette_codes)) {
        if (memory != stack) free(memory);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory quantizing the activations of a quantized product");
    }
    code_vector *vectors = (code_vector *)memory;
    char *buffers = memory + (size_t)columns * sizeof(code_vector);
    for (int64_t c = 0; c < columns; c++) quantize_codes(&vectors[c], buffers + (size_t)c * bytes, x + c, columns, k, activations,
                                                          encoding == ANE_ENCODING_LUT4);
    integer_job job = {y, data, table, palette_codes, vectors, columns, k, encoding, activations};
    ane_parallel_for(rows, grain_rows(ane_encoded_data_bytes(encoding, 1, k) * columns), rows_integer, &job);
    if (memory != stack) free(memory);
    free(owned);
    return ANE_OK;
}

/* Many columns with int8 or int16 activations: the same quantized values multiplied by
 * BLAS. Each element of x becomes its block's scale times its code, a 4-bit row's palette its
 * integer entries times their scale; the fp32 product then differs from the integer one by
 * rounding only, so a prefill and the decode steps after it compute the same arithmetic. */
static ane_status encoded_matmul_codes_blas(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                                            const void *palette_codes, const float *x, int64_t rows, int64_t k,
                                            int64_t columns, ane_activations activations, ane_error *err) {
    int int8 = activations == ANE_ACTIVATIONS_INT8;
    float *values = malloc((size_t)(k * columns) * sizeof *values + 1);                   /* [k, columns] */
    void *memory = malloc(code_bytes(k, activations));
    float *palettes = encoding == ANE_ENCODING_LUT4 ? malloc((size_t)rows * ANE_LUT4_ENTRIES * sizeof *palettes) : NULL;
    void *owned = NULL;
    if (encoding == ANE_ENCODING_LUT4) palette_codes = palette_codes_for(palette_codes, &owned, table, rows, activations);
    ane_status status = ANE_OK;
    if (!values || !memory || (encoding == ANE_ENCODING_LUT4 && (!palettes || !palette_codes))) {
        status = ane_fail(err, ANE_ERR_NOMEM, "out of memory quantizing the activations of a quantized product");
        goto done;
    }
    for (int64_t c = 0; c < columns; c++) {
        code_vector v;
        quantize_codes(&v, memory, x + c, columns, k, activations, 0);
        for (int64_t j = 0; j < k; j++)
            values[j * columns + c] = v.block_scales[j / Q8_BLOCK] * (float)(int8 ? v.codes8[j] : v.codes16[j]);
    }
    if (palettes)
        for (int64_t r = 0; r < rows; r++) {
            const palette8 *p8 = (const palette8 *)palette_codes + r;
            const palette16 *p16 = (const palette16 *)palette_codes + r;
            for (int i = 0; i < ANE_LUT4_ENTRIES; i++)
                palettes[r * ANE_LUT4_ENTRIES + i] = int8 ? p8->scale * (float)p8->entries[i] : p16->scale * (float)p16->entries[i];
        }
    status = decoded_product(y, encoding, data, palettes ? palettes : table, values, rows, k, columns, err);
done:
    free(values), free(memory), free(palettes), free(owned);
    return status;
}

/* ------------------------------------------------ a few columns, one at a time */

/* Rows taken per block: ~256 KB of weights, read from memory by a block's first column and
 * from cache by the others. */
#define FEW_COLUMNS_BLOCK_BYTES ((int64_t)1 << 18)

typedef struct columns_job {
    void (*rows)(void *context, int64_t first, int64_t last); /* rows_fp32, rows_fp16, rows_int8 or rows_lut4 */
    gemv_job *columns;                                         /* [count]: a column's x and its y [rows] */
    int64_t count, block_rows;
} columns_job;

static void rows_of_columns(void *context, int64_t first, int64_t last) {
    const columns_job *job = context;
    for (int64_t from = first; from < last; from += job->block_rows) {
        int64_t to = last - from < job->block_rows ? last : from + job->block_rows;
        for (int64_t c = 0; c < job->count; c++) job->rows(&job->columns[c], from, to);
    }
}

/* y [rows, columns] = W x [k, columns] (W: data and table as a gemv_job holds them, rows of
 * row_bytes), through a matrix-vector product's row kernel: one split of the rows over the
 * helpers, each taking its rows a block at a time, every column per block. A row's result does
 * not depend on how the rows were split, so a column's sums are its matrix-vector product's. */
static ane_status by_columns(float *y, void (*rows_kernel)(void *, int64_t, int64_t), const void *data, const float *table,
                             const uint16_t *words, int64_t row_bytes, int lut4, const float *x, int64_t rows, int64_t k,
                             int64_t columns, ane_error *err) {
    float *memory = malloc((size_t)(columns * (2 * k + rows)) * sizeof *memory); /* per column: x, x_split, y */
    gemv_job *jobs = malloc((size_t)columns * sizeof *jobs);
    if (!memory || !jobs) {
        free(memory), free(jobs);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory multiplying %lld columns", (long long)columns);
    }
    for (int64_t c = 0; c < columns; c++) {
        float *column = memory + c * (2 * k + rows), *split = column + k, *out = split + k;
        for (int64_t j = 0; j < k; j++) column[j] = x[j * columns + c];
        jobs[c] = (gemv_job){out, data, column, k, k, table, lut4 ? split_for_lut4(split, column, k) : NULL, words};
    }
    columns_job job = {rows_kernel, jobs, columns, row_bytes > 0 ? FEW_COLUMNS_BLOCK_BYTES / row_bytes + 1 : rows};
    ane_parallel_for(rows, grain_rows(row_bytes * columns), rows_of_columns, &job);
    for (int64_t c = 0; c < columns; c++)
        for (int64_t r = 0; r < rows; r++) y[r * columns + c] = jobs[c].y[r];
    free(memory), free(jobs);
    return ANE_OK;
}

ane_status ane_gemm_fp32_few_columns(float *y, const float *w, const float *x, int64_t rows, int64_t k, int64_t columns,
                                     ane_error *err) {
    return by_columns(y, rows_fp32, w, NULL, NULL, k * (int64_t)sizeof(float), 0, x, rows, k, columns, err);
}

ane_status ane_gemm_fp16_few_columns(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k, int64_t columns,
                                     ane_error *err) {
    return by_columns(y, rows_fp16, w, NULL, NULL, k * (int64_t)sizeof(uint16_t), 0, x, rows, k, columns, err);
}

ane_status ane_encoded_matmul(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                              const void *palette_codes, const float *x, int64_t rows, int64_t k, int64_t columns,
                              ane_activations activations, ane_error *err) {
    if (activations != ANE_ACTIVATIONS_FLOAT && columns > ANE_FEW_COLUMNS)
        return encoded_matmul_codes_blas(y, encoding, data, table, palette_codes, x, rows, k, columns, activations, err);
    if (activations != ANE_ACTIVATIONS_FLOAT)
        return encoded_matmul_integer(y, encoding, data, table, palette_codes, x, rows, k, columns, activations, err);
    const uint16_t *words = encoding == ANE_ENCODING_LUT4 ? palette_codes : NULL;
    if (columns == 1) {
        ane_gemv_part alone = {y, encoding, data, table, rows, words};
        ane_gemv_parts(&alone, 1, x, k);
        return ANE_OK;
    }
    if (columns <= ANE_FEW_COLUMNS)
        return by_columns(y, encoding == ANE_ENCODING_INT8 ? rows_int8 : rows_lut4, data, table, words,
                          ane_encoded_data_bytes(encoding, 1, k), encoding == ANE_ENCODING_LUT4, x, rows, k, columns, err);
    return decoded_product(y, encoding, data, table, x, rows, k, columns, err);
}
