/* What the arm64 kernel files share (internal to arch/arm). */
#ifndef ANE_TENSOR_ARCH_NEON_H
#define ANE_TENSOR_ARCH_NEON_H

#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>

#include "../../kernels.h"

/* A 4-bit row's int8 palette entries for 32 elements (16 packed bytes, element 2i in byte i's
 * low nibble, 2i + 1 in its high one), in element order: the zipped nibbles index a tbl lookup. */
static inline void lut4_entries8(const uint8_t *packed, int8x16_t entries, int8x16_t *w0, int8x16_t *w1) {
    uint8x16_t bytes = vld1q_u8(packed);
    uint8x16_t low = vandq_u8(bytes, vdupq_n_u8(15)), high = vshrq_n_u8(bytes, 4);
    *w0 = vqtbl1q_s8(entries, vzip1q_u8(low, high));
    *w1 = vqtbl1q_s8(entries, vzip2q_u8(low, high));
}

/* A Q4_0 block's 32 signed codes (16 packed bytes, element 2i in byte i's low nibble, each
 * nibble its code's two's complement), in element order: zipped, then (n ^ 8) - 8. */
static inline void q4_codes(const uint8_t *packed, int8x16_t *w0, int8x16_t *w1) {
    uint8x16_t bytes = vld1q_u8(packed);
    uint8x16_t low = vandq_u8(bytes, vdupq_n_u8(15)), high = vshrq_n_u8(bytes, 4);
    *w0 = vsubq_s8(vreinterpretq_s8_u8(veorq_u8(vzip1q_u8(low, high), vdupq_n_u8(8))), vdupq_n_s8(8));
    *w1 = vsubq_s8(vreinterpretq_s8_u8(veorq_u8(vzip2q_u8(low, high), vdupq_n_u8(8))), vdupq_n_s8(8));
}

/* A Q4_K block's 32 unsigned codes (packed as Q4_0's), in element order. */
static inline void q4_unsigned_codes(const uint8_t *packed, int8x16_t *w0, int8x16_t *w1) {
    uint8x16_t bytes = vld1q_u8(packed);
    uint8x16_t low = vandq_u8(bytes, vdupq_n_u8(15)), high = vshrq_n_u8(bytes, 4);
    *w0 = vreinterpretq_s8_u8(vzip1q_u8(low, high));
    *w1 = vreinterpretq_s8_u8(vzip2q_u8(low, high));
}

/* Elements j .. j + 31 (j a multiple of 32) of a row of Q5_K's packed blocks (quantize.h) as codes
 * in order: the block's nibbles as Q4_K's, each fifth bit (bit i % 8 of the block's byte 16 + i / 8)
 * tested into its byte and moved to bit 4. */
static inline void q5_k_codes(const uint8_t *row, int64_t j, int8x16_t *w0, int8x16_t *w1) {
    const uint8_t *block = row + (j / 32) * ANE_Q5_K_BYTES;
    static const uint8_t bit_of[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bits = vld1q_u8(bit_of), sixteen = vdupq_n_u8(16);
    q4_unsigned_codes(block, w0, w1);
    uint8x16_t first = vcombine_u8(vdup_n_u8(block[16]), vdup_n_u8(block[17]));
    uint8x16_t second = vcombine_u8(vdup_n_u8(block[18]), vdup_n_u8(block[19]));
    *w0 = vorrq_s8(*w0, vreinterpretq_s8_u8(vandq_u8(vtstq_u8(first, bits), sixteen)));
    *w1 = vorrq_s8(*w1, vreinterpretq_s8_u8(vandq_u8(vtstq_u8(second, bits), sixteen)));
}

/* Elements j .. j + 31 (j a multiple of 32) of a row of Q6_K blocks as signed codes x - 32, in
 * order: one quarter of a half of a block (quantize.h: ane_q6_code), its nibbles from one run of
 * 32 ql bytes, its top two bits from qh's 32, shifted by the quarter. */
static inline void q6_k_codes(const uint8_t *blocks, int64_t j, int8x16_t *w0, int8x16_t *w1) {
    const uint8_t *block = blocks + (j / ANE_Q6_K_WEIGHTS) * ANE_Q6_K_BYTES;
    int e = (int)(j % ANE_Q6_K_WEIGHTS), half = e / 128, part = e % 128 / 32;
    int8x16_t codes[2];
    for (int h = 0; h < 2; h++) {
        uint8x16_t ql = vld1q_u8(block + 64 * half + 32 * (part & 1) + 16 * h);
        uint8x16_t qh = vld1q_u8(block + 128 + 32 * half + 16 * h);
        uint8x16_t nibbles = part < 2 ? vandq_u8(ql, vdupq_n_u8(15)) : vshrq_n_u8(ql, 4);
        uint8x16_t top = vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * part))), vdupq_n_u8(3));
        codes[h] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(nibbles, vshlq_n_u8(top, 4))), vdupq_n_s8(32));
    }
    *w0 = codes[0], *w1 = codes[1];
}

/* A level's exact integer sum of 32 int8 weights (two registers) times 32 int8 codes. */
typedef int32_t (*block_sum8_fn)(int8x16_t w0, int8x16_t w1, const int8_t *codes);

/* The products of an int8 row / a 4-bit row with int8 activations through a level's block sum:
 * each whole block's scale x exact integer sum added to the row's total in order (the scalar
 * kernels' sums, so the scalar bits), then the tail through the scalar code. Inlined with the
 * level's block_sum (neon.c, dotprod.c). */
