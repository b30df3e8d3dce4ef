/* The AVX2 (+ FMA, F16C) kernels of the kernel table (kernels.h): the matrix-vector products
 * of fp16 / fp32 / int8 / 4-bit rows with float activations, the products over a cache, the
 * integer activations' codes, palettes and byte / word products, e^x and friends, sums and
 * maxima, and the decoding of 4-bit rows. Each function carries its target attribute, and the
 * table takes these entries only on CPUs with AVX2, FMA and F16C (base/cpu.h). */
#if defined(__x86_64__)
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../base/fp16.h"
#include "../../kernels.h"
#include "../../vector_math_constants.h"
#include "x86.h"


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

/* ------------------------------------------------ the exact 4-bit lookup */

/* The exact lookup of 4-bit palette indices in AVX2 registers, shared by the products and the
 * decoding of whole rows below. A row's 16 fp32 entries become four
 * byte tables, one per byte of an entry (vpshufb looks up 32 indices in one); two rounds of
 * interleaving put the four bytes of each value back together. The interleaving works within
 * 128-bit lanes, so the indices go in a matching order: lane 0 holds elements 0-3, 8-11,
 * 16-19, 24-27 of the 32, lane 1 the others, and the values then come out as elements 0-7,
 * 8-15, 16-23, 24-31 in order. */
__attribute__((target("avx2"))) static inline void lut4_byte_tables_avx2(const float *palette /* [16] */,
                                                                          __m256i tables[4]) {
    const __m128i by_byte = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m128i q[4]; /* q[i]: dword b = byte b of entries 4i .. 4i + 3 */
    for (int i = 0; i < 4; i++) q[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(palette + 4 * i)), by_byte);
    __m128i low01 = _mm_unpacklo_epi32(q[0], q[1]), low23 = _mm_unpacklo_epi32(q[2], q[3]);
    __m128i high01 = _mm_unpackhi_epi32(q[0], q[1]), high23 = _mm_unpackhi_epi32(q[2], q[3]);
    tables[0] = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(low01, low23));
    tables[1] = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(low01, low23));
    tables[2] = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(high01, high23));
    tables[3] = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(high01, high23));
}

/* The values of 32 elements from their 16 packed bytes (two a byte, low nibble first):
 * values[i] holds elements 8i .. 8i + 7. */
__attribute__((target("avx2"))) static inline void lut4_values_avx2(const uint8_t *packed /* [16] */,
                                                                     const __m256i tables[4], __m256 values[4]) {
    /* packed bytes 0 1 4 5 8 9 12 13 feed lane 0, the others lane 1, each byte b doubled into
     * a word b | b << 8 */
    const __m256i lane_order = _mm256_setr_epi8(0, 0, 1, 1, 4, 4, 5, 5, 8, 8, 9, 9, 12, 12, 13, 13, /* lane 0 */
                                                2, 2, 3, 3, 6, 6, 7, 7, 10, 10, 11, 11, 14, 14, 15, 15);
    const __m256i low_nibble = _mm256_set1_epi16(0x000f), high_nibble = _mm256_set1_epi16(0x0f00);
    __m256i words = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)packed)), lane_order);
    /* byte 0: b & 15; byte 1: bits 12-15 of the word, b >> 4 */
    __m256i indices = _mm256_or_si256(_mm256_and_si256(words, low_nibble),
                                      _mm256_and_si256(_mm256_srli_epi16(words, 4), high_nibble));
    __m256i b0 = _mm256_shuffle_epi8(tables[0], indices), b1 = _mm256_shuffle_epi8(tables[1], indices);
    __m256i b2 = _mm256_shuffle_epi8(tables[2], indices), b3 = _mm256_shuffle_epi8(tables[3], indices);
    __m256i low01 = _mm256_unpacklo_epi8(b0, b1), low23 = _mm256_unpacklo_epi8(b2, b3);
    __m256i high01 = _mm256_unpackhi_epi8(b0, b1), high23 = _mm256_unpackhi_epi8(b2, b3);
    values[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(low01, low23));
    values[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(low01, low23));
    values[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(high01, high23));
    values[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(high01, high23));
}
/* ------------------------------------------------ float activations */


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

/* dot_avx2 of one fp16 row with two columns x and z, each weight converted once for both:
 * each column's chains, tails and sums are dot_avx2's, so each result is its bits. */
