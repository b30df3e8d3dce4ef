/* What the x86 kernel files share (internal to arch/x86): the grouped row kernels' driver and
 * the AVX2 4-bit rows the AVX-512 levels fall back on for rows shorter than their chunks. */
#ifndef ANE_TENSOR_ARCH_X86_H
#define ANE_TENSOR_ARCH_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../../../base/fp16.h"
#include "../../kernels.h"

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

static inline void float_group(const void *context, int64_t row, int64_t apart, int count) {
    const float_groups *g = context;
    const float *tables = g->tables ? g->tables + row * g->table_stride : NULL;
    g->kernel((const char *)g->job->w + row * g->row_bytes, apart * g->row_bytes, g->job->k, g->x, tables,
              apart * g->table_stride, g->job->y + row, apart, count);
}

static inline void rows_in_groups(const gemv_job *job, const float *x, int64_t first, int64_t last, rows_kernel kernel,
                           int64_t row_bytes, const float *tables, int64_t table_stride) {
    float_groups groups = {job, x, kernel, row_bytes, tables, table_stride};
    in_row_groups(first, last, float_group, &groups);
}

/* Elements j .. j + 31 (j a multiple of 32) of a row of Q6_K blocks as 32 signed bytes x - 32, in
 * order: the 32 are one quarter of a half of a block (quantize.h: ane_q6_code), its nibbles from
 * one run of 32 ql bytes and its top two bits from qh's 32 bytes, shifted by the quarter. */
__attribute__((target("avx2"))) static inline __m256i q6_k_codes_avx2(const uint8_t *blocks, int64_t j) {
    const uint8_t *block = blocks + (j / ANE_Q6_K_WEIGHTS) * ANE_Q6_K_BYTES;
    int e = (int)(j % ANE_Q6_K_WEIGHTS), half = e / 128, part = e % 128 / 32;
    const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3);
    __m256i ql = _mm256_loadu_si256((const __m256i *)(block + 64 * half + 32 * (part & 1)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(block + 128 + 32 * half));
    __m256i nibbles = _mm256_and_si256(part < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
    __m256i top = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * part)), low2);
    return _mm256_sub_epi8(_mm256_or_si256(nibbles, _mm256_slli_epi16(top, 4)), _mm256_set1_epi8(32));
}

/* Elements j .. j + 31 (j a multiple of 32) of a row of Q5_K's packed blocks (quantize.h) as 32
 * unsigned bytes, in order: the block's 16 nibble bytes unpacked as Q4_K's, each fifth bit (bit
 * i % 8 of the block's byte 16 + i / 8) spread to its byte and moved to bit 4. */
__attribute__((target("avx2"))) static inline __m256i q5_k_codes_avx2(const uint8_t *row, int64_t j) {
    const uint8_t *block = row + (j / 32) * ANE_Q5_K_BYTES;
    const __m128i low4 = _mm_set1_epi8(15);
    __m128i bytes = _mm_loadu_si128((const __m128i *)block);
    __m128i low = _mm_and_si128(bytes, low4), high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
    __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi8(low, high), _mm_unpacklo_epi8(low, high));
    int32_t bits;
    memcpy(&bits, block + 16, sizeof bits);
    const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* (per 128-bit lane) */
                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit_of = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    __m256i spread = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(bits), byte_of), bit_of);
    __m256i fifth = _mm256_and_si256(_mm256_cmpeq_epi8(spread, bit_of), _mm256_set1_epi8(16));
    return _mm256_or_si256(codes, fifth);
}

/* The eight 16s' scales of half `half` (0, 1) of the Q6_K block at `block`, whose eight table
 * entries are at `table`: its int8 scales (bytes 192..207) times its fp16 d (bytes 208-209),
 * exact in fp32, the very values the table holds, which the kernels then need not read; for a
 * block of d = 0 (a program's: tensor/quantize.h) the table's. */
__attribute__((target("avx2,f16c"))) static inline __m256 q6_k_half_scales_avx2(const uint8_t *block, int half,
                                                                               const float *table) {
    uint16_t d = (uint16_t)(block[208] | block[209] << 8);
    if (!(d & 0x7FFFu)) return _mm256_loadu_ps(table); /* d = +-0 */
    __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(block + 192 + 8 * half)));
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16((short)d)), _mm256_cvtepi32_ps(sc)); /* (d converted by F16C) */
}

/* 4-bit rows through AVX2: with x_split (AVX2's split order) the two-byte kernel, else the exact lookup. */
void x86_rows_lut4_avx2(void *context, int64_t first, int64_t last);

#endif