static inline __attribute__((always_inline)) float q8_int8_with(const int8_t *q, const code_vector *v, block_sum8_fn block_sum) {
    int64_t whole = v->k / Q8_BLOCK * Q8_BLOCK, j = 0;
    float total = 0.0f;
    for (; j < whole; j += Q8_BLOCK)
        total += v->block_scales[j / Q8_BLOCK] * (float)block_sum(vld1q_s8(q + j), vld1q_s8(q + j + 16), v->codes8 + j);
    return total + q8_int8_from(q, v, j);
}

static inline __attribute__((always_inline)) float q8_lut4_with(const uint8_t *packed, const palette8 *p, const code_vector *v,
                                                                block_sum8_fn block_sum) {
    int8x16_t entries = vld1q_s8(p->entries);
    int64_t whole = v->k / Q8_BLOCK * Q8_BLOCK, j = 0;
    float total = 0.0f;
    for (; j < whole; j += Q8_BLOCK) {
        int8x16_t w0, w1;
        lut4_entries8(packed + j / 2, entries, &w0, &w1);
        total += v->block_scales[j / Q8_BLOCK] * (float)block_sum(w0, w1, v->codes8 + j);
    }
    return total + q8_lut4_from(packed, p, v, j);
}

/* Q8_0 / Q4_0 / Q6_K / Q4_K rows with int8 activations through a level's block sum: blocks_int8's
 * sums (each block's exact integer sum times the two scales, added in order; Q6_K's per 16, the
 * other 16 of the 32 zeros; Q4_K's with its code sum, the block sum of ones), so its bits. */
static inline __attribute__((always_inline)) float blocks_int8_with(ane_weight_encoding encoding, const void *codes,
                                                                    const float *scales, const code_vector *v,
                                                                    block_sum8_fn block_sum) {
    float total = 0.0f;
    for (int64_t b = 0; b < v->k / ANE_ENCODING_BLOCK; b++) {
        int8x16_t w0, w1;
        if (encoding == ANE_ENCODING_Q8_0) {
            w0 = vld1q_s8((const int8_t *)codes + 32 * b), w1 = vld1q_s8((const int8_t *)codes + 32 * b + 16);
        } else if (encoding == ANE_ENCODING_Q4_0) {
            q4_codes((const uint8_t *)codes + 16 * b, &w0, &w1);
        } else if (ane_encoding_is_shifted(encoding)) {
            if (encoding == ANE_ENCODING_Q4_K) q4_unsigned_codes((const uint8_t *)codes + 16 * b, &w0, &w1);
            else q5_k_codes(codes, 32 * b, &w0, &w1); /* (below 32: the same bytes as signed ones) */
            const int8x16_t ones = vdupq_n_s8(1);
            float sum = (float)block_sum(w0, w1, v->codes8 + 32 * b), code_sum = (float)block_sum(ones, ones, v->codes8 + 32 * b);
            float both = scales[2 * b] * v->block_scales[b], shifted = sum - scales[2 * b + 1] * code_sum;
            total += both * shifted;
            continue;
        } else {
            q6_k_codes(codes, 32 * b, &w0, &w1);
            const int8x16_t none = vdupq_n_s8(0);
            total += (scales[2 * b] * v->block_scales[b]) * (float)block_sum(w0, none, v->codes8 + 32 * b);
            total += (scales[2 * b + 1] * v->block_scales[b]) * (float)block_sum(none, w1, v->codes8 + 32 * b);
            continue;
        }
        total += (scales[b] * v->block_scales[b]) * (float)block_sum(w0, w1, v->codes8 + 32 * b);
    }
    return total;
}

/* Defines rows_blocks_int8 (the table's entry) over a level's block sum: Q8_0, Q4_0, Q6_K, Q4_K and Q5_K
 * through blocks_int8_with. */
#define BLOCKS_INT8_ROWS(block_sum)                                                                              \
    static float q8_0_int8(const void *codes, const float *scales, const code_vector *v) {                       \
        return blocks_int8_with(ANE_ENCODING_Q8_0, codes, scales, v, block_sum);                                 \
    }                                                                                                            \
    static float q4_0_int8(const void *codes, const float *scales, const code_vector *v) {                       \
        return blocks_int8_with(ANE_ENCODING_Q4_0, codes, scales, v, block_sum);                                 \
    }                                                                                                            \
    static float q6_k_int8(const void *codes, const float *scales, const code_vector *v) {                       \
        return blocks_int8_with(ANE_ENCODING_Q6_K, codes, scales, v, block_sum);                                 \
    }                                                                                                            \
    static float q4_k_int8(const void *codes, const float *scales, const code_vector *v) {                       \
        return blocks_int8_with(ANE_ENCODING_Q4_K, codes, scales, v, block_sum);                                 \
    }                                                                                                            \
    static float q5_k_int8(const void *codes, const float *scales, const code_vector *v) {                       \
        return blocks_int8_with(ANE_ENCODING_Q5_K, codes, scales, v, block_sum);                                 \
    }                                                                                                            \
    static void rows_blocks_int8(void *context, int64_t first, int64_t last) {                                   \
        static const block_dots_int8 dots = {q8_0_int8, q4_0_int8, q6_k_int8, q4_k_int8, q5_k_int8};             \
        integer_block_rows(context, first, last, &dots);                                                         \
    }
#endif

#endif