__attribute__((target("avx2,fma,f16c"))) static void dot2_avx2(const uint16_t *w, const float *x, const float *z, int64_t k,
                                                                float *out_x, float *out_z) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(w + j) + PREFETCH_BYTES, _MM_HINT_T0);
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), a0), b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(z + j), b0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 8), a1), b1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(z + j + 8), b1);
        __m256 w2 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 16)));
        __m256 w3 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 24)));
        a2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + j + 16), a2), b2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(z + j + 16), b2);
        a3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + j + 24), a3), b3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(z + j + 24), b3);
    }
    for (; j + 8 <= k; j += 8) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), a0), b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(z + j), b0);
    }
    float total_x = horizontal_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    float total_z = horizontal_sum(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));
    for (; j < k; j++) total_x += ane_fp16_to_fp32(w[j]) * x[j];
    for (j = k / 8 * 8; j < k; j++) total_z += ane_fp16_to_fp32(w[j]) * z[j];
    *out_x = total_x, *out_z = total_z;
}

static void rows_fp16_two_columns(const gemv_job *jobs, int count, int64_t first, int64_t last, prefetch_span ahead) {
    const gemv_job *a = &jobs[0], *b = &jobs[1];
    (void)count; /* (2: fp16_columns_at_once) */
    for (int64_t r = first; r < last; r++) {
        prefetch_span share = prefetch_span_share(&ahead, last - r); /* (a row's few lines before it) */
        prefetch_span_rest(&share);
        dot2_avx2((const uint16_t *)a->w + r * a->row_stride, a->x, b->x, a->k, &a->y[r], &b->y[r]);
    }
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

/* Q8_0, Q4_0, Q6_K and Q4_K rows (k a multiple of 32): a block an iteration, its weights scale x
 * (code - offset) (Q4_K's offset; 0 for the others, where the subtraction is exact) in
 * dot32_avx2's chains, so a row gives dot32_avx2's bits for its dequantized values. codes: a
 * block's 32 codes as bytes, in order. */
__attribute__((target("avx2,fma"))) static inline void block_fma_avx2(__m128i first16, __m128i second16, float scale,
                                                                      float second_scale, float offset, const float *x,
                                                                      __m256 a[4]) {
    __m256 d = _mm256_set1_ps(scale), d2 = _mm256_set1_ps(second_scale), o = _mm256_set1_ps(offset);
#define CODES_EIGHT(bytes, d) _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), o), d)
    a[0] = _mm256_fmadd_ps(CODES_EIGHT(first16, d), _mm256_loadu_ps(x), a[0]);
    a[1] = _mm256_fmadd_ps(CODES_EIGHT(_mm_srli_si128(first16, 8), d), _mm256_loadu_ps(x + 8), a[1]);
    a[2] = _mm256_fmadd_ps(CODES_EIGHT(second16, d2), _mm256_loadu_ps(x + 16), a[2]);
    a[3] = _mm256_fmadd_ps(CODES_EIGHT(_mm_srli_si128(second16, 8), d2), _mm256_loadu_ps(x + 24), a[3]);
#undef CODES_EIGHT
}

__attribute__((target("avx2,fma"))) static float dot_q8_0_avx2(const int8_t *q, const float *scales, const float *x,
                                                                int64_t k) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(q + j) + PREFETCH_BYTES, _MM_HINT_T0);
        block_fma_avx2(_mm_loadu_si128((const __m128i *)(q + j)), _mm_loadu_si128((const __m128i *)(q + j + 16)),
                       scales[j / 32], scales[j / 32], 0.0f, x + j, a);
    }
    return horizontal_sum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

/* Q4_0: a block's 16 bytes (element 2i in byte i's low nibble, 2i + 1 in its high one)
 * interleaved into 32 bytes in order, each nibble's two's complement made a signed byte. */
__attribute__((target("avx2,fma"))) static float dot_q4_0_avx2(const uint8_t *packed, const float *scales,
                                                                const float *x, int64_t k) {
    const __m128i low_nibbles = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(packed + j / 2) + PREFETCH_BYTES, _MM_HINT_T0);
        __m128i bytes = _mm_loadu_si128((const __m128i *)(packed + j / 2));
        __m128i low = _mm_and_si128(bytes, low_nibbles), high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibbles);
        __m128i first16 = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(low, high), eight), eight);
        __m128i second16 = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(low, high), eight), eight);
        block_fma_avx2(first16, second16, scales[j / 32], scales[j / 32], 0.0f, x + j, a);
    }
    return horizontal_sum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

