/* The AVX-512 BF16 kernels of the kernel table (kernels.h): 4-bit rows with float activations
 * through bf16 pair products (vdpbf16ps), their palettes as bf16 words. Taken on CPUs with
 * AVX512_BF16 (Zen 4, Sapphire Rapids; base/cpu.h), over the AVX-512 level. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../../../base/fp16.h"
#include "../../kernels.h"
#include "x86.h"

#define LUT4_INDEX(row, j) (((row)[(j) / 2] >> 4 * ((j) & 1)) & 15u) /* element j's palette index */
#define LUT4_ELEMENT(row, table, j) (table)[LUT4_INDEX(row, j)]

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

static void rows_lut4(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    if (!job->x_split) { /* rows shorter than a chunk */
        x86_rows_lut4_avx2(context, first, last);
        return;
    }
    if (job->words) /* (the words ride in the tables' place, 8 floats' bytes a row) */
        rows_in_groups(job, job->x_split, first, last, rows_avx512_lut4_words, job->k / 2, (const float *)job->words,
                       ANE_LUT4_ENTRIES / 2);
    else
        rows_in_groups(job, job->x_split, first, last, rows_avx512_lut4_bf16, job->k / 2, job->table, ANE_LUT4_ENTRIES);
}

static const float *split_lut4(float *x_split, const float *x, int64_t k) {
    if (!x_split || k < LUT4_BF16_CHUNK) return NULL;
    split_bf16(x_split, x, k);
    return x_split;
}

void ane_kernels_x86_avx512_bf16(ane_kernel_table *t) {
    t->rows_float[WEIGHTS_LUT4] = rows_lut4;
    t->split_lut4 = split_lut4;
    t->lut4_reads_words = 1;
}
#endif