/* Q4_K: as Q4_0, the nibbles unsigned, each block's scale and offset from its pair. */
__attribute__((target("avx2,fma"))) static float dot_q4_k_avx2(const uint8_t *packed, const float *pairs,
                                                                const float *x, int64_t k) {
    const __m128i low_nibbles = _mm_set1_epi8(15);
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(packed + j / 2) + PREFETCH_BYTES, _MM_HINT_T0);
        __m128i bytes = _mm_loadu_si128((const __m128i *)(packed + j / 2));
        __m128i low = _mm_and_si128(bytes, low_nibbles), high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibbles);
        block_fma_avx2(_mm_unpacklo_epi8(low, high), _mm_unpackhi_epi8(low, high), pairs[j / 16], pairs[j / 16],
                       pairs[j / 16 + 1], x + j, a);
    }
    return horizontal_sum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

/* Q6_K (k a multiple of 256): each 32 weights' codes (q6_k_codes_avx2), two 16s of a scale each. */
__attribute__((target("avx2,fma"))) static float dot_q6_k_avx2(const uint8_t *blocks, const float *scales,
                                                                const float *x, int64_t k) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        __m256i codes = q6_k_codes_avx2(blocks, j);
        block_fma_avx2(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1), scales[j / 16],
                       scales[j / 16 + 1], 0.0f, x + j, a);
    }
    return horizontal_sum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

/* Q5_K: a block's 32 codes unpacked (q5_k_codes_avx2: unsigned, below 32, the same bytes as signed ones). */
__attribute__((target("avx2,fma"))) static float dot_q5_k_avx2(const uint8_t *packed, const float *pairs,
                                                                const float *x, int64_t k) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        _mm_prefetch((const char *)(packed + j / 32 * ANE_Q5_K_BYTES) + PREFETCH_BYTES, _MM_HINT_T0);
        __m256i codes = q5_k_codes_avx2(packed, j);
        block_fma_avx2(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1),
                       pairs[j / 16], pairs[j / 16], pairs[j / 16 + 1], x + j, a);
    }
    return horizontal_sum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

static const float_dots dots = {dot32_avx2, dot_avx2, dot_int8_avx2, dot_lut4_avx2, dot_q8_0_avx2, dot_q4_0_avx2,
                                dot_q6_k_avx2, dot_q4_k_avx2, dot_q5_k_avx2};

static void rows_fp32(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_FP32, &dots); }
static void rows_fp16(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_FP16, &dots); }
static void rows_int8(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_INT8, &dots); }
static void rows_q8_0(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q8_0, &dots); }
static void rows_q4_0(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q4_0, &dots); }
static void rows_q6_k(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q6_K, &dots); }
static void rows_q4_k(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q4_K, &dots); }
static void rows_q5_k(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q5_K, &dots); }

/* With x_split (split_lut4 below): the two-byte kernel; without (k under a chunk), the exact lookup. */
void x86_rows_lut4_avx2(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    if (!job->x_split) {
        rows_by_dots(job, first, last, WEIGHTS_LUT4, &dots);
        return;
    }
    const uint8_t *packed = job->w;
    for (int64_t r = first; r < last; r++)
        job->y[r] = dot_lut4_bf16_avx2(packed + r * (job->k / 2), job->table + r * ANE_LUT4_ENTRIES, job->x_split, job->x, job->k);
}

/* x's whole 64-element chunks in lut4_split_slot's order, the tail as it is. */
static const float *split_lut4(float *x_split, const float *x, int64_t k) {
    if (!x_split || k < LUT4_SPLIT_CHUNK) return NULL;
    int64_t whole = k / LUT4_SPLIT_CHUNK * LUT4_SPLIT_CHUNK;
    int slot_element[LUT4_SPLIT_CHUNK];
    for (int s = 0; s < LUT4_SPLIT_CHUNK; s++) slot_element[s] = lut4_split_slot(s);
    for (int64_t c = 0; c < whole; c += LUT4_SPLIT_CHUNK)
        for (int s = 0; s < LUT4_SPLIT_CHUNK; s++) x_split[c + s] = x[c + slot_element[s]];
    memcpy(x_split + whole, x + whole, (size_t)(k - whole) * sizeof *x_split);
    return x_split;
}

/* ------------------------------------------------ products over a cache */

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

/* ------------------------------------------------ integer activations */

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


/* For 4-bit rows: the codes in q8_split_chunk_avx2's order and the chunk scales. */
static void arrange_codes8(code_vector *v, int for_lut4) {
    if (!for_lut4) return;
    fill_chunk_scales(v);
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) q8_split_chunk_avx2(v->codes8 + j, v->split8 + j);
}

/* For 4-bit rows: the codes in q16_split_chunk's order and the chunk scales. */
static void arrange_codes16(code_vector *v, int for_lut4) {
    if (!for_lut4) return;
    fill_chunk_scales(v);
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) q16_split_chunk(v->codes16 + j, v->split16 + j);
}

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

/* Q8_0 / Q4_0 rows on int8 activations: each block's integer dot product exact in eight int32
 * lanes (|w| as unsigned bytes times the codes given w's sign, maddubs into pairs of at most
 * 2 x 128 x 127, madd into the lanes), the lanes converted and multiplied by the block's two
 * scales into eight fp32 accumulators, summed at the end: blocks_int8's arithmetic in
 * another order, within the bound spec/c/test_gemv.c derives for it. */
Q8_AVX2 static inline __m256 block_fma_int8_avx2(__m256i weights, const int8_t *codes, __m256 scale, __m256 sum) {
    __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(weights, weights),
                                         _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)codes), weights));
    __m256i lanes = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)); /* lanes 0-3: bytes 0-15; 4-7: 16-31 */
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), scale, sum);
}

Q8_AVX2 static float q8_0_int8_avx2(const void *codes, const float *scales, const code_vector *v) {
    const int8_t *q = codes;
    __m256 sum = _mm256_setzero_ps();
    for (int64_t b = 0; b < v->k / 32; b++)
        sum = block_fma_int8_avx2(_mm256_loadu_si256((const __m256i *)(q + 32 * b)), v->codes8 + 32 * b,
                                  _mm256_set1_ps(scales[b] * v->block_scales[b]), sum);
    return horizontal_sum(sum);
}

/* Q4_0, 64 weights (two blocks) a step as q8_lut4_chunk_avx2 reads 4-bit rows: the nibble
 * masks give the even and the odd elements' x = code + 8 (the stored nibble with its top bit
 * flipped), unsigned as vpmaddubsw takes them, against the activation codes in the same order
 * (split8, arrange_q4_0_codes8); each lane's exact sum of x a less 8 x the lane's sum of a
 * (bias8) is its sum of code a. The lower four lanes hold the first block's products, the upper
 * four the second's, and take (weight scale x activation scale) of their block, the products
 * formed as the scalar code forms them. Two accumulators; an odd last block in element order. */
Q8_AVX2 static inline __m256 q4_0_chunk_int8_avx2(__m256 sum, const uint8_t *packed, const float *scales,
                                                  const code_vector *v, int64_t j) {
    const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256i bytes = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(packed + j / 2)), _mm256_set1_epi8((char)0x88));
    __m256i even = _mm256_and_si256(bytes, nibble), odd = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
    __m256i even_codes = _mm256_loadu_si256((const __m256i *)(v->split8 + j));
    __m256i odd_codes = _mm256_loadu_si256((const __m256i *)(v->split8 + j + 32));
    __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(even, even_codes), /* (each at most 2 x 15 x 127: */
                                     _mm256_maddubs_epi16(odd, odd_codes));  /* their sum fits 16 bits) */
    __m256i lanes = _mm256_sub_epi32(_mm256_madd_epi16(pairs, ones), _mm256_loadu_si256((const __m256i *)(v->bias8 + j / 8)));
    __m128 two_scales = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(scales + j / 32))); /* this row's, of both blocks */
    __m256 weight_scales = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two_scales), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(weight_scales, _mm256_loadu_ps(v->chunk_scales + j / 8)),
                           sum);
}

/* A 4-bit block row's whole chunks through `chunk` (q4_0_chunk_int8_avx2, q4_k_chunk_int8_avx2), two
 * accumulators taking alternate chunks, added. */
typedef __m256 (*chunk_int8_avx2)(__m256 sum, const uint8_t *packed, const float *table, const code_vector *v, int64_t j);

Q8_AVX2 static inline __attribute__((always_inline)) __m256 chunks_int8_avx2(chunk_int8_avx2 chunk, const uint8_t *packed,
                                                                            const float *table, const code_vector *v) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * Q8_CHUNK <= v->chunked; j += 2 * Q8_CHUNK) {
        a0 = chunk(a0, packed, table, v, j);
        a1 = chunk(a1, packed, table, v, j + Q8_CHUNK);
    }
    if (j < v->chunked) a0 = chunk(a0, packed, table, v, j);
    return _mm256_add_ps(a0, a1);
}

Q8_AVX2 static float q4_0_int8_avx2(const void *codes, const float *scales, const code_vector *v) {
    const uint8_t *packed = codes;
    __m256 sum = chunks_int8_avx2(q4_0_chunk_int8_avx2, packed, scales, v);
    const __m256i signed_code = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1,
                                                 0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
    const __m256i low_nibbles = _mm256_set1_epi8(15);
    for (int64_t b = v->chunked / 32; b < v->k / 32; b++) { /* an odd last block */
        __m128i bytes = _mm_loadu_si128((const __m128i *)(packed + 16 * b));
        __m128i low = _mm_and_si128(bytes, _mm256_castsi256_si128(low_nibbles));
        __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm256_castsi256_si128(low_nibbles));
        __m256i weights = _mm256_shuffle_epi8(signed_code, _mm256_setr_m128i(_mm_unpacklo_epi8(low, high),
                                                                             _mm_unpackhi_epi8(low, high)));
        sum = block_fma_int8_avx2(weights, v->codes8 + 32 * b, _mm256_set1_ps(scales[b] * v->block_scales[b]), sum);
    }
    return horizontal_sum(sum);
}

/* Q4_K, 64 weights (two blocks) a step, as Q4_0: the nibbles x unsigned against the split codes,
 * each lane's exact S = sum x a, and its code sum C = bias8 / 8 (exact); a lane's term (the
 * block's scale x the activations') x (S - offset x C), into two accumulators; an odd last
 * block in blocks_int8's order. */
Q8_AVX2 static inline __m256 q4_k_chunk_int8_avx2(__m256 sum, const uint8_t *packed, const float *pairs,
                                                  const code_vector *v, int64_t j) {
    const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256i bytes = _mm256_loadu_si256((const __m256i *)(packed + j / 2));
    __m256i even = _mm256_and_si256(bytes, nibble), odd = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
    __m256i pairs16 = _mm256_add_epi16(_mm256_maddubs_epi16(even, _mm256_loadu_si256((const __m256i *)(v->split8 + j))),
                                       _mm256_maddubs_epi16(odd, _mm256_loadu_si256((const __m256i *)(v->split8 + j + 32))));
    __m256 lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs16, ones));
    __m256 code_sums = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(v->bias8 + j / 8))),
                                     _mm256_set1_ps(0.125f));
    __m256 four = _mm256_castps128_ps256(_mm_loadu_ps(pairs + j / 16)); /* both blocks' scale and offset */
    __m256 scales = _mm256_permutevar8x32_ps(four, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
    __m256 offsets = _mm256_permutevar8x32_ps(four, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
    __m256 shifted = _mm256_sub_ps(lanes, _mm256_mul_ps(offsets, code_sums));
    return _mm256_fmadd_ps(shifted, _mm256_mul_ps(scales, _mm256_loadu_ps(v->chunk_scales + j / 8)), sum);
}

Q8_AVX2 static float q4_k_int8_avx2(const void *codes, const float *pairs, const code_vector *v) {
    return horizontal_sum(chunks_int8_avx2(q4_k_chunk_int8_avx2, codes, pairs, v)) +
           blocks_int8_from(ANE_ENCODING_Q4_K, codes, pairs, v, v->chunked);
}

/* Q5_K, a block of 32 a step: the codes unpacked (unsigned) against the activations' codes in
 * order, each of 8 lanes' S = sum x a exact (vpmaddubsw's pairs are at most 2 x 31 x 127), and its
 * C = sum a (the same with ones); the lane's term (scale x the activations') x (S - offset x C). */
Q8_AVX2 static float q5_k_int8_avx2(const void *codes, const float *pairs, const code_vector *v) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t b = 0; b < v->k / 32; b++) {
        __m256i activations = _mm256_loadu_si256((const __m256i *)(v->codes8 + 32 * b));
        __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(q5_k_codes_avx2(codes, 32 * b), activations), ones16);
        __m256i code_sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, activations), ones16);
        __m256 shifted = _mm256_sub_ps(_mm256_cvtepi32_ps(lanes),
                                       _mm256_mul_ps(_mm256_set1_ps(pairs[2 * b + 1]), _mm256_cvtepi32_ps(code_sums)));
        sum = _mm256_fmadd_ps(shifted, _mm256_set1_ps(pairs[2 * b] * v->block_scales[b]), sum);
    }
    return horizontal_sum(sum);
}

/* Q6_K, a half block (128 weights) a step: its 64 ql bytes and 32 qh bytes loaded once, and the
 * four quarters' codes x - 32 (quantize.h: ane_q6_code) from them with shifts by constants:
 * quarter q's nibbles are the low (q < 2) or high nibbles of ql's run q & 1, its top two bits
 * qh's bits 2q, 2q + 1, moved to bits 4-5. Each quarter is one block of 32 activation codes; its
 * two 16s take their own scales (the lanes of their bytes), products formed as the scalar code
 * forms them. The half's eight scales d x sc come from the block (the table's values, exact in
 * fp32: its 32 bytes per 128 weights, a quarter more than the blocks', stay unread), or from
 * the table for a program's block (d = 0). */
Q8_AVX2 static inline __m256 q6_k_quarter_int8_avx2(__m256 sum, __m256i codes, __m256 eight_scales, int quarter,
                                                   const code_vector *v, int64_t b) {
    __m256i pair = _mm256_setr_epi32(2 * quarter, 2 * quarter, 2 * quarter, 2 * quarter, 2 * quarter + 1, 2 * quarter + 1,
                                     2 * quarter + 1, 2 * quarter + 1); /* this quarter's two 16s */
    __m256 weight_scales = _mm256_permutevar8x32_ps(eight_scales, pair);
    return block_fma_int8_avx2(_mm256_sub_epi8(codes, _mm256_set1_epi8(32)), v->codes8 + 32 * b,
                               _mm256_mul_ps(weight_scales, _mm256_broadcast_ss(&v->block_scales[b])), sum);
}

Q8_AVX2 static float q6_k_int8_avx2(const void *codes, const float *scales, const code_vector *v) {
    const __m256i low4 = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(0x30);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t j = 0; j < v->k; j += 128) {
        const uint8_t *block = (const uint8_t *)codes + (j / ANE_Q6_K_WEIGHTS) * ANE_Q6_K_BYTES;
        int half = (int)(j % ANE_Q6_K_WEIGHTS) / 128;
        __m256 eight = q6_k_half_scales_avx2(block, half, scales + j / ANE_Q6_K_GROUP);
        __m256i ql0 = _mm256_loadu_si256((const __m256i *)(block + 64 * half));
        __m256i ql1 = _mm256_loadu_si256((const __m256i *)(block + 64 * half + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(block + 128 + 32 * half));
        int64_t b = j / 32;
        a0 = q6_k_quarter_int8_avx2(a0, _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2)),
                                    eight, 0, v, b);
        a1 = q6_k_quarter_int8_avx2(a1, _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2)),
                                    eight, 1, v, b + 1);
        a0 = q6_k_quarter_int8_avx2(a0, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, top2)),
                                    eight, 2, v, b + 2);
        a1 = q6_k_quarter_int8_avx2(a1, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2)), eight, 3, v, b + 3);
    }
    return horizontal_sum(_mm256_add_ps(a0, a1));
}

static void rows_blocks_int8(void *context, int64_t first, int64_t last) {
    static const block_dots_int8 dots = {q8_0_int8_avx2, q4_0_int8_avx2, q6_k_int8_avx2, q4_k_int8_avx2, q5_k_int8_avx2};
    integer_block_rows(context, first, last, &dots);
}

/* For Q4_0 and Q4_K rows (q4_0_int8_avx2, q4_k_int8_avx2): the codes split as for 4-bit rows, the
 * chunk scales, and per lane of a chunk's products 8 x the sum of its codes (bias8: 4 even and 4
 * odd elements). */
static void arrange_q4_0_codes8(code_vector *v) {
    arrange_codes8(v, 1);
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK)
        for (int lane = 0; lane < 8; lane++) {
            int32_t sum = 0;
            for (int t = 0; t < 4; t++) sum += v->split8[j + 4 * lane + t] + v->split8[j + 32 + 4 * lane + t];
            v->bias8[j / 8 + lane] = 8 * sum;
        }
}

static void rows_q8(void *context, int64_t first, int64_t last) {
    integer_rows_by_dots(context, first, last, q8_int8_avx2, q8_lut4_avx2);
}

static void rows_q16(void *context, int64_t first, int64_t last) {
    integer_rows_by_dots(context, first, last, q16_int8_avx2, q16_lut4_avx2);
}

/* ------------------------------------------------ e^x, tanh, sigmoid, SiLU, sums and maxima
 * (kernels_scalar.c's operations in its order, eight lanes at a time) */

#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static inline __m256 power_of_two8(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

AVX2 static inline __m256 reduced_expm1_8(__m256 x, __m256i *n) {
    __m256 whole = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2_E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(whole, _mm256_set1_ps(-LN2_HIGH), x);
    r = _mm256_fmadd_ps(whole, _mm256_set1_ps(-LN2_LOW), r);
    __m256 p = _mm256_set1_ps(TAYLOR[0]);
    for (int i = 1; i < 7; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TAYLOR[i]));
    *n = _mm256_cvtps_epi32(whole);
    return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
}

/* NaN lanes of x carried into result */
AVX2 static inline __m256 keep_nan8(__m256 x, __m256 result) {
    return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

AVX2 static inline __m256 exp8(__m256 x) {
    __m256 below = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LOWEST), _CMP_LT_OQ);
    __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LOWEST)), _mm256_set1_ps(EXP_HIGHEST));
    __m256i n;
    __m256 m = reduced_expm1_8(clamped, &n);
    __m256i half = _mm256_srai_epi32(n, 1);
    __m256 first = power_of_two8(half);
    __m256 value = _mm256_mul_ps(_mm256_fmadd_ps(first, m, first), power_of_two8(_mm256_sub_epi32(n, half)));
    return keep_nan8(x, _mm256_andnot_ps(below, value));
}

AVX2 static inline __m256 tanh8(__m256 x) {
    __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    __m256 magnitude = _mm256_min_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(TANH_SATURATES));
    __m256i n;
    __m256 m = reduced_expm1_8(_mm256_add_ps(magnitude, magnitude), &n);
    __m256 scale = power_of_two8(n);
    m = _mm256_fmadd_ps(scale, m, _mm256_sub_ps(scale, _mm256_set1_ps(1.0f)));
    __m256 value = _mm256_or_ps(_mm256_div_ps(m, _mm256_add_ps(m, _mm256_set1_ps(2.0f))), sign);
    return keep_nan8(x, value);
}

/* e^-|x|, and the lanes where x >= 0 (false for NaN, whose e is NaN) */
AVX2 static inline __m256 exp_negative_magnitude8(__m256 x, __m256 *not_negative) {
    *not_negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    return exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
}

AVX2 static inline __m256 sigmoid8(__m256 x) {
    __m256 not_negative, e = exp_negative_magnitude8(x, &not_negative);
    return _mm256_div_ps(_mm256_blendv_ps(e, _mm256_set1_ps(1.0f), not_negative), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

AVX2 static inline __m256 silu8(__m256 x) {
    __m256 not_negative, e = exp_negative_magnitude8(x, &not_negative);
    return _mm256_div_ps(_mm256_blendv_ps(_mm256_mul_ps(x, e), x, not_negative), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* Applies OP8 to whole groups of eight, then to the tail through a padded group (so the
 * tail takes the same path). */
#define MAP8(name, OP8)                                                                        \
    AVX2 static void name(float *out, const float *x, int64_t n) {                             \
        int64_t i = 0;                                                                         \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, OP8(_mm256_loadu_ps(x + i)));     \
        if (i < n) {                                                                           \
            float tail[8] = { 0 };                                                             \
            memcpy(tail, x + i, (size_t)(n - i) * sizeof *tail);                               \
            _mm256_storeu_ps(tail, OP8(_mm256_loadu_ps(tail)));                                \
            memcpy(out + i, tail, (size_t)(n - i) * sizeof *tail);                             \
        }                                                                                      \
    }
MAP8(exp_avx2, exp8)
MAP8(tanh_avx2, tanh8)
MAP8(sigmoid_avx2, sigmoid8)
MAP8(silu_avx2, silu8)
#undef MAP8

AVX2 static float exp_shifted_sum_avx2(float *out, const float *x, float shift, int64_t n) {
    __m256 by = _mm256_set1_ps(shift), sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), by));
        _mm256_storeu_ps(out + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    float total = 0.0f;
    for (int lane = 0; lane < 8; lane++) total += lanes[lane];
    for (; i < n; i++) total += out[i] = exp_scalar(x[i] - shift);
    return total;
}

AVX2 static void reduce_partials_avx2(float *partial, const float *x, int64_t from, int64_t whole, int take_max) {
    __m256 acc = _mm256_loadu_ps(partial);
    for (int64_t c = from; c < whole; c += 8) {
        __m256 v = _mm256_loadu_ps(x + c);
        if (take_max) {
            __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            acc = _mm256_blendv_ps(acc, v, take);
        } else {
            acc = _mm256_add_ps(acc, v);
        }
    }
    _mm256_storeu_ps(partial, acc);
}

/* ------------------------------------------------ 4-bit rows decoded, and the table */

/* Whole 32-element groups through the exact lookup, the rest in scalar code. */
__attribute__((target("avx2"))) static void lut4_decode(const uint8_t *packed, const float *palette, int64_t count, float *out) {
    __m256i tables[4];
    lut4_byte_tables_avx2(palette, tables);
    int64_t j = 0;
    for (; j + 32 <= count; j += 32) {
        __m256 values[4];
        lut4_values_avx2(packed + j / 2, tables, values);
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(out + j + 8 * i, values[i]);
    }
    lut4_decode_scalar(packed + j / 2, palette, count - j, out + j);
}

void ane_kernels_x86_avx2(ane_kernel_table *t) {
    t->rows_float[WEIGHTS_FP32] = rows_fp32;
    t->rows_float[WEIGHTS_FP16] = rows_fp16;
    t->rows_fp16_columns = rows_fp16_two_columns, t->fp16_columns_at_once = 2;
    t->rows_float[WEIGHTS_INT8] = rows_int8;
    t->rows_float[WEIGHTS_LUT4] = x86_rows_lut4_avx2;
    t->rows_float[WEIGHTS_Q8_0] = rows_q8_0;
    t->rows_float[WEIGHTS_Q4_0] = rows_q4_0;
    t->rows_float[WEIGHTS_Q6_K] = rows_q6_k;
    t->rows_float[WEIGHTS_Q4_K] = rows_q4_k;
    t->rows_float[WEIGHTS_Q5_K] = rows_q5_k;
    t->split_lut4 = split_lut4;
    t->vecmat_fp32 = vecmat_avx2;
    t->vecmat_fp16 = vecmat_fp16_avx2;
    t->rows_integer[0][0] = t->rows_integer[1][0] = rows_q8;
    t->rows_integer[0][1] = t->rows_integer[1][1] = rows_q16;
    t->rows_blocks_int8 = rows_blocks_int8;
    t->arrange_q4_0_codes8 = arrange_q4_0_codes8;
    t->quantize_block8 = q8_block_quantize_avx2;
    t->quantize_block16 = q16_block_quantize_avx2;
    t->arrange_codes8 = arrange_codes8;
    t->arrange_codes16 = arrange_codes16;
    t->palette8 = q8_palette_avx2;
    t->palette16 = q16_palette_avx2;
    t->exp = exp_avx2;
    t->tanh = tanh_avx2;
    t->sigmoid = sigmoid_avx2;
    t->silu = silu_avx2;
    t->exp_shifted_sum = exp_shifted_sum_avx2;
    t->reduce_partials = reduce_partials_avx2;
    t->lut4_decode = lut4_decode;
}
#endif
